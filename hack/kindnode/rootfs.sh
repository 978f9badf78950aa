#!/usr/bin/env bash
# Builds the kind node image's Debian root filesystem with debootstrap (no registry: Debian's
# mirror is an apt source) and writes it as OUT (a tarball), cached by what goes into it.
# Needs root (debootstrap chroots). Usage: rootfs.sh OUT.tar
set -euo pipefail
out=$1
suite=${KIND_NODE_SUITE:-bookworm}
mirror=${KIND_NODE_MIRROR:-http://deb.debian.org/debian}
# What a kind node runs besides the Kubernetes binaries: systemd as PID 1, containerd and runc
# (the CRI), the CNI plugins, and the tools kubeadm's preflight and kube-proxy call.
pkgs=systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,iptables,nftables,iproute2,conntrack,ebtables,ethtool,socat,kmod,util-linux,mount,ca-certificates,jq,procps,bash
# The cache key: what goes into the rootfs (bump the 1 when the steps below change).
stamp=$(echo "1 $suite $mirror $pkgs" | sha256sum | cut -c1-16)
if [ -s "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "kind-node rootfs: up to date ($out)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "meshchaos: building the kind node rootfs needs root (debootstrap); run 'sudo make kind-node-image'." >&2
  exit 2
fi
command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(cd "$(dirname "$out")" && pwd)/rootfs.XXXXXX")
root=$work/root
cleanup() {
  # debootstrap mounts /proc and /sys in the target; a failed run can leave them.
  for m in $(awk -v r="$root" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do umount -l "$m" || true; done
  rm -rf "$work"
}
trap cleanup EXIT
start=$(date +%s)
echo "kind-node rootfs: debootstrap $suite ($mirror) into $root"
debootstrap --variant=minbase --include="$pkgs" "$suite" "$root" "$mirror" > "$work/debootstrap.log" 2>&1 || {
  tail -30 "$work/debootstrap.log" >&2; exit 1; }
# As kind's base image: no units that make no sense in a container, no package caches.
rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
  "$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
  "$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/basic.target.wants/*
find "$root"/lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
ln -sf /dev/null "$root"/etc/systemd/system/systemd-binfmt.service
echo "ReadKMsg=no" >> "$root"/etc/systemd/journald.conf
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc "$root"/usr/share/man
tar --numeric-owner --xattrs -C "$root" -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "$stamp" > "$out.stamp"
echo "kind-node rootfs: $(du -h "$out" | cut -f1) in $(( $(date +%s) - start ))s"
