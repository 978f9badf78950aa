#!/usr/bin/env bash
# Assembles the kind node image from the rootfs and the binaries and loads it into Docker, unless
# Docker already has the one built from these exact inputs. Usage: image.sh MESHCHAOS BIN OUTDIR
set -euo pipefail
meshchaos=$1 bin=$2 out=$3
ref=$("$meshchaos" images kind-node --print-ref)
inputs=("$out/rootfs.tar" "$bin"/{kubeadm,kubelet,kubectl,kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy,etcd,coredns,pause,runcwrap} "$meshchaos")
key=$(sha256sum "${inputs[@]}" | sha256sum | cut -c1-16)
if [ "$(docker image inspect --format '{{index .Config.Labels "io.meshchaos.inputs"}}' "$ref" 2>/dev/null)" = "$key" ]; then
  echo "kind-node image: $ref up to date"
  exit 0
fi
start=$(date +%s)
"$meshchaos" images kind-node --rootfs "$out/rootfs.tar" --bin-dir "$bin" --out "$out/image.tar" --inputs "$key"
docker load -i "$out/image.tar"
rm -f "$out/image.tar"
# The image it replaces is left untagged (~800 MB); drop it.
docker image prune -f --filter "label=io.meshchaos.image=kind-node" >/dev/null
echo "kind-node image: $ref built and loaded in $(( $(date +%s) - start ))s"
