package observe

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
)

// sink collects events and runs background work until its context ends.
type sink struct {
	mu     sync.Mutex
	events []results.Event
	wg     sync.WaitGroup
	ctx    context.Context
}

func (s *sink) RecordEvent(e results.Event) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}
func (s *sink) Logf(string, ...any) {}
func (s *sink) Background(fn func(ctx context.Context)) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); fn(s.ctx) }()
}

func write(t *testing.T, dir, file, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644))
}

// TestMemoryCountsKernelOOMKills: the OOM kills come from the cgroup's own kernel counter
// (memory.oom_control), counted from when the watch started.
func TestMemoryCountsKernelOOMKills(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "memory.usage_in_bytes", "104857600\n")
	write(t, dir, "memory.limit_in_bytes", "209715200\n")
	write(t, dir, "memory.stat", "total_inactive_file 0\n")
	write(t, dir, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
	mem, err := OpenCgroupMemory(dir)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	sk := &sink{ctx: ctx}
	var fired sync.WaitGroup
	fired.Add(1)
	m := &Memory{Reader: mem, Fraction: 0.8, BeforeOOM: func(context.Context) { fired.Done() }}
	require.NoError(t, m.Start(ctx, sk))
	defer func() { cancel(); sk.wg.Wait() }()

	gather := func() results.Summary { var s results.Summary; m.Gather(&s); return s }
	require.Eventually(t, func() bool { return gather().Measurements[0].Samples > 0 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, 0, gather().ControlPlaneStats.OOMKills, "kills before the watch are not this run's")

	write(t, dir, "memory.usage_in_bytes", "188743680\n") // 90 % of the limit
	fired.Wait()
	write(t, dir, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
	require.Eventually(t, func() bool { return gather().ControlPlaneStats.OOMKills == 1 }, 5*time.Second, 10*time.Millisecond)
	s := gather()
	assert.EqualValues(t, 200<<20, s.ControlPlaneStats.MemoryLimit)
	assert.True(t, s.Measurements[0].OK)
	sk.mu.Lock()
	defer sk.mu.Unlock()
	require.NotEmpty(t, sk.events)
	assert.Equal(t, EventMemoryHigh, sk.events[0].Kind)
	assert.Contains(t, sk.events[0].Detail, "180.0 MiB of 200.0 MiB (90 %)")
}

// TestPushIncrease: a labelled counter that first appears after the first scrape started from
// zero; a counter reset (restart) is all increase; a measure never scraped is absent.
func TestPushIncrease(t *testing.T) {
	t0 := time.Now()
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	series := []results.Series{
		{Name: "go_memstats_heap_inuse_bytes", Samples: []results.Sample{{At: at(0), Value: 5}, {At: at(1), Value: 9}}},
		{Name: "pushes", Labels: map[string]string{"kind": "full"}, Samples: []results.Sample{{At: at(0), Value: 2}, {At: at(1), Value: 4}, {At: at(2), Value: 1}}},
		{Name: "pushes", Labels: map[string]string{"kind": "eds"}, Samples: []results.Sample{{At: at(1), Value: 3}, {At: at(2), Value: 5}}},
	}
	m := &ControlPlaneMetrics{Measures: map[subject.Measure]subject.Metric{
		subject.FullPushes: {Name: "pushes", Labels: map[string]string{"kind": "full"}},
		subject.EDSPushes:  {Name: "pushes", Labels: map[string]string{"kind": "eds"}},
		subject.HeapInUse:  {Name: "go_memstats_heap_inuse_bytes"},
	}}
	full, ok := m.increase(series, subject.FullPushes)
	assert.True(t, ok)
	assert.Equal(t, 3.0, full, "2→4, then a restart to 1")
	eds, ok := m.increase(series, subject.EDSPushes)
	assert.True(t, ok)
	assert.Equal(t, 5.0, eds, "appeared at 3 after the first scrape, then +2")
	_, ok = m.increase(series, subject.StreamsRefused)
	assert.False(t, ok, "not mapped")
	_, ok = m.increase(series[:1], subject.FullPushes)
	assert.False(t, ok, "mapped but never scraped")
	heap, ok := m.peak(series, subject.HeapInUse)
	assert.True(t, ok)
	assert.Equal(t, 9.0, heap)
}

// TestGatherRejects: the proxies' NACKs over the run are in the summary (growth of the reject
// counter over every type); a control plane whose reject counter was never scraped leaves the
// field absent, not 0.
func TestGatherRejects(t *testing.T) {
	var mu sync.Mutex
	lds := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "# TYPE pilot_total_xds_rejects counter\npilot_total_xds_rejects{type=\"cds\"} 1\npilot_total_xds_rejects{type=\"lds\"} %d\n", lds)
	}))
	defer srv.Close()
	gather := func(measures map[subject.Measure]subject.Metric, change func()) results.Summary {
		ctx, cancel := context.WithCancel(context.Background())
		sk := &sink{ctx: ctx}
		m := &ControlPlaneMetrics{URL: srv.URL, Interval: 5 * time.Millisecond, Measures: measures}
		require.NoError(t, m.Start(ctx, sk))
		require.Eventually(t, func() bool { return m.s.Scrapes() > 1 }, 5*time.Second, 5*time.Millisecond)
		change()
		n := m.s.Scrapes()
		require.Eventually(t, func() bool { return m.s.Scrapes() > n+1 }, 5*time.Second, 5*time.Millisecond)
		cancel()
		sk.wg.Wait()
		var s results.Summary
		m.Gather(&s)
		return s
	}
	s := gather(map[subject.Measure]subject.Metric{subject.XDSRejects: {Name: "pilot_total_xds_rejects"}}, func() {
		mu.Lock()
		lds = 113
		mu.Unlock()
	})
	require.NotNil(t, s.ControlPlaneStats.XDSRejects)
	assert.EqualValues(t, 113, *s.ControlPlaneStats.XDSRejects, "the cds count did not grow; lds 0 → 113")
	s = gather(map[subject.Measure]subject.Metric{subject.CPUSeconds: {Name: "process_cpu_seconds_total"}}, func() {})
	assert.Nil(t, s.ControlPlaneStats.XDSRejects, "not mapped: absent, not 0")
}

// TestChaosWindow: the chaos-phase figures count only what grew between the last scrape before
// the phase and the last scrape in it — a burst of slow pushes during setup (every proxy's first
// connection) stays out — and a series first seen inside the phase started from zero there.
func TestChaosWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	// Scrapes at 1–5 s. Setup (to 2 s): 50 slow pushes (1 s and more). Chaos (2.5–4.5 s): 10
	// pushes under 10 ms. After it (5 s): 50 more slow ones.
	bucket := func(le string, vals ...float64) results.Series {
		sr := results.Series{Name: "push_time_bucket", Labels: map[string]string{"le": le}}
		for i, v := range vals {
			sr.Samples = append(sr.Samples, results.Sample{At: at(i + 1), Value: v})
		}
		return sr
	}
	series := []results.Series{
		bucket("0.01", 0, 0, 4, 10, 10),
		bucket("1", 0, 0, 4, 10, 10),
		bucket("+Inf", 50, 100, 104, 110, 160),
		{Name: "cpu", Samples: []results.Sample{{At: at(1), Value: 3}, {At: at(2), Value: 7}, {At: at(3), Value: 7.5}, {At: at(4), Value: 8}, {At: at(5), Value: 20}}},
		{Name: "heap", Samples: []results.Sample{{At: at(1), Value: 900}, {At: at(3), Value: 300}, {At: at(5), Value: 800}}},
		// First seen at 4 s: its 2 count from zero.
		{Name: "push_time_bucket", Labels: map[string]string{"le": "+Inf", "type": "rds"}, Samples: []results.Sample{{At: at(4), Value: 2}}},
	}
	end := t0.Add(4500 * time.Millisecond)
	s := &results.Summary{Phases: []results.Phase{
		{Name: "setup", StartedAt: t0, FinishedAt: ptr(at(2))},
		{Name: "chaos", StartedAt: t0.Add(2500 * time.Millisecond), FinishedAt: &end},
	}}
	w := Window(series, s.Phases[1].StartedAt, end)
	require.Len(t, w, 6)
	assert.Equal(t, results.Sample{At: s.Phases[1].StartedAt, Value: 100}, w[2].Samples[0], "the baseline is the last scrape before the phase")
	assert.Equal(t, results.Sample{At: s.Phases[1].StartedAt, Value: 0}, w[5].Samples[0], "born inside: from zero")
	assert.Equal(t, at(4), w[0].Samples[len(w[0].Samples)-1].At, "nothing after the phase")

	m := &ControlPlaneMetrics{Measures: map[subject.Measure]subject.Metric{
		subject.PushTime:   {Name: "push_time"},
		subject.CPUSeconds: {Name: "cpu"},
		subject.HeapInUse:  {Name: "heap"},
	}, s: newScraperWith(series)}
	m.Gather(s)
	cp := s.ControlPlaneStats
	require.NotNil(t, cp.PushTime)
	assert.EqualValues(t, 112, cp.PushTime.Count, "the whole run: 50→160 and the rds 2")
	assert.Equal(t, 1000.0, cp.PushTime.P99Ms, "in the +Inf bucket over the whole run")
	require.NotNil(t, cp.ChaosPushTime)
	assert.EqualValues(t, 12, cp.ChaosPushTime.Count, "10 in the phase plus the rds series born in it")
	assert.InDelta(t, 6, cp.ChaosPushTime.P50Ms, 1e-9, "the 6th of 12, linear within [0, 10 ms]")
	assert.InDelta(t, 1000, cp.ChaosPushTime.P99Ms, 1e-9, "the rds 2 have no finite bucket")
	require.NotNil(t, cp.ChaosCPUSeconds)
	assert.InDelta(t, 1, *cp.ChaosCPUSeconds, 1e-9)
	require.NotNil(t, cp.ChaosPeakHeapBytes)
	assert.EqualValues(t, 300, *cp.ChaosPeakHeapBytes, "only scrapes inside the phase, neither the 900 before nor the 800 after")

	// A chaos phase that never finished gives no chaos figures (not zeros).
	s2 := &results.Summary{Phases: []results.Phase{{Name: "chaos", StartedAt: at(2)}}}
	m.Gather(s2)
	assert.Nil(t, s2.ControlPlaneStats.ChaosPushTime)
	assert.Nil(t, s2.ControlPlaneStats.ChaosCPUSeconds)
	assert.Nil(t, s2.ControlPlaneStats.ChaosPeakHeapBytes)
}

// newScraperWith is a scraper that has recorded series (as its scrapes would have).
func newScraperWith(series []results.Series) *Scraper {
	s := NewScraper("http://127.0.0.1:0/metrics", nil)
	for _, sr := range series {
		for _, x := range sr.Samples {
			s.add(sr.Name, sr.Labels, x.At, x.Value)
		}
	}
	s.ok = 5
	return s
}

func ptr[T any](v T) *T { return &v }
