package webhook

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the webhooks' metrics under istiod's names (pilot/pkg/kube/inject and galley's
// validation server), plus the time to answer a review.
type Metrics struct {
	InjectRequests, InjectSuccesses, InjectFailures, InjectSkips prometheus.Counter
	// ValidationPassed and ValidationFailed are by group, version, resource (and reason).
	ValidationPassed, ValidationFailed *prometheus.CounterVec
	// Duration is the time to answer an AdmissionReview, by webhook (inject, validate).
	Duration *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &Metrics{
		InjectRequests:  counter("sidecar_injection_requests_total", "Total number of sidecar injection requests."),
		InjectSuccesses: counter("sidecar_injection_success_total", "Total number of successful sidecar injection requests."),
		InjectFailures:  counter("sidecar_injection_failure_total", "Total number of failed sidecar injection requests."),
		InjectSkips:     counter("sidecar_injection_skip_total", "Total number of skipped sidecar injection requests."),
		ValidationPassed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "galley_validation_passed",
			Help: "Resource is valid."}, []string{"group", "version", "resource"}),
		ValidationFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "galley_validation_failed",
			Help: "Resource validation failed."}, []string{"group", "version", "resource", "reason"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meshchaos_controlplane_webhook_duration_seconds",
			Help:    "Time to answer an AdmissionReview, by webhook.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10}}, []string{"webhook"}),
	}
	for _, c := range []prometheus.Collector{m.InjectRequests, m.InjectSuccesses, m.InjectFailures, m.InjectSkips,
		m.ValidationPassed, m.ValidationFailed, m.Duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
