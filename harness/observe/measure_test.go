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
