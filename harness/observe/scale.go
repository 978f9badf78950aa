package observe

import (
	"context"
	"math"
	"net/http"
	"sort"
	"sync"

	dto "github.com/prometheus/client_model/go"

	"github.com/meshchaos/meshchaos/results"
)

// Families is one scrape of a Prometheus endpoint, parsed.
type Families map[string]*dto.MetricFamily

// ScrapeOnce fetches one scrape of url with client (e.g. an apiserver's /metrics through its
// authenticated client, or a control plane's admin port).
func ScrapeOnce(ctx context.Context, client *http.Client, url string) (Families, error) {
	f, err := fetchFamilies(ctx, client, url)
	return Families(f), err
}

// Value is the value of the first series of a counter, gauge or untyped family whose labels
// include labels; ok is false when there is none.
func (f Families) Value(name string, labels map[string]string) (float64, bool) {
	for _, m := range f.series(name, labels) {
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// Histogram sums the count and the sum of a histogram family's series whose labels include
// labels.
func (f Families) Histogram(name string, labels map[string]string) (count uint64, sum float64, ok bool) {
	for _, m := range f.series(name, labels) {
		if h := m.GetHistogram(); h != nil {
			count, sum, ok = count+h.GetSampleCount(), sum+h.GetSampleSum(), true
		}
	}
	return count, sum, ok
}

// CumulativeBuckets sums a histogram family's cumulative bucket counts over its series whose
// labels include labels, by upper bound in seconds (+Inf: the sample count); nil when there is
// no such series.
func (f Families) CumulativeBuckets(name string, labels map[string]string) map[float64]uint64 {
	var out map[float64]uint64
	for _, m := range f.series(name, labels) {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		if out == nil {
			out = map[float64]uint64{}
		}
		inf := false
		for _, b := range h.GetBucket() {
			out[b.GetUpperBound()] += b.GetCumulativeCount()
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
		}
		// The text format's parser keeps the +Inf bucket; a series without one has it as its count.
		if !inf {
			out[math.Inf(1)] += h.GetSampleCount()
		}
	}
	return out
}

// BucketsIncrease is the increase of cumulative buckets (CumulativeBuckets) from before to
// after, as results.Buckets in milliseconds (+Inf as −1), ascending: what BucketQuantile reads.
func BucketsIncrease(before, after map[float64]uint64) []results.Bucket {
	les := make([]float64, 0, len(after))
	for le := range after {
		les = append(les, le)
	}
	sort.Float64s(les)
	out := make([]results.Bucket, 0, len(les))
	for _, le := range les {
		ms := le * 1000
		if math.IsInf(le, 1) {
			ms = -1
		}
		n := int64(after[le]) - int64(before[le])
		out = append(out, results.Bucket{LeMs: ms, Count: max(n, 0)})
	}
	return out
}

func (f Families) series(name string, labels map[string]string) []*dto.Metric {
	mf := f[name]
	if mf == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			if have[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

// ReadRSS reads the cgroup's resident anonymous memory (v1 total_rss, v2 anon): the process's
// heap, stacks and runtime, without page cache.
func (c *CgroupMemory) ReadRSS() (int64, error) {
	if c.V2 {
		return statValue(c.files(), c.Dir+"/memory.stat", "anon")
	}
	if v, err := statValue(c.files(), c.Dir+"/memory.stat", "total_rss"); err == nil {
		return v, nil
	}
	return statValue(c.files(), c.Dir+"/memory.stat", "rss")
}

// CaptureHeap takes a heap profile after forced GCs now and returns it (its in-use total and
// top allocation sites).
func (p *Profiles) CaptureHeap(ctx context.Context, reason string) (results.Profile, error) {
	return p.Capture(ctx, Heap, reason)
}

// ScaleSteps is a scale experiment's step record (results.Scale) as a measurement: the
// experiment fills it step by step and it lands in the summary, usable when at least one step
// was measured.
type ScaleSteps struct {
	mu    sync.Mutex
	scale results.Scale
}

// Name implements Measurement.
func (s *ScaleSteps) Name() string { return "scale-steps" }

// Role implements Measurement.
func (s *ScaleSteps) Role() Role { return RoleControlPlane }

// Start implements Measurement.
func (s *ScaleSteps) Start(context.Context, Sink) error { return nil }

// Update changes the record under its lock.
func (s *ScaleSteps) Update(f func(*results.Scale)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.scale)
}

// Gather implements Measurement.
func (s *ScaleSteps) Gather(sum *results.Summary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.scale
	st := results.Measurement{Name: s.Name(), Role: string(RoleControlPlane), Samples: len(sc.Steps), OK: len(sc.Steps) > 0}
	if !st.OK {
		st.Error = "no step was measured"
	}
	status(sum, st)
	if sc.MismatchCount == nil {
		sc.MismatchCount = map[string]int{}
	}
	sum.Scale = &sc
}
