#!/usr/bin/env bash
# Makes Docker usable for the kind substrate on a machine that has none running, such as our CI
# VM; on a machine where `docker info` already works it does nothing at all.
#
#   hack/docker.sh          install docker.io from Debian if dockerd is missing, start dockerd
#   hack/docker.sh stop     stop the dockerd this script started (leaves it installed)
#
# Machine specifics it handles (measured on the CI VM: cgroup v1, no systemd as PID 1):
#  - The VM's capability bounding set lacks CAP_SYS_RESOURCE, so runc fails every privileged
#    container ("unable to apply caps: operation not permitted"). When the bounding set is not
#    full, dockerd gets hack/runcwrap as its default runtime: it drops the capabilities the
#    bounding set lacks from the container's spec, then execs runc. Nothing else changes.
#  - dockerd runs with --iptables=false: kind needs no NAT or published ports from dockerd here
#    (the harness reaches nodes at their container addresses on the bridge), and the host's
#    firewall (its FORWARD policy, which dockerd would set to DROP) stays as it was for the local
#    substrate's clusters.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state=/run/meshchaos-dockerd
pidfile=$state/dockerd.pid
wrapper=/usr/local/lib/meshchaos/runcwrap

if [ "${1:-}" = stop ]; then
  if [ -f "$pidfile" ]; then
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    rm -f "$pidfile"
    echo "docker: stopped dockerd (pid $pid)"
  fi
  exit 0
fi

if docker info >/dev/null 2>&1; then
  echo "docker: usable ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "meshchaos: Docker is not running and this is not root; start Docker (or run 'sudo hack/docker.sh')." >&2
  exit 2
fi
if ! command -v dockerd >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "meshchaos: no dockerd and no apt-get; install Docker with your package manager and start it." >&2
    exit 2
  fi
  echo "docker: installing docker.io from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi

args=(--iptables=false --ip-masq=false --pidfile "$pidfile" --exec-root "$state/exec")
bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
# A bounding set without CAP_SYS_RESOURCE (bit 24) cannot start privileged containers with runc.
if (( (0x$bnd >> 24 & 1) == 0 )); then
  echo "docker: capability bounding set $bnd lacks CAP_SYS_RESOURCE; dockerd's runtime is $wrapper"
  mkdir -p "$(dirname "$wrapper")"
  (cd "$here/.." && CGO_ENABLED=0 go build -trimpath -o "$wrapper" ./hack/runcwrap)
  args+=(--add-runtime "meshchaos-runc=$wrapper" --default-runtime meshchaos-runc)
fi
mkdir -p "$state"
echo "docker: starting dockerd (log $state/dockerd.log)"
setsid dockerd "${args[@]}" >"$state/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 120); do
  if docker info >/dev/null 2>&1; then
    echo "docker: usable (dockerd pid $(cat "$pidfile"))"
    exit 0
  fi
  sleep 0.5
done
echo "meshchaos: dockerd did not come up in 60s; see $state/dockerd.log" >&2
tail -20 "$state/dockerd.log" >&2
exit 1
