#!/usr/bin/env bash
# Builds istiod from istio's own source at each pin of hack/istiod/pins, offline but for the Go
# module proxy (no registry, no helm binary), into OUT/istiod/<NAME>/ (OUT default: ../../bin):
#
#   pilot-discovery   static, stripped (go install istio.io/istio/pilot/cmd/pilot-discovery@VERSION)
#   manifests/        00-namespace.yaml, 10-base.yaml (CRDs, base objects), 20-istiod.yaml: istio's
#                     charts from the same module, rendered by render/ with values.yaml
#   pilot.tar         the image the rendered Deployment runs (its reference is in image), built by
#                     'meshchaos images binary'. Not in bin/images: clusters import every tar there,
#                     and only runs of istiod need this one.
#   image             that reference;  .stamp  what was built (a rebuild with the same inputs is a no-op)
#
# OUT/istiod/default links to the pin marked default. Usage: build.sh [OUT [NAME…]]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/bin}
shift || true
only=("$@")
mkdir -p "$out/istiod"
out=$(cd "$out" && pwd)
dir=$out/istiod
meshchaos=${MESHCHAOS:-$out/meshchaos}
hub=meshchaos.local/istio # values.yaml's global.hub; the image is $hub/pilot:<NAME>
at=/usr/local/bin/pilot-discovery # the chart's container has args only: this is the entrypoint

# What every pin's build depends on besides its pin line. images.go decides the image's layout.
common=$(cat "$here/build.sh" "$here/values.yaml" "$here"/render/{go.mod,go.sum,main.go} "$root/images/images.go" | sha256sum | cut -c1-16)

# gomod FIELD MODULE@VERSION [GONOSUMDB]: a field of `go mod download -json` (downloads if needed).
gomod() {
	GONOSUMDB=${3:-} go mod download -json "$2" | sed -n "s/^\t\"$1\": \"\(.*\)\",\?$/\1/p"
}

renderer=""
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mib() { echo "$(($(stat -c %s "$1") / 1048576)) MiB"; }
build_renderer() {
	[ -n "$renderer" ] && return
	renderer=$dir/.render
	echo "istiod: building the chart renderer (hack/istiod/render: Helm's SDK)"
	(cd "$here/render" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$renderer" .)
}

# checksums MODDIR NOSUMDB: the modules fetched without the checksum database must match istio's
# own go.sum, hash for hash (zip and go.mod), at the versions istio's go.mod requires.
checksums() {
	local moddir=$1 list=$2 m v sum modsum
	for m in ${list//,/ }; do
		v=$(awk -v m="$m" '$1==m {print $2} $1=="require" && $2==m {print $3}' "$moddir/go.mod" | head -1)
		[ -n "$v" ] || { echo "istiod: $m is not required by istio's go.mod" >&2; return 1; }
		sum=$(gomod Sum "$m@$v" "$list")
		modsum=$(gomod GoModSum "$m@$v" "$list")
		if ! grep -qxF "$m $v $sum" "$moddir/go.sum" || ! grep -qxF "$m $v/go.mod $modsum" "$moddir/go.sum"; then
			echo "istiod: $m@$v ($sum, go.mod $modsum) does not match istio's go.sum" >&2
			return 1
		fi
		echo "  $m@$v: not in the checksum database; matches istio's go.sum ($sum)"
	done
}

build_pin() {
	local name=$1 version=$2 nosumdb=$3 stamp=$4 start=$SECONDS
	local tmp=$dir/.$name.tmp ref=$hub/pilot:$name
	echo "istiod $name: building istio.io/istio@$version (cold: 6-7 min on 2 cores; warm: ~15 s)"
	build_renderer
	rm -rf "$tmp" && mkdir -p "$tmp/manifests"
	# Outside any module: go install pkg@version uses istio's go.mod alone (it has no replaces).
	cd "$work"
	local moddir
	moddir=$(gomod Dir "istio.io/istio@$version")
	[ -n "$nosumdb" ] && checksums "$moddir" "$nosumdb"
	# As istio's own builds stamp it (common/scripts/report_build_info.sh); VERSION holds "1.NN"
	# and a build from a commit calls itself 1.NN-dev. A pseudo-version ends in the commit.
	local vp=istio.io/istio/pkg/version
	local ldflags="-s -w -X $vp.buildVersion=$(cat "$moddir/VERSION")-dev -X $vp.buildGitRevision=${version##*-}"
	ldflags+=" -X $vp.buildStatus=Clean -X $vp.buildTag=$version -X $vp.buildHub=$hub -X $vp.buildOS=linux -X $vp.buildArch=amd64"
	local t=$SECONDS
	GONOSUMDB=$nosumdb GOBIN=$tmp CGO_ENABLED=0 GOOS=linux GOARCH=amd64 \
		go install -trimpath -ldflags "$ldflags" "istio.io/istio/pilot/cmd/pilot-discovery@$version"
	echo "  pilot-discovery: $(mib "$tmp/pilot-discovery") in $((SECONDS - t))s"

	local charts=$moddir/manifests/charts
	printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: istio-system\n' >"$tmp/manifests/00-namespace.yaml"
	"$renderer" -chart "$charts/base" -namespace istio-system -release base >"$tmp/manifests/10-base.yaml"
	"$renderer" -chart "$charts/istio-control/istio-discovery" -values "$here/values.yaml" \
		-set "global.tag=$name" -namespace istio-system -release istiod >"$tmp/manifests/20-istiod.yaml"
	if ! grep -qF "image: \"$ref\"" "$tmp/manifests/20-istiod.yaml"; then
		echo "istiod $name: the rendered Deployment does not run $ref:" >&2
		grep -n 'image: ' "$tmp/manifests/20-istiod.yaml" | grep -v '{{' >&2 || true
		return 1
	fi
	echo "  manifests: $(cd "$tmp/manifests" && for f in *.yaml; do printf '%s %s objects; ' "$f" "$(grep -c '^kind: ' "$f")"; done)"

	t=$SECONDS
	# uid 1337 as istio's own image (the chart asks runAsNonRoot and sets no runAsUser).
	"$meshchaos" images binary --ref "$ref" --binary "$tmp/pilot-discovery" --at "$at" --user 1337:1337 \
		--label io.meshchaos.image=istio/pilot --label "io.meshchaos.istio=$version" --out "$tmp/pilot.tar" >/dev/null
	echo "$ref" >"$tmp/image"
	echo "  pilot.tar: $ref, $(mib "$tmp/pilot.tar") in $((SECONDS - t))s"
	echo "$stamp" >"$tmp/.stamp"
	rm -rf "${dir:?}/$name" && mv "$tmp" "$dir/$name"
	cd "$root"
	echo "istiod $name: built in $((SECONDS - start))s into $dir/$name"
}

found=0
while read -r name version rest; do
	case $name in '' | '#'*) continue ;; esac
	nosumdb=""
	for f in $rest; do
		case $f in
		default) ln -sfn "$name" "$dir/default" ;;
		nosumdb=*) nosumdb=${f#nosumdb=} ;;
		*) echo "hack/istiod/pins: $name: unknown field $f" >&2 && exit 2 ;;
		esac
	done
	if [ ${#only[@]} -gt 0 ] && ! printf '%s\n' "${only[@]}" | grep -qxF "$name"; then
		continue
	fi
	found=$((found + 1))
	stamp="$version $nosumdb $common"
	if [ "$(cat "$dir/$name/.stamp" 2>/dev/null)" = "$stamp" ] &&
		[ -x "$dir/$name/pilot-discovery" ] && [ -s "$dir/$name/pilot.tar" ]; then
		echo "istiod $name: up to date in $dir/$name ($(cat "$dir/$name/image"))"
		continue
	fi
	[ -x "$meshchaos" ] || { echo "istiod: $meshchaos missing: run 'make build'" >&2 && exit 2; }
	build_pin "$name" "$version" "$nosumdb" "$stamp"
done <"$here/pins"
if [ ${#only[@]} -gt 0 ] && [ "$found" != ${#only[@]} ]; then
	echo "istiod: unknown pin in: ${only[*]} (see hack/istiod/pins)" >&2
	exit 2
fi
