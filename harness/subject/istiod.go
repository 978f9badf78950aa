package subject

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	authv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
)

// IstiodPrefix is how --cp names istiod: "istiod" (the default build) or "istiod@PIN".
const IstiodPrefix = "istiod"

// istiodDescriptor is what the harness knows of istiod as `make istiod` renders it from istio's
// own charts (hack/istiod/values.yaml): one replica in istio-system, plaintext xDS on the
// Service's 15010 and xDS over TLS on 15012 (its CA's root in istio-ca-root-cert, a token for
// istio-ca), metrics on the monitoring port 15014, pprof on the debug port 8080.
//
// Measures follow what istiod counts:
//   - full-pushes is pilot_xds_pushes{type=cds}: CDS responses, which istiod sends on a full push
//     (to each proxy: a full push to 20 proxies counts 20) and to a proxy that connects, never
//     on an endpoint-only push. pilot_pushcontext_init_seconds cannot tell them apart across
//     builds: at the 2026-04 pin istiod initialises a push context for full pushes only, at the
//     2026-08 pin for every push (DiscoveryServer.Push in pilot/pkg/xds/discovery.go);
//   - eds-pushes is pilot_xds_pushes{type=eds}: EDS responses, one per proxy and push (istiod has
//     no per-cycle counter of incremental pushes);
//   - streams-refused and time-to-ready have no istiod metric: the harness measures readiness
//     from the pods' events.
var istiodDescriptor = Descriptor{
	Install:    Install{Manifests: "manifests"},
	Remove:     "delete",
	Namespace:  "istio-system",
	Selector:   "app=istiod",
	Deployment: "istiod",
	Container:  "discovery",
	XDS:        ServicePort{Service: "istiod", Port: 15010},
	SecureXDS:  &SecurePort{Service: "istiod", Port: 15012, ServerName: "istiod.istio-system.svc", RootConfigMap: istiodCAConfigMaps[0]},
	Admin:      Admin{Port: 15014, MetricsPath: "/metrics", PprofPath: "/debug/pprof", PprofPort: 8080},
	Ready:      &Ready{Timeout: "5m"},
	Metrics: map[Measure]Metric{
		FullPushes:               {Name: "pilot_xds_pushes", Labels: map[string]string{"type": "cds"}},
		EDSPushes:                {Name: "pilot_xds_pushes", Labels: map[string]string{"type": "eds"}},
		ConnectedProxies:         {Name: "pilot_xds"},
		HeapInUse:                {Name: "go_memstats_heap_inuse_bytes"},
		HeapLive:                 {Name: "go_memstats_heap_alloc_bytes"},
		FullPushTime:             {Name: "pilot_pushcontext_init_seconds"},
		PushTime:                 {Name: "pilot_xds_push_time"},
		XDSPushes:                {Name: "pilot_xds_pushes"},
		PushTriggers:             {Name: "pilot_push_triggers"},
		XDSRejects:               {Name: "pilot_total_xds_rejects"},
		CPUSeconds:               {Name: "process_cpu_seconds_total"},
		SidecarInjections:        {Name: "sidecar_injection_success_total"},
		SidecarInjectionFailures: {Name: "sidecar_injection_failure_total"},
	},
}

// istiodCAConfigMaps are the ConfigMaps istiod writes into every namespace (its root
// certificate and revocation list), labelled istio.io/config=true.
var istiodCAConfigMaps = []string{"istio-ca-root-cert", "istio-ca-crl"}

// Istiod is istiod built from istio's source at a pin (`make istiod`, hack/istiod/pins),
// installed from its own Helm charts as rendered into bin/istiod/PIN/manifests, its image
// (bin/istiod/PIN/pilot.tar) loaded into the cluster's nodes. The harness places and limits its
// Deployment as it does the reference's, and removes what it installed and what istiod wrote.
type Istiod struct {
	*External
	pin   string
	image string // the image tarball

	mu sync.Mutex
	// before are the namespaces that held istiod's CA ConfigMaps before it was installed: what
	// Remove leaves.
	before map[string]bool
}

var (
	_ ControlPlane = (*Istiod)(nil)
	_ Remover      = (*Istiod)(nil)
	_ DebugAuth    = (*Istiod)(nil)
	_ Injector     = (*Istiod)(nil)
)

// DebugAuth is a control plane whose debug endpoints (pprof) need credentials: istiod serves
// /debug/ on its debug port only to its own loopback or to a token of an istio-system
// ServiceAccount with audience istio-ca.
type DebugAuth interface {
	// DebugHeader returns the headers a request to the debug port carries.
	DebugHeader(ctx context.Context, c cluster.Cluster) (http.Header, error)
}

// NewIstiod returns istiod at pin ("" for the default build); it fails, saying how to build it,
// when bin/istiod holds no such build.
func NewIstiod(pin string) (*Istiod, error) {
	root, err := bins.IstiodRoot()
	if err != nil {
		return nil, fmt.Errorf("control plane %s: %w", istiodName(pin), err)
	}
	pins := bins.IstiodPins(root)
	name := pin
	if name == "" {
		name = "default"
	}
	dir := filepath.Join(root, name)
	if pin == "" {
		target, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return nil, fmt.Errorf("control plane istiod: no default build in %s (builds: %s): run 'make istiod'", root, strings.Join(pins, ", "))
		}
		name, dir = filepath.Base(target), target
	}
	if !slices.Contains(pins, name) {
		return nil, fmt.Errorf("control plane %s: no build %q in %s (builds: %s): add it to hack/istiod/pins and run 'make istiod'", istiodName(pin), name, root, strings.Join(pins, ", "))
	}
	tar := filepath.Join(dir, "pilot.tar")
	if _, err := os.Stat(tar); err != nil {
		return nil, fmt.Errorf("control plane %s: %s is missing: run 'make istiod'", istiodName(pin), tar)
	}
	e, err := newExternal(IstiodPrefix+"@"+name, dir, istiodDescriptor)
	if err != nil {
		return nil, fmt.Errorf("control plane %s: build %s: %w (run 'make istiod')", istiodName(pin), dir, err)
	}
	return &Istiod{External: e, pin: name, image: tar}, nil
}

func istiodName(pin string) string {
	if pin == "" {
		return IstiodPrefix
	}
	return IstiodPrefix + "@" + pin
}

// InjectionLabels implements Injector: istiod's sidecar injector (its default template injects
// istio-proxy, which a dry-run admission shows without running it).
func (i *Istiod) InjectionLabels() map[string]string {
	return map[string]string{"istio-injection": "enabled"}
}

// Name implements ControlPlane: istiod@PIN, the build's own name, so a summary names the build
// that ran even when --cp said "istiod".
func (i *Istiod) Name() string { return IstiodPrefix + "@" + i.pin }

// Pin is the build's name (hack/istiod/pins).
func (i *Istiod) Pin() string { return i.pin }

// Deploy implements ControlPlane: load istiod's image into the nodes, then install it from its
// rendered charts, placed as asked, and wait until it is available.
func (i *Istiod) Deploy(ctx context.Context, c cluster.Cluster, p Placement) error {
	if err := c.LoadImageArchive(ctx, i.image); err != nil {
		return fmt.Errorf("load istiod's image %s: %w", i.image, err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	before, err := caConfigMapNamespaces(ctx, cs)
	if err != nil {
		return err
	}
	i.mu.Lock()
	i.before = before
	i.mu.Unlock()
	return i.External.Deploy(ctx, c, p)
}

// Remove implements Remover: what the charts installed, then the CA ConfigMaps istiod wrote into
// namespaces that did not hold them before (the ones of namespaces the run deletes go with them).
func (i *Istiod) Remove(ctx context.Context, c cluster.Cluster) error {
	errs := []error{i.External.Remove(ctx, c)}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	now, err := caConfigMapNamespaces(ctx, cs)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	i.mu.Lock()
	before := i.before
	i.mu.Unlock()
	for ns := range now {
		if before[ns] {
			continue
		}
		for _, name := range istiodCAConfigMaps {
			if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete istiod's ConfigMap %s/%s: %w", ns, name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// caConfigMapNamespaces lists the namespaces holding istiod's root certificate ConfigMap.
func caConfigMapNamespaces(ctx context.Context, cs kubernetes.Interface) (map[string]bool, error) {
	cms, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + istiodCAConfigMaps[0]})
	if err != nil {
		return nil, fmt.Errorf("list istiod's CA ConfigMaps: %w", err)
	}
	out := map[string]bool{}
	for _, cm := range cms.Items {
		out[cm.Namespace] = true
	}
	return out, nil
}

// DebugHeader implements DebugAuth: a token of istiod's own ServiceAccount for audience
// istio-ca, which istiod's debug port accepts.
func (i *Istiod) DebugHeader(ctx context.Context, c cluster.Cluster) (http.Header, error) {
	return istiodDebugHeader(ctx, c, i.Namespace())
}

// istiodDebugHeader asks for a token of ServiceAccount istiod in ns for audience istio-ca (a
// TokenRequest: the ServiceAccount itself is not changed).
func istiodDebugHeader(ctx context.Context, c cluster.Cluster, ns string) (http.Header, error) {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "istiod", &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{Audiences: []string{"istio-ca"}, ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("a token for istiod's debug port: %w", err)
	}
	return http.Header{"Authorization": []string{"Bearer " + tr.Status.Token}}, nil
}
