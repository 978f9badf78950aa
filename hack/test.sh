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
report=(-tier "$tier" -save "$out/$tier.json")
[ -n "$ci" ] && report+=(-no-skips)

# The tier's runs, one a line: PACKAGE [-run|-skip PATTERN].
jobs=()
case $tier in
tier1)
  for p in $($GO list ./... | sed "s|^github.com/meshchaos/meshchaos|.|" | grep -vxF "$listed"); do jobs+=("$p"); done
  for p in $listed; do
    if ! grep -qxF "$p" <<<"$whole"; then jobs+=("$p -skip ^($(pattern "$p"))\$"); fi
  done
  ;;
nightly)
  for p in $listed; do
    if grep -qxF "$p" <<<"$whole"; then jobs+=("$p"); else jobs+=("$p -run ^($(pattern "$p"))\$"); fi
  done
  ;;
*)
  echo "usage: hack/test.sh BIN TIMEOUT tier1|nightly" >&2
  exit 2
  ;;
esac

# Test binaries are built ahead, two at a time and niced, while the tests run one package at a
# time: go test -p 1 built each package's binary only when it came to it (80 s of make test's
# 15 min, one core idle meanwhile). A package whose binary is not there once its build ended (no
# test files, or a build error) runs through go test itself, which reports either as usual.
mod=$($GO list -m)
tbin=$out/bin.$tier
rm -rf "$tbin" && mkdir -p "$tbin"
binname() { printf '%s' "$1" | tr './' '_-'; }
# One line a package: PACKAGE FILE (its binary's path without .test), named by binname alone.
for j in "${jobs[@]}"; do p=${j%% *}; printf '%s %s\n' "$p" "$tbin/$(binname "$p")"; done | awk '!seen[$1]++' |
  GO=$GO xargs -P 2 -L 1 sh -c 'nice -n 10 $GO test -c -o "$2.test" "$1" >"$2.log" 2>&1; touch "$2.done"' sh &
builder=$!
trap 'kill "$builder" 2>/dev/null; stop' EXIT

gotest() { # gotest PACKAGE [-run|-skip PATTERN]: one package's tests as go test -json prints them
  local p=$1 f
  shift
  f=$tbin/$(binname "$p")
  while [ ! -e "$f.done" ] && kill -0 "$builder" 2>/dev/null; do sleep 0.2; done
  if [ -x "$f.test" ]; then
    # As go test runs it: in the package's directory, its output through test2json.
    (cd "$p" && MESHCHAOS_BIN_DIR=$bin MESHCHAOS_IMAGES=$bin/images $GO tool test2json -t -p "$mod${p#.}" "$f.test" \
      -test.v=test2json -test.paniconexit0 -test.count=1 -test.timeout="$timeout" ${1:+"-test.${1#-}"} ${2:+"$2"}) ||
      echo "go test $p $*" >>"$failed"
    rm -f "$f.test" # tens of MB each: gone once run
  else
    MESHCHAOS_BIN_DIR=$bin MESHCHAOS_IMAGES=$bin/images $GO test -json -count=1 -timeout "$timeout" "$@" "$p" || echo "go test $p $*" >>"$failed"
  fi
}

{
  for j in "${jobs[@]}"; do
    # shellcheck disable=SC2086 # PACKAGE and its flag and pattern
    gotest $j
  done
} | "$bin/testreport" "${report[@]}"
rc=$?
if [ -s "$failed" ]; then
  echo "meshchaos: failed: $(paste -sd';' "$failed")" >&2
  rc=1
fi
exit $rc
