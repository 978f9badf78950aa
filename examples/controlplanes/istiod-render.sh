#!/bin/sh
# Renders istiod from istio's own Helm charts for meshchaos (examples/controlplanes/istiod.yaml):
# the istio-system Namespace, the base chart (CRDs, the ServiceEntry/WorkloadEntry kinds our
# experiments create) and the istiod chart. Needs helm and access to istio's chart repository;
# the cluster then pulls docker.io/istio/pilot. Set ISTIO_VERSION to test another release.
set -eu
v=${ISTIO_VERSION:-1.24.2}
repo=https://istio-release.storage.googleapis.com/charts
printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: istio-system\n---\n'
helm template istio-base "$repo/base-$v.tgz" --namespace istio-system
echo ---
# Plaintext xDS on 15010 is istiod's default (grpc-xds), so meshchaos's proxies need no mTLS
# bootstrap. One replica, no autoscaling: the harness places and limits the Deployment itself.
helm template istiod "$repo/istiod-$v.tgz" --namespace istio-system \
	--set autoscaleEnabled=false --set pilot.autoscaleEnabled=false --set pilot.replicaCount=1 \
	--set pilot.env.PILOT_ENABLE_STATUS=false
