#!/usr/bin/env bash
# make test / make test-nightly: one tier of the tests (hack/tiers.txt lists tier 2; the rest is
# tier 1), through go test -json and hack/testreport (progress, failures with their output, the
# counts, every skip with its reason, the ten slowest tests).
#
#   hack/test.sh BIN TIMEOUT tier1|nightly
#
# The kind tests need Docker and the kind node image: on a machine without a running Docker (our
# CI VM) this starts dockerd with hack/docker.sh (root only) and stops it again on exit; a Docker
# that was already running is left alone. In CI (CI set, as .ci/run sets it) a prerequisite that
# cannot be had fails the run, and so does any skipped test; elsewhere the tests that need it
# skip and the summary lists them.
set -uo pipefail
bin=$1 timeout=$2 tier=$3
cd "$(dirname "$0")/.."
GO=${GO:-go}
ci=${CI:-}
out=$bin/test
mkdir -p "$out"

need() { # need WHAT: a prerequisite is missing
  if [ -n "$ci" ]; then
    echo "meshchaos: $1 (CI: a missing prerequisite fails the run)" >&2
    exit 1
  fi
  echo "meshchaos: $1; the tests that need it will skip" >&2
}

started=
if ! docker info >/dev/null 2>&1; then
  if bash hack/docker.sh; then
    started=1
  else
    need "Docker cannot run here (see above)"
  fi
fi
stop() { if [ -n "$started" ]; then bash hack/docker.sh stop; fi; }
trap stop EXIT
if docker info >/dev/null 2>&1; then
  make --no-print-directory kind-node-image BIN="$bin" || need "the kind node image could not be built (see above)"
fi

# pattern PACKAGE: its tier-2 tests as a -run or -skip pattern ("*": all of them).
pattern() { awk -v p="$1" '$1 == p { for (i = 2; i <= NF; i++) printf "%s%s", (n++ ? "|" : ""), $i }' hack/tiers.txt; }
listed=$(awk '!/^#/ && NF { print $1 }' hack/tiers.txt)
whole=$(awk '!/^#/ && $2 == "*" { print $1 }' hack/tiers.txt)

$GO build -o "$bin/testreport" ./hack/testreport || exit 2
failed=$out/$tier.failed
rm -f "$failed"
gotest() { # gotest ARGS...: one go test -json run; a failure is recorded for the exit code
  MESHCHAOS_BIN_DIR=$bin MESHCHAOS_IMAGES=$bin/images $GO test -json -p 1 -count=1 -timeout "$timeout" "$@" || echo "go test $*" >>"$failed"
}
report=(-tier "$tier" -save "$out/$tier.json")
[ -n "$ci" ] && report+=(-no-skips)

case $tier in
tier1)
  others=$($GO list ./... | sed "s|^github.com/meshchaos/meshchaos|.|" | grep -vxF "$listed")
  {
    # shellcheck disable=SC2086 # a list of packages
    gotest $others
    for p in $listed; do
      if ! grep -qxF "$p" <<<"$whole"; then gotest -skip "^($(pattern "$p"))\$" "$p"; fi
    done
  } | "$bin/testreport" "${report[@]}"
  ;;
nightly)
  {
    for p in $listed; do
      if grep -qxF "$p" <<<"$whole"; then gotest "$p"; else gotest -run "^($(pattern "$p"))\$" "$p"; fi
    done
  } | "$bin/testreport" "${report[@]}"
  ;;
*)
  echo "usage: hack/test.sh BIN TIMEOUT tier1|nightly" >&2
  exit 2
  ;;
esac
rc=$?
if [ -s "$failed" ]; then
  echo "meshchaos: failed: $(paste -sd';' "$failed")" >&2
  rc=1
fi
exit $rc
