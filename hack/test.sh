#!/usr/bin/env bash
# make test: every test, with the kind substrate's when Docker can run kind nodes here.
#
#   hack/test.sh BIN TIMEOUT [PACKAGES...]   (default ./...)
#
# On a machine without a running Docker (our CI VM) this starts dockerd with hack/docker.sh
# (root only) and stops it again on exit; a Docker that was already running is left alone. When
# Docker or the node image cannot be had, the kind tests skip and say why; nothing else changes.
set -uo pipefail
bin=$1 timeout=$2
shift 2
pkgs=("${@:-./...}")
cd "$(dirname "$0")/.."
started=
if ! docker info >/dev/null 2>&1; then
  if bash hack/docker.sh; then
    started=1
  else
    echo "meshchaos: the kind tests will skip: Docker cannot run here (see above)"
  fi
fi
stop() { if [ -n "$started" ]; then bash hack/docker.sh stop; fi; }
trap stop EXIT
if docker info >/dev/null 2>&1; then
  if ! make --no-print-directory kind-node-image BIN="$bin"; then
    echo "meshchaos: the kind tests will skip: the kind node image could not be built (see above)"
  fi
fi
MESHCHAOS_BIN_DIR=$bin MESHCHAOS_IMAGES=$bin/images ${GO:-go} test -p 1 -count=1 -timeout "$timeout" "${pkgs[@]}"
