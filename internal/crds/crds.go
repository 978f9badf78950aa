// Package crds holds the CustomResourceDefinitions meshchaos installs: Istio's own, which every
// control plane under test reads (the reference control plane and istiod alike) and the harness
// creates objects of. Neither the harness nor the reference control plane owns them, so they
// live apart from both.
package crds

import _ "embed"

// Istio is the YAML of the ServiceEntry, WorkloadEntry, Sidecar, Gateway and VirtualService
// CRDs (istio.io/api v1.31.1), serving networking.istio.io/v1.
//
//go:embed istio.yaml
var Istio []byte
