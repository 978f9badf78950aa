// Package metrics holds the reference control plane's Prometheus metrics. Names follow istiod
// where the meaning matches (pilot_*), so the harness scrapes the reference control plane and
// istiod the same way; the rest are meshchaos_controlplane_*.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is one control plane's set of metrics, on its own registry (tests run several).
type Metrics struct {
	Registry *prometheus.Registry

	// XDSPushes counts responses sent to proxies, by type (cds, eds, lds, rds), as istiod's
	// pilot_xds_pushes.
	XDSPushes *prometheus.CounterVec
	// ProxyConvergence is push start → the proxy's ACK of that push, per proxy and type.
	ProxyConvergence prometheus.Histogram
	// DebounceTime is the first merged event → push start.
	DebounceTime prometheus.Histogram
	// PushTime is the time to generate a push and hand it to the caches, by kind (full, eds).
	PushTime *prometheus.HistogramVec
	// ConnectedProxies counts open xDS streams (istiod's pilot_xds).
	ConnectedProxies prometheus.Gauge
	// Rejects counts NACKs by type (istiod's pilot_total_xds_rejects).
	Rejects *prometheus.CounterVec
	// PushTriggers counts push triggers by reason (istiod's pilot_push_triggers).
	PushTriggers *prometheus.CounterVec
	// Pushes counts push cycles by kind: full or eds.
	Pushes *prometheus.CounterVec
	// Services is the number of hosts in the model (istiod's pilot_services).
	Services prometheus.Gauge
	// Endpoints is the number of endpoints in the model.
	Endpoints prometheus.Gauge

	// SyncGateOpen is 1 once the sync gate has opened.
	SyncGateOpen prometheus.Gauge
	// SyncGateForced is 1 if the gate was opened by the max wait rather than by sync.
	SyncGateForced prometheus.Gauge
	// TimeToReady is process start → gate open, in seconds.
	TimeToReady prometheus.Gauge
	// StreamsRefused counts xDS streams refused (codes.Unavailable) while the gate was closed.
	StreamsRefused prometheus.Counter
	// InputSkipped counts input objects or parts skipped by the conversion, by kind and reason.
	InputSkipped *prometheus.CounterVec
	// InvalidResources counts generated resources that failed Validate(), by type.
	InvalidResources *prometheus.CounterVec
}

// New creates and registers every metric (plus Go runtime and process collectors).
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pushBuckets := []float64{.01, .1, .5, 1, 3, 5, 10, 20, 30}
	m := &Metrics{
		Registry: r,
		XDSPushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pilot_xds_pushes",
			Help: "Pilot build and send errors for lds, rds, cds and eds."}, []string{"type"}),
		ProxyConvergence: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pilot_proxy_convergence_time",
			Help:    "Delay in seconds between config change and a proxy receiving all required configuration.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 3, 5, 10, 20, 30}}),
		DebounceTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pilot_debounce_time",
			Help:    "Delay in seconds between the first config enters debouncing and the merged push request is pushed into the push queue.",
			Buckets: []float64{.01, .1, 1, 3, 5, 10, 20, 30}}),
		PushTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pilot_xds_push_time",
			Help: "Total time in seconds Pilot takes to push lds, rds, cds and eds.", Buckets: pushBuckets}, []string{"type"}),
		ConnectedProxies: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pilot_xds",
			Help: "Number of endpoints connected to this pilot using XDS."}),
		Rejects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pilot_total_xds_rejects",
			Help: "Total number of XDS responses from pilot rejected by proxy."}, []string{"type"}),
		PushTriggers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pilot_push_triggers",
			Help: "Total number of times a push was triggered, labeled by reason for the push."}, []string{"type"}),
		Pushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshchaos_controlplane_pushes_total",
			Help: "Push cycles by kind: full (CDS/LDS/RDS and EDS to every proxy) or eds (changed clusters only)."}, []string{"kind"}),
		Services: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pilot_services", Help: "Total services known to pilot."}),
		Endpoints: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshchaos_controlplane_endpoints",
			Help: "Endpoints in the model (every service port counted)."}),
		SyncGateOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshchaos_controlplane_sync_gate_open",
			Help: "1 once the sync gate has opened (informers synced and every initial event processed)."}),
		SyncGateForced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshchaos_controlplane_sync_gate_forced",
			Help: "1 if the sync gate was opened by its max wait instead of by sync."}),
		TimeToReady: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshchaos_controlplane_time_to_ready_seconds",
			Help: "Seconds from start to the sync gate opening."}),
		StreamsRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshchaos_controlplane_xds_streams_refused_total",
			Help: "xDS streams refused with Unavailable while the sync gate was closed."}),
		InputSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshchaos_controlplane_input_skipped_total",
			Help: "Input objects or parts of them skipped by the conversion."}, []string{"kind", "reason"}),
		InvalidResources: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshchaos_controlplane_invalid_resources_total",
			Help: "Generated resources that failed Validate() and were left out."}, []string{"type"}),
	}
	r.MustRegister(m.XDSPushes, m.ProxyConvergence, m.DebounceTime, m.PushTime, m.ConnectedProxies,
		m.Rejects, m.PushTriggers, m.Pushes, m.Services, m.Endpoints, m.SyncGateOpen, m.SyncGateForced,
		m.TimeToReady, m.StreamsRefused, m.InputSkipped, m.InvalidResources)
	return m
}
