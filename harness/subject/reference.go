package subject

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cpmanifests "github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/controlplane/webhook"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"
)

// Reference is the reference sync-gated control plane (controlplane/), optionally with
// regression switches that re-create historical bugs.
type Reference struct {
	switches []string
	// generation is the control plane's --generation ("" its default, per-scope): a
	// configuration, not a bug, named in the --cp spec as generation=MODE.
	generation string
	ns         string
	xds        string
	secure     string // the secure xDS port's address, after Deploy
}

// reference's fixed names (controlplane/manifests).
const (
	refName       = "meshchaos-controlplane"
	refXDSPort    = "15010"
	refSecurePort = "15012"
	// refRootConfigMap holds the reference's root certificate in the run's namespaces (not
	// istio-ca-root-cert: an installed istiod's must never be overwritten).
	refRootConfigMap = "meshchaos-ca-root-cert"
	refAdminPort     = "15014"
)

// GenerationOption is the --cp reference spec's item that sets the control plane's
// --generation: "reference:generation=per-proxy[,SWITCH…]".
const GenerationOption = "generation"

// NewReference returns the reference control plane from the items of its --cp spec: regression
// switches, and generation=MODE (the control plane's --generation, manifests.Generations).
func NewReference(items []string) (*Reference, error) {
	r := &Reference{ns: "meshchaos-system"}
	spec := strings.Join(items, ",")
	for _, it := range items {
		key, val, ok := strings.Cut(it, "=")
		if !ok {
			r.switches = append(r.switches, it)
			continue
		}
		switch {
		case key != GenerationOption:
			return nil, fmt.Errorf("control plane reference:%s: unknown option %q (known: %s=%s)", spec, key, GenerationOption, strings.Join(cpmanifests.Generations, "|"))
		case r.generation != "":
			return nil, fmt.Errorf("control plane reference:%s: %s given twice", spec, GenerationOption)
		case !slices.Contains(cpmanifests.Generations, val):
			return nil, fmt.Errorf("control plane reference:%s: unknown generation mode %q (known: %s)", spec, val, strings.Join(cpmanifests.Generations, ", "))
		}
		r.generation = val
	}
	if _, err := regress.Parse(r.switches); err != nil {
		return nil, fmt.Errorf("control plane reference:%s: %w", spec, err)
	}
	return r, nil
}

var (
	_ ControlPlane = (*Reference)(nil)
	_ Ballaster    = (*Reference)(nil)
	_ SecureServer = (*Reference)(nil)
)

// Name implements ControlPlane.
func (r *Reference) Name() string {
	items := slices.Clone(r.switches)
	if r.generation != "" {
		items = append(items, GenerationOption+"="+r.generation)
	}
	if len(items) == 0 {
		return "reference"
	}
	return "reference:" + strings.Join(items, ",")
}

// gated reports whether the sync gate is on (every build but the ungated switch).
func (r *Reference) gated() bool {
	for _, s := range r.switches {
		if s == string(regress.Ungated) {
			return false
		}
	}
	return true
}

// Deploy implements ControlPlane: CRDs, then the control plane pinned and limited as asked.
func (r *Reference) Deploy(ctx context.Context, c cluster.Cluster, p Placement) error {
	cfg := c.RESTConfig()
	rep, err := kube.InstallCRDs(ctx, cfg, crds.Istio, kube.Owned(c.Name()))
	logKept(p, rep)
	if err != nil {
		return fmt.Errorf("install the Istio CRDs: %w", err)
	}
	// The reference publishes its root certificate into the run's namespaces only, so on a
	// shared cluster it writes nowhere else.
	params := cpmanifests.Params{Namespace: r.ns, SyncGate: r.gated(), Regress: r.switches, Generation: r.generation, MemoryLimit: p.MemoryLimit,
		RootCertNamespaces: kube.OwnerLabel + "=" + c.Name()}
	if p.Ballast {
		if params.BallastMaxMiB, err = ballastBound(p.MemoryLimit); err != nil {
			return err
		}
	}
	y, err := cpmanifests.ControlPlane(params)
	if err != nil {
		return err
	}
	muts := []kube.Mutator{kube.CPULimit(r.Container(), p.CPULimit)}
	if p.Node > 0 && len(p.Nodes) == 0 {
		muts = append(muts, kube.PinToNode(cluster.NodeLabel, fmt.Sprint(p.Node)))
	}
	more, err := placementMutators(p, map[string]string{"app": refName}, r.Container())
	if err != nil {
		return fmt.Errorf("control plane placement: %w", err)
	}
	muts = append(muts, more...)
	if p.PriorityClass != "" {
		y = append(append(priorityClassYAML(p.PriorityClass), "---\n"...), y...)
	}
	if err := apply(ctx, c, p, y, muts...); err != nil {
		return fmt.Errorf("deploy the reference control plane: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := kube.WaitDeploymentReady(ctx, cs, r.ns, refName, 3*time.Minute); err != nil {
		return err
	}
	svc, err := cs.CoreV1().Services(r.ns).Get(ctx, refName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the control plane's Service: %w", err)
	}
	r.xds = net.JoinHostPort(svc.Spec.ClusterIP, refXDSPort)
	r.secure = net.JoinHostPort(svc.Spec.ClusterIP, refSecurePort)
	return nil
}

// SecureXDS implements SecureServer: 15012, TLS from the reference's CA (Secret
// meshchaos-ca-secret), tokens for istio-ca checked with TokenReviews.
func (r *Reference) SecureXDS() (SecureXDS, bool) {
	return SecureXDS{Address: r.secure, ServerName: refName + "." + r.ns + ".svc", RootConfigMap: refRootConfigMap, Audience: DefaultAudience}, true
}

// Namespace implements ControlPlane.
func (r *Reference) Namespace() string { return r.ns }

// Selector implements ControlPlane.
func (r *Reference) Selector() string { return "app=" + refName }

// Container implements ControlPlane.
func (r *Reference) Container() string { return "controlplane" }

// XDSAddress implements ControlPlane.
func (r *Reference) XDSAddress() string { return r.xds }

// AdminURL implements ControlPlane.
func (r *Reference) AdminURL(pod *corev1.Pod) string {
	return "http://" + net.JoinHostPort(pod.Status.PodIP, refAdminPort)
}

// MetricsPath implements ControlPlane.
func (r *Reference) MetricsPath() string { return "/metrics" }

// InjectionLabels implements Injector: the reference's injection webhook's namespace label.
func (r *Reference) InjectionLabels() map[string]string {
	return map[string]string{"meshchaos.io/inject": "enabled"}
}

// ProxyAnnotations implements ProxyInjector: the reference injects its own proxy image (its
// --inject-image) in the mode its start annotation asks (controlplane/webhook).
func (r *Reference) ProxyAnnotations(mode, _ string) map[string]string {
	return map[string]string{webhook.StartAnnotation: mode}
}

// ProxyContainer implements ProxyInjector.
func (r *Reference) ProxyContainer() string { return webhook.ProxyContainer }

// PprofURL implements ControlPlane: pprof is on the admin port.
func (r *Reference) PprofURL(pod *corev1.Pod) string { return r.AdminURL(pod) }

// Metrics implements ControlPlane.
func (r *Reference) Metrics() map[Measure]Metric {
	return map[Measure]Metric{
		// Responses per proxy, initial fetches included, as istiod's: the push cycles
		// (meshchaos_controlplane_pushes_total) counted one push to 21 proxies as 1 where
		// istiod's counts 21 (the fidelity table of 2026-11-26: EDS pushes per flap 2 vs 42).
		FullPushes:       {Name: "pilot_xds_pushes", Labels: map[string]string{"type": "cds"}},
		EDSPushes:        {Name: "pilot_xds_pushes", Labels: map[string]string{"type": "eds"}},
		StreamsRefused:   {Name: "meshchaos_controlplane_xds_streams_refused_total"},
		ConnectedProxies: {Name: "pilot_xds"},
		HeapInUse:        {Name: "go_memstats_heap_inuse_bytes"},
		TimeToReady:      {Name: "meshchaos_controlplane_time_to_ready_seconds"},
		HeapLive:         {Name: "go_memstats_heap_alloc_bytes"},
		FullPushTime:     {Name: "meshchaos_controlplane_push_cycle_seconds", Labels: map[string]string{"kind": "full"}},
		PushTime:         {Name: "pilot_xds_push_time"},
		XDSPushes:        {Name: "pilot_xds_pushes"},
		PushTriggers:     {Name: "pilot_push_triggers"},
		CPUSeconds:       {Name: "process_cpu_seconds_total"},
		XDSRejects:       {Name: "pilot_total_xds_rejects"},
		// The admission webhook's, under istiod's names (controlplane/webhook).
		SidecarInjections:        {Name: "sidecar_injection_success_total"},
		SidecarInjectionFailures: {Name: "sidecar_injection_failure_total"},
	}
}

// BallastURL implements Ballaster: 4 MiB every 100 ms (40 MiB/s), fast enough to reach a limit in
// seconds, slow enough for a heap profile taken on the way up to complete.
func (r *Reference) BallastURL(pod *corev1.Pod, mib int) string {
	return fmt.Sprintf("%s/debug/ballast?mb=%d&step=4&every=100ms", r.AdminURL(pod), mib)
}

// ballastBound is the ballast's bound for a control plane limited to memoryLimit ("" is the
// manifests' default, 1Gi): twice the limit, what the OOM kill asks for, and no more.
func ballastBound(memoryLimit string) (int, error) {
	if memoryLimit == "" {
		memoryLimit = "1Gi"
	}
	q, err := resource.ParseQuantity(memoryLimit)
	if err != nil {
		return 0, fmt.Errorf("control plane memory limit %q: %w", memoryLimit, err)
	}
	return int(2 * (q.Value() >> 20)), nil
}
