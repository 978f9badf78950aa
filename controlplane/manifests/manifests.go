// Package manifests holds what the reference control plane needs in a cluster besides Istio's
// CRDs (internal/crds, which every control plane under test reads): its Namespace, RBAC,
// Deployment and Service, embedded so the harness can apply them.
package manifests

import (
	"bytes"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/meshchaos/meshchaos/images"
)

//go:embed controlplane.yaml
var controlPlaneTemplate string

// MemoryRequest is the control plane container's memory request. A memory limit below it is
// not a valid Deployment (the API server refuses limits below requests).
const MemoryRequest = "128Mi"

// DefaultMemoryLimit is the container's memory limit when Params.MemoryLimit is empty.
const DefaultMemoryLimit = "1Gi"

// Params fill the control plane's manifests.
type Params struct {
	Namespace  string   // default meshchaos-system
	Image      string   // default images.Ref("controlplane")
	PullPolicy string   // default Never (images are imported, there is no registry)
	SyncGate   bool     // --sync-gate
	Regress    []string // --regress switches
	// Generation is --generation, one of Generations ("" leaves the binary's default,
	// per-scope).
	Generation  string
	MemoryLimit string // default DefaultMemoryLimit
	ProxyImage  string // the injected sidecar; default images.Ref("xdsproxy")
	// BallastMaxMiB allows the admin port's memory ballast up to this size (--ballast-max);
	// 0, the default, leaves it off: only a run that OOM-kills the control plane sets it.
	BallastMaxMiB int
	// RootCertNamespaces is the label selector of the namespaces the root certificate
	// ConfigMap (meshchaos-ca-root-cert) is written into (--root-cert-namespaces): the harness
	// gives the run's, meshchaos.io/run=NAME. Default DefaultRootCertNamespaces: the namespaces
	// of meshchaos runs, never a shared cluster's others (the binary's own default, every
	// namespace, is istiod's).
	RootCertNamespaces string
}

// Generations are the values of the control plane's --generation (xds.Generations; the
// harness checks a --cp spec against these without linking the xDS server).
var Generations = []string{"per-scope", "per-proxy"}

// DefaultRootCertNamespaces selects the namespaces of any meshchaos run (the harness labels
// them meshchaos.io/run=NAME).
const DefaultRootCertNamespaces = "meshchaos.io/run"

// ControlPlane renders the Namespace, ServiceAccount, ClusterRole(Binding), Role(Binding) (the
// CA Secret), Deployment and Service of the reference control plane, and its admission
// webhooks' configurations (sidecar injection, config validation). It serves xDS on 15010
// (plaintext) and 15012 (TLS, ServiceAccount tokens), and injects sidecars that dial 15012. Its
// readiness probe is /ready (the sync gate).
func ControlPlane(p Params) ([]byte, error) {
	if p.Namespace == "" {
		p.Namespace = "meshchaos-system"
	}
	if p.Image == "" {
		p.Image = images.Ref("controlplane")
	}
	if p.PullPolicy == "" {
		p.PullPolicy = "Never"
	}
	if p.ProxyImage == "" {
		p.ProxyImage = images.Ref("xdsproxy")
	}
	if p.MemoryLimit == "" {
		p.MemoryLimit = DefaultMemoryLimit
	}
	if p.RootCertNamespaces == "" {
		p.RootCertNamespaces = DefaultRootCertNamespaces
	}
	if p.Generation != "" && !slices.Contains(Generations, p.Generation) {
		return nil, fmt.Errorf("control plane manifest: unknown generation mode %q (known: %s)", p.Generation, strings.Join(Generations, ", "))
	}
	t, err := template.New("controlplane").Parse(controlPlaneTemplate)
	if err != nil {
		return nil, fmt.Errorf("parse control plane manifest: %w", err)
	}
	var b bytes.Buffer
	data := struct {
		Params
		MemoryRequest string
	}{p, MemoryRequest}
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("render control plane manifest: %w", err)
	}
	return b.Bytes(), nil
}
