#!/usr/bin/env bash
# Installs what the local substrate needs from the host's package manager when it is missing:
# containerd, runc, the CNI plugins (bridge, host-local, portmap, loopback) and iptables.
set -euo pipefail
if [ "$(uname -s)" != Linux ]; then
  echo "meshchaos: the local substrate needs Linux (it runs Kubernetes in network namespaces); on this OS use --substrate kind with Docker instead." >&2
  exit 2
fi
if [ "$(id -u)" != 0 ]; then
  echo "meshchaos: the local substrate needs root (network namespaces, cgroups, containerd); run 'sudo make deps', or use --substrate kind with Docker instead." >&2
  exit 2
fi
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/portmap ] && [ -x /usr/lib/cni/loopback ] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v ip >/dev/null || need+=(iproute2)
command -v nsenter >/dev/null || need+=(util-linux)
command -v conntrack >/dev/null || need+=(conntrack)
if [ ${#need[@]} = 0 ]; then
  echo "deps: containerd, runc, CNI plugins, iptables present"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "meshchaos: missing ${need[*]} and no apt-get to install them; install them with your package manager (CNI plugins into /usr/lib/cni)." >&2
  exit 2
fi
echo "deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "deps: installed ${need[*]}"
