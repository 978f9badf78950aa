package observe

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScraperRecordsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	pushes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xds_pushes_total"}, []string{"type"})
	conns := prometheus.NewGauge(prometheus.GaugeOpts{Name: "xds_connections"})
	lat := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "push_seconds", Buckets: []float64{0.1, 1}})
	sum := prometheus.NewSummary(prometheus.SummaryOpts{Name: "sync_seconds", Objectives: map[float64]float64{0.5: 0.05}})
	reg.MustRegister(pushes, conns, lat, sum, collectors.NewGoCollector())
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ts.Close()

	s := NewScraper(ts.URL, nil)
	pushes.WithLabelValues("full").Add(3)
	conns.Set(10)
	lat.Observe(0.05)
	lat.Observe(0.5)
	sum.Observe(2)
	require.NoError(t, s.Scrape(context.Background()))
	pushes.WithLabelValues("full").Add(2)
	pushes.WithLabelValues("eds").Inc()
	conns.Set(4)
	require.NoError(t, s.Scrape(context.Background()))

	v, ok := s.Last("xds_pushes_total", map[string]string{"type": "full"})
	assert.True(t, ok)
	assert.EqualValues(t, 5, v)
	v, _ = s.Last("xds_pushes_total", map[string]string{"type": "eds"})
	assert.EqualValues(t, 1, v)
	v, _ = s.Last("xds_connections", nil)
	assert.EqualValues(t, 4, v)
	v, _ = s.Max("xds_connections", nil)
	assert.EqualValues(t, 10, v)
	v, _ = s.Last("push_seconds_bucket", map[string]string{"le": "0.1"})
	assert.EqualValues(t, 1, v)
	v, _ = s.Last("push_seconds_bucket", map[string]string{"le": "+Inf"})
	assert.EqualValues(t, 2, v)
	v, _ = s.Last("push_seconds_count", nil)
	assert.EqualValues(t, 2, v)
	v, _ = s.Last("sync_seconds", map[string]string{"quantile": "0.5"})
	assert.EqualValues(t, 2, v)
	v, ok = s.Last("go_goroutines", nil)
	assert.True(t, ok)
	assert.Positive(t, v)

	var full []float64
	for _, sr := range s.Series() {
		if sr.Name == "xds_pushes_total" && sr.Labels["type"] == "full" {
			for _, x := range sr.Samples {
				full = append(full, x.Value)
			}
		}
	}
	assert.Equal(t, []float64{3, 5}, full, "one sample per scrape")
}

func TestScraperKeepAndFailures(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s := NewScraper(ts.URL, nil)
	s.Keep = func(f string) bool { return strings.HasPrefix(f, "go_memstats_heap") }
	require.NoError(t, s.Scrape(context.Background()))
	for _, sr := range s.Series() {
		assert.True(t, strings.HasPrefix(sr.Name, "go_memstats_heap"), sr.Name)
	}
	_, ok := s.Last("go_memstats_heap_inuse_bytes", nil)
	assert.True(t, ok)
	ts.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Millisecond)
	defer cancel()
	var errs int
	s.Run(ctx, 20*time.Millisecond, func(error) { errs++ })
	assert.Positive(t, errs)
	assert.Equal(t, errs, s.Failures())
}

func TestScraperRejectsGarbage(t *testing.T) {
	ts := httptest.NewServer(promhttpText("this is { not metrics\n"))
	defer ts.Close()
	assert.Error(t, NewScraper(ts.URL, nil).Scrape(context.Background()))
}

type promhttpText string

func (s promhttpText) ServeHTTP(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(s)) }

func TestPromMemory(t *testing.T) {
	reg := prometheus.NewRegistry()
	rss := prometheus.NewGauge(prometheus.GaugeOpts{Name: "process_resident_memory_bytes"})
	reg.MustRegister(rss)
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ts.Close()
	rss.Set(96 << 20)
	m := &PromMemory{URL: ts.URL, Limit: 128 << 20}
	u, err := m.ReadMemory()
	require.NoError(t, err)
	assert.EqualValues(t, 96<<20, u.WorkingSet)
	assert.InDelta(t, 0.75, u.Fraction(), 1e-9)

	_, err = (&PromMemory{URL: ts.URL, Metric: "nope"}).ReadMemory()
	assert.ErrorContains(t, err, "no metric nope")
}
