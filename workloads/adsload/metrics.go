package adsload

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the totals as JSON on /stats (with the process's RSS) and as Prometheus
// metrics on /metrics (with the process's, process_resident_memory_bytes among them), and the
// tracked clusters' receipts as JSON on /tracked.
func (l *Load) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	proc := prometheus.NewRegistry()
	proc.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fanout := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "adsload_push_fanout_seconds",
		Help:    "Time from the first client receiving a pushed version to each client receiving it.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"type"})
	reg.MustRegister(fanout, &collector{l: l})
	l.mu.Lock()
	l.fanout = func(i int, d time.Duration) { fanout.WithLabelValues(shortType[types[i]]).Observe(d.Seconds()) }
	l.mu.Unlock()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, proc}, promhttp.HandlerOpts{}))
	mux.HandleFunc("/tracked", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(l.Tracked())
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		st := l.Stats()
		st.RSSBytes = rss(proc)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	// /ready is the pod's readiness: every client's stream has received config, so the
	// harness measures a whole fleet (one still connecting would count its first fetches as
	// the run's pushes and miss the first changes).
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		st := l.Stats()
		if st.Configured < int64(st.Clients) {
			http.Error(w, fmt.Sprintf("%d of %d clients served (%d streams open)", st.Configured, st.Clients, st.Connected), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// collector exposes Stats at scrape time.
type collector struct{ l *Load }

var (
	descClients   = prometheus.NewDesc("adsload_clients", "Configured ADS clients.", nil, nil)
	descConnected = prometheus.NewDesc("adsload_clients_connected", "Clients with an open ADS stream.", nil, nil)
	descStreams   = prometheus.NewDesc("adsload_streams_total", "ADS streams opened (reconnects included).", nil, nil)
	descAcks      = prometheus.NewDesc("adsload_acks_total", "Responses ACKed.", nil, nil)
	descNacks     = prometheus.NewDesc("adsload_nacks_total", "Responses NACKed (undecodable).", nil, nil)
	descResponses = prometheus.NewDesc("adsload_responses_total", "Responses received.", []string{"type"}, nil)
	descBytes     = prometheus.NewDesc("adsload_received_bytes_total", "Response bytes received.", []string{"type"}, nil)
	descResources = prometheus.NewDesc("adsload_resources", "Resources currently held, summed over clients.", []string{"type"}, nil)
	descEndpoints = prometheus.NewDesc("adsload_endpoints", "Endpoints currently held, summed over clients.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClients, descConnected, descStreams, descAcks, descNacks, descResponses, descBytes, descResources, descEndpoints} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.l.Stats()
	ch <- prometheus.MustNewConstMetric(descClients, prometheus.GaugeValue, float64(s.Clients))
	ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, float64(s.Connected))
	ch <- prometheus.MustNewConstMetric(descStreams, prometheus.CounterValue, float64(s.Streams))
	ch <- prometheus.MustNewConstMetric(descAcks, prometheus.CounterValue, float64(s.ACKs))
	ch <- prometheus.MustNewConstMetric(descNacks, prometheus.CounterValue, float64(s.NACKs))
	for t, v := range s.Responses {
		ch <- prometheus.MustNewConstMetric(descResponses, prometheus.CounterValue, float64(v), t)
	}
	for t, v := range s.Bytes {
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(v), t)
	}
	for t, v := range s.Resources {
		ch <- prometheus.MustNewConstMetric(descResources, prometheus.GaugeValue, float64(v), t)
	}
	ch <- prometheus.MustNewConstMetric(descEndpoints, prometheus.GaugeValue, float64(s.Endpoints))
}

// rss is the process's resident memory as its process collector reads it (0 where the platform
// does not tell).
func rss(proc prometheus.Gatherer) int64 {
	fams, err := proc.Gather()
	if err != nil {
		return 0
	}
	for _, f := range fams {
		if f.GetName() == "process_resident_memory_bytes" && len(f.GetMetric()) == 1 {
			return int64(f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return 0
}
