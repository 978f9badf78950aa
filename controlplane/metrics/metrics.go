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

	// XDSPushes counts responses sent, one per proxy per type (cds, eds, lds, rds), as istiod's
	// pilot_xds_pushes.
	XDSPushes *prometheus.CounterVec
	// ProxyConvergence is, per proxy and push, the push's start (after the debounce) → the
	// last response of that push sent to that proxy (every type the push changed that the proxy
	// watches), as istiod's pilot_proxy_convergence_time. Merged pushes count once.
	ProxyConvergence prometheus.Histogram
	// DebounceTime is the first merged event → push start.
	DebounceTime prometheus.Histogram
	// PushTime is, per response and by type (cds, eds, lds, rds), that response's own
	// generation and send, for a proxy's initial fetches and for pushes alike, as istiod's
	// pilot_xds_push_time (pushXds: t0 before Generate, recorded after the send). Not in it:
	// the debounce, a push's shared generation per scope, the wait for a throttle slot.
	PushTime *prometheus.HistogramVec
	// PushDelivery is, per proxy and type, push start → that proxy's response of the push
	// handed to its stream, pushes only, each push once per type: the push's latency at each
	// proxy, its wait behind the other proxies included (the reference's own; istiod has none).
	PushDelivery *prometheus.HistogramVec
	// PushCycleTime is the time to generate one push and hand it to the caches, by kind (full,
	// eds).
	PushCycleTime *prometheus.HistogramVec
	// ProxyGenerations counts responses generated for one proxy, by type (cds, lds, rds): the
	// per-proxy generation mode (xds.PerProxy) builds and encodes every CDS/LDS/RDS response
	// again for the proxy it is sent to; 0 in the default per-scope mode.
	ProxyGenerations *prometheus.CounterVec
	// ConfigSize is the size in bytes of each response sent, by type (istiod's
	// pilot_xds_config_size_bytes).
	ConfigSize *prometheus.HistogramVec
	// InboundUpdates counts informer events by istiod's type: config (ServiceEntry,
	// WorkloadEntry, Sidecar), eds (EndpointSlice), svc (Service add/update), svcdelete.
	InboundUpdates *prometheus.CounterVec
	// K8sRegEvents counts Kubernetes registry events by type (Services, EndpointSlices, Pods)
	// and event (add, update, delete), as istiod's pilot_k8s_reg_events.
	K8sRegEvents *prometheus.CounterVec
	// ProxyQueueTime is the time a response waits for a send slot of the push throttle
	// (istiod's pilot_proxy_queue_time: time in the push queue before being dequeued).
	ProxyQueueTime prometheus.Histogram
	// Scopes is the number of proxy scopes (namespaces with their own generated config).
	Scopes prometheus.Gauge
	// ConnectedProxies counts open xDS streams (istiod's pilot_xds).
	ConnectedProxies prometheus.Gauge
	// Rejects counts NACKs by type (istiod's pilot_total_xds_rejects).
	Rejects *prometheus.CounterVec
	// PushTriggers counts push triggers by reason, once per connected proxy of each push
	// (istiod's pilot_push_triggers, recorded as each proxy's push leaves its queue).
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
	// XDSLimited counts what the xDS server's limits cut off, by reason (a fixed set:
	// send-timeout, stalled, streams, new-streams, requests, scopes): misbehaving clients, not config.
	XDSLimited *prometheus.CounterVec
	// XDSAuthRefused counts streams of the secure xDS port refused by authentication, by reason
	// (a fixed set: no-token, rejected, review-failed, namespace-mismatch). istiod logs these
	// and counts none; the harness reads them to tell a misconfigured client from a slow one.
	XDSAuthRefused *prometheus.CounterVec
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
		PushDelivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meshchaos_controlplane_push_delivery_seconds",
			Help: "Push start to each proxy's response of the push handed to its stream, by type (pushes only).", Buckets: pushBuckets}, []string{"type"}),
		PushCycleTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meshchaos_controlplane_push_cycle_seconds",
			Help: "Time to generate one push and hand it to the caches, by kind (full, eds).", Buckets: pushBuckets}, []string{"kind"}),
		ProxyGenerations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshchaos_controlplane_proxy_generations_total",
			Help: "CDS/LDS/RDS responses generated and encoded for one proxy (--generation=per-proxy), by type."}, []string{"type"}),
		ConfigSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pilot_xds_config_size_bytes",
			Help:    "Distribution of configuration sizes pushed to clients",
			Buckets: []float64{1, 10000, 1000000, 4000000, 10000000, 40000000}}, []string{"type"}),
		InboundUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pilot_inbound_updates",
			Help: "Total number of updates received by pilot."}, []string{"type"}),
		K8sRegEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pilot_k8s_reg_events",
			Help: "Events from k8s registry."}, []string{"type", "event"}),
		ProxyQueueTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pilot_proxy_queue_time",
			Help:    "Time in seconds, a proxy is in the push queue before being dequeued.",
			Buckets: []float64{.001, .01, .1, .5, 1, 3, 5, 10, 20, 30}}),
		Scopes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshchaos_controlplane_scopes",
			Help: "Proxy scopes (namespaces) with their own generated clusters, listeners and routes."}),
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
		XDSLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshchaos_controlplane_xds_limited_total",
			Help: "xDS streams closed or refused by the server's limits, by reason (send-timeout, unanswered, stalled, streams, new-streams, requests, scopes, names)."}, []string{"reason"}),
		XDSAuthRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshchaos_controlplane_xds_auth_refused_total",
			Help: "Streams of the secure xDS port refused by authentication, by reason (no-token, rejected, review-failed, namespace-mismatch)."}, []string{"reason"}),
		InputSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshchaos_controlplane_input_skipped_total",
			Help: "Input objects or parts of them skipped by the conversion."}, []string{"kind", "reason"}),
		InvalidResources: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshchaos_controlplane_invalid_resources_total",
			Help: "Generated resources that failed Validate() and were left out."}, []string{"type"}),
	}
	for _, t := range []string{"endpoint", "service", "config", "global"} {
		m.PushTriggers.WithLabelValues(t) // shown, at 0, before the first push
	}
	r.MustRegister(m.XDSPushes, m.ProxyConvergence, m.DebounceTime, m.PushTime, m.PushDelivery, m.PushCycleTime, m.ProxyGenerations, m.ConfigSize,
		m.InboundUpdates, m.K8sRegEvents, m.ProxyQueueTime, m.Scopes, m.ConnectedProxies,
		m.Rejects, m.PushTriggers, m.Pushes, m.Services, m.Endpoints, m.SyncGateOpen, m.SyncGateForced,
		m.TimeToReady, m.StreamsRefused, m.XDSLimited, m.XDSAuthRefused, m.InputSkipped, m.InvalidResources)
	// Exported at 0 from the start, so a scrape tells "no proxy rejected anything" from "not
	// measured" (the harness records the count in every run's summary).
	for _, t := range []string{"cds", "eds", "lds", "rds"} {
		m.Rejects.WithLabelValues(t)
	}
	return m
}
