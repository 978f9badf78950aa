// Package subject is the control-plane-under-test seam: what the harness needs from an xDS
// control plane to deploy it, find it, reach its xDS and admin ports, and read what it measures.
// The reference sync-gated control plane (controlplane/) is one implementation; istiod and others
// are further ones. Experiments speak only this interface, so the same experiment runs against
// any of them.
package subject

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshchaos/meshchaos/harness/cluster"
)

// Measure is a quantity the harness reads from a control plane's metrics, whatever the control
// plane calls it.
type Measure string

// Measures the harness reads. Counters unless said otherwise.
const (
	// FullPushes counts full pushes as istiod does: CDS responses sent, one per proxy, a
	// proxy's initial fetch included (pilot_xds_pushes{type=cds}).
	FullPushes Measure = "full-pushes"
	// EDSPushes counts endpoint pushes as istiod does: EDS responses sent, one per proxy
	// (pilot_xds_pushes{type=eds}).
	EDSPushes Measure = "eds-pushes"
	// StreamsRefused counts xDS streams refused while the control plane was not ready.
	StreamsRefused Measure = "streams-refused"
	// ConnectedProxies is a gauge of the proxies connected over xDS.
	ConnectedProxies Measure = "connected-proxies"
	// HeapInUse is a gauge of the process's in-use heap in bytes.
	HeapInUse Measure = "heap-inuse"
	// TimeToReady is a gauge: seconds from the process's start to its readiness.
	TimeToReady Measure = "time-to-ready"
	// HeapLive is a gauge of the bytes in allocated heap objects (Go's heap_alloc): right after
	// a forced GC, the live heap — what a heap profile's inuse_space estimates.
	HeapLive Measure = "heap-live"
	// FullPushTime is the histogram of the time a full push cycle takes (generate and hand to the
	// caches, once for all proxies).
	FullPushTime Measure = "full-push-time"
	// PushTime is a histogram (in seconds) of the time each response takes, by xDS type
	// (istiod's pilot_xds_push_time{type}: that response's own generation and send, a
	// proxy's initial fetches included; not the debounce nor the wait in the push queue).
	PushTime Measure = "push-time"
	// XDSPushes counts responses sent to proxies, labelled by xDS type (istiod's
	// pilot_xds_pushes{type}).
	XDSPushes Measure = "xds-pushes"
	// PushTriggers counts push triggers, labelled by reason (istiod's pilot_push_triggers{type}).
	PushTriggers Measure = "push-triggers"
	// XDSRejects counts configuration the proxies rejected (NACKs), labelled by xDS type
	// (istiod's pilot_total_xds_rejects{type}).
	XDSRejects Measure = "xds-rejects"
	// CPUSeconds counts the process's CPU time in seconds.
	CPUSeconds Measure = "cpu-seconds"
	// SidecarInjections counts pods the control plane's injection webhook gave a sidecar.
	SidecarInjections Measure = "sidecar-injections"
	// SidecarInjectionFailures counts injection requests it refused or could not read.
	SidecarInjectionFailures Measure = "sidecar-injection-failures"
)

// Measures lists every measure, in the order documentation shows them.
var Measures = []Measure{FullPushes, EDSPushes, StreamsRefused, ConnectedProxies, HeapInUse, TimeToReady, HeapLive,
	FullPushTime, PushTime, XDSPushes, PushTriggers, XDSRejects, CPUSeconds, SidecarInjections, SidecarInjectionFailures}

// Metric locates a measure among a control plane's Prometheus metrics: the family's name and
// the labels a series must carry (other labels are summed over).
type Metric struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Matches reports whether a series with these labels belongs to the metric.
func (m Metric) Matches(name string, labels map[string]string) bool {
	if name != m.Name {
		return false
	}
	for k, v := range m.Labels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Placement is where and how the control plane runs.
type Placement struct {
	// Node pins the control plane's pods to node k (0: anywhere).
	Node int
	// MemoryLimit and CPULimit are Kubernetes quantities ("" leaves the control plane's own).
	MemoryLimit, CPULimit string
	// QoS sets the pods' Kubernetes QoS class: "" leaves the control plane's own resources,
	// QoSBestEffort removes every request and limit (the CPU-starvation incident's istiod),
	// QoSGuaranteed makes requests equal to the limits (CPULimit and MemoryLimit required).
	QoS string
	// Nodes, when set, lets the pods run on any of these nodes instead of Node alone.
	Nodes []int
	// Replicas is the number of control-plane pods (0: the control plane's own, 1); more than
	// one are spread over the allowed nodes (preferred pod anti-affinity), one per node where
	// they can.
	Replicas int
	// PriorityClass gives the pods a PriorityClass of this name, created with a high value
	// ("" none).
	PriorityClass string
	// Ballast asks for the control plane's memory ballast hook (Ballaster), bounded by twice
	// the memory limit: only runs that OOM-kill the control plane through it ask.
	Ballast bool
	// Logf reports progress.
	Logf func(format string, args ...any)
}

// QoS classes Placement.QoS asks for.
const (
	QoSBestEffort = "BestEffort"
	QoSGuaranteed = "Guaranteed"
)

// ControlPlane is a control plane under test.
type ControlPlane interface {
	// Name is how --cp names it, e.g. "reference:ungated".
	Name() string
	// Deploy installs the control plane (and the CRDs it serves) and waits until it is ready.
	Deploy(ctx context.Context, c cluster.Cluster, p Placement) error
	// Namespace and Selector find its pods; Container is the container that serves xDS.
	Namespace() string
	Selector() string
	Container() string
	// XDSAddress is the host:port proxies dial (through its Service, after Deploy).
	XDSAddress() string
	// AdminURL is the base URL of a pod's admin port (metrics, pprof), e.g. http://10.244.0.5:15014.
	AdminURL(pod *corev1.Pod) string
	// MetricsPath is the Prometheus endpoint under AdminURL.
	MetricsPath() string
	// PprofURL is the base URL of a pod's pprof server, which serves /debug/pprof/ (istiod's is
	// on its debug port, not its monitoring port); "" when it serves none.
	PprofURL(pod *corev1.Pod) string
	// Metrics maps the measures it exposes to its metric names; a missing measure is not measured.
	Metrics() map[Measure]Metric
}

// SecureXDS is how a sidecar reaches a control plane's xDS over TLS (istiod's 15012): the
// address it dials (the Service's ClusterIP and port), the name the serving certificate
// carries, the ConfigMap holding the root certificate (key root-cert.pem) that the control
// plane writes into the workloads' namespaces, and the audience of the ServiceAccount token
// the control plane checks (with a TokenReview).
type SecureXDS struct {
	Address, ServerName, RootConfigMap, Audience string
}

// SecureServer is a control plane that serves xDS over TLS to proxies that authenticate with
// their ServiceAccount token, as istiod does on 15012 (the port hardened installs keep, with
// plaintext 15010 off).
type SecureServer interface {
	// SecureXDS is its secure endpoint, known after Deploy; false when it serves none.
	SecureXDS() (SecureXDS, bool)
}

// DefaultAudience is the token audience istiod checks (and pilot-agent asks for).
const DefaultAudience = "istio-ca"

// Ballaster is a control plane with a chaos hook that grows its own heap on request (the
// reference control plane's /debug/ballast). Memory-pressure chaos uses it when present and
// falls back to configuration load otherwise.
type Ballaster interface {
	// BallastURL is the URL that starts the growth towards mib MiB on pod.
	BallastURL(pod *corev1.Pod, mib int) string
}

// Injector is a control plane whose admission webhook injects a sidecar into the pods of the
// namespaces labelled so (the reference injects xdsproxy, istiod its istio-proxy).
type Injector interface {
	// InjectionLabels are the namespace labels that turn injection on.
	InjectionLabels() map[string]string
}

// ProxyInjector is an Injector that can inject meshchaos's own proxy, started in the orders
// sidecar-startup compares (none, hold, native), chosen per pod by annotations: the reference's
// injector by its own annotation, istiod's through its injection template "meshchaos" and its
// own start-order settings.
type ProxyInjector interface {
	Injector
	// ProxyAnnotations are the pod annotations that ask the injector for meshchaos's proxy,
	// image (the substrate's xdsproxy image), started in mode (none, hold or native).
	ProxyAnnotations(mode, image string) map[string]string
	// ProxyContainer names the container the injector adds.
	ProxyContainer() string
}

// Remover is a control plane that removes itself from the cluster (what an external
// descriptor's remove says); the mesh calls it before the cluster goes down.
type Remover interface {
	Remove(ctx context.Context, c cluster.Cluster) error
}

// Parse turns --cp into a control plane: "reference", "reference:<switch>[,<switch>…]" (an
// item generation=per-proxy sets the reference's --generation),
// "istiod" or "istiod@PIN" (a build of `make istiod`), "istiod:installed" (the istiod installed
// already, attached.go), or "external:FILE" (a descriptor, see external.go).
func Parse(name string) (ControlPlane, error) {
	if name == IstiodPrefix {
		return NewIstiod("")
	}
	if pin, ok := strings.CutPrefix(name, IstiodPrefix+"@"); ok {
		if pin == "" || strings.ContainsAny(pin, "/:\\") || strings.HasPrefix(pin, ".") {
			return nil, fmt.Errorf("control plane %q: want istiod@PIN, a build of make istiod (hack/istiod/pins)", name)
		}
		return NewIstiod(pin)
	}
	kind, rest, _ := strings.Cut(name, ":")
	switch kind {
	case IstiodPrefix:
		if rest != InstalledSuffix {
			return nil, fmt.Errorf("control plane %q: want istiod, istiod@PIN or istiod:installed (attach to the istiod installed in istio-system)", name)
		}
		return NewInstalledIstiod()
	case "external":
		return LoadExternal(rest)
	case "reference":
		var sw []string
		for _, s := range strings.Split(rest, ",") {
			if s = strings.TrimSpace(s); s != "" {
				sw = append(sw, s)
			}
		}
		return NewReference(sw)
	}
	return nil, fmt.Errorf("unknown control plane %q; use reference, reference:<switch>[,<switch>][,generation=per-proxy], istiod[@PIN], istiod:installed or external:FILE ('meshchaos controlplane --help' lists the switches)", name)
}
