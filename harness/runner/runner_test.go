package runner

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/internal/memhog"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/traffic"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/internal/version"
	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/results/respflags"
)

func TestMain(m *testing.M) {
	memhog.MaybeRun()
	os.Exit(m.Run())
}

// proxy stands in for a data plane: it answers 200, or while a fault is on 503 with a response
// flag, counting what it injected.
type proxy struct {
	mu       sync.Mutex
	flag     string
	injected map[string]int64
}

func (p *proxy) set(flag string) {
	p.mu.Lock()
	p.flag = flag
	p.mu.Unlock()
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	flag := p.flag
	if flag != "" {
		p.injected[flag]++
	}
	p.mu.Unlock()
	if flag != "" {
		w.Header().Set(respflags.Header, flag)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok"))
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// TestExecuteOOMIncidentRunDir plays incident 1 in miniature with real processes: a "control
// plane" (memhog, serving pprof) in a memory-limited cgroup is OOM-killed by the kernel and
// restarted; while it is down the proxy answers 503 NC. The run directory must hold what
// happened: a heap profile taken before the kill, the memory series against the limit, the
// error window and per-flag counts the proxy injected, a failed error-rate check (verdict fail),
// a passing oomKills check, JUnit and reports. Set MESHCHAOS_KEEP_RUN_DIR=DIR to keep it.
func TestExecuteOOMIncidentRunDir(t *testing.T) {
	prereq.Integration(t)
	dir := t.TempDir()
	if keep := os.Getenv("MESHCHAOS_KEEP_RUN_DIR"); keep != "" {
		dir = keep
		require.NoError(t, os.RemoveAll(dir))
	}
	const limit = 128 << 20
	cg := memhog.NewCgroup(t, limit)
	px := &proxy{injected: map[string]int64{}}
	srv := httptest.NewServer(px)
	defer srv.Close()
	cpAddr := freeAddr(t)

	var cp *memhog.Process
	startCP := func(r *Run) error {
		cp = memhog.Start(t, memhog.Options{Addr: cpAddr, StepMiB: 1, Cgroup: cg})
		return nil
	}
	var injectedAt, clearedAt time.Time
	var tornDown bool
	exp := Experiment{
		Name:         "cp-oom-503",
		Substrate:    "test",
		ControlPlane: "memhog",
		Params:       map[string]string{"rate": "100", "limit": "128Mi"},
		Setup: func(ctx context.Context, r *Run) error {
			if err := startCP(r); err != nil {
				return err
			}
			mem, err := observe.OpenCgroupMemory(cg.Dir)
			if err != nil {
				return err
			}
			prof := &observe.Profiles{BaseURL: "http://" + cpAddr, RunDir: r.Dir()}
			return r.Measure(prof, &observe.Memory{Reader: mem, Fraction: 0.8, BeforeOOM: func(ctx context.Context) {
				if _, err := prof.Capture(ctx, observe.Heap, "before-oom"); err != nil {
					r.Logf("heap profile before OOM: %v", err)
				}
			}})
		},
		Phases: []Phase{
			{Name: "steady", Do: func(ctx context.Context, r *Run) error {
				if err := r.StartTraffic(traffic.Options{Name: "gateway", Targets: []traffic.Target{{URL: srv.URL + "/"}}, Rate: 100, Duration: 12 * time.Second}); err != nil {
					return err
				}
				time.Sleep(2 * time.Second)
				return nil
			}},
			{Name: "chaos", Do: func(ctx context.Context, r *Run) error {
				r.Event("chaos.injected", "memhog", "grow heap until the cgroup limit")
				if err := cp.Grow(); err != nil {
					return err
				}
				select {
				case <-cp.Done():
				case <-time.After(30 * time.Second):
					return errors.New("the control plane was not OOM-killed within 30 s")
				}
				ended, _ := cp.Ended()
				// What kubelet and the proxies would do: the container is restarted, and until its
				// caches are complete the proxies have no cluster (503 NC).
				r.RecordEvent(results.Event{At: ended.UTC(), Kind: observe.PodOOMKilled, Object: "memhog", Detail: "reason OOMKilled, exit code 137"})
				if err := startCP(r); err != nil {
					return err
				}
				// The fault begins at the restart it is measured from (starting the process
				// took 0.3 s under load, errors "before" the restart).
				injectedAt = time.Now()
				px.set(respflags.NoClusterFound)
				r.Event(observe.PodRestarted, "memhog", "restart count 1")
				time.Sleep(2 * time.Second)
				px.set("")
				clearedAt = time.Now()
				r.Event("chaos.cleared", "memhog", "proxies have their clusters again")
				return nil
			}},
			{Name: "recover", Do: func(ctx context.Context, r *Run) error { return r.WaitTraffic(ctx) }},
		},
		Teardown: func(ctx context.Context, r *Run) error {
			cp.Kill()
			tornDown = true
			return nil
		},
		Checks: []Check{
			ErrorRate(results.LE, 0),
			ErrorWindow(results.LE, 0),
			OOMKills(results.GE, 1),
			LatencyP99(results.LE, 1000),
		},
	}
	var out bytes.Buffer
	s, err := Execute(context.Background(), exp, Options{Dir: dir, Progress: NewProgress(&out), FlushInterval: time.Second})
	require.NoError(t, err)
	t.Logf("progress output:\n%s", out.String())
	assert.True(t, tornDown)
	assert.Equal(t, results.VerdictFail, s.Verdict, "errors happened: the error-rate check fails")
	assert.Equal(t, 1, s.Verdict.ExitCode())

	got, err := results.Read(dir)
	require.NoError(t, err, "summary.json on disk is valid")
	assert.Equal(t, results.VerdictFail, got.Verdict)
	require.Len(t, got.Checks, 4)
	assert.False(t, got.Checks[0].Pass, "error rate")
	assert.Contains(t, got.Checks[0].Detail, "by response flag NC: ")
	assert.False(t, got.Checks[1].Pass, "error window")
	assert.Contains(t, got.Checks[1].Detail, "errors in seconds ")
	assert.True(t, got.Checks[2].Pass, "oom kills")
	assert.True(t, got.Checks[3].Pass, "latency")

	// Traffic: what the proxy injected is what was measured.
	px.mu.Lock()
	nc := px.injected[respflags.NoClusterFound]
	px.mu.Unlock()
	tr := got.Traffic
	require.NotNil(t, tr)
	assert.InDelta(t, 1200, tr.Requests, 10)
	assert.Equal(t, map[string]int64{respflags.NoClusterFound: nc}, tr.ByFlag)
	assert.Equal(t, nc, tr.ByCode["503"])
	assert.Equal(t, nc, tr.Errors)
	// The proxy answered NC for d seconds (2 s asleep, longer on a loaded machine); an interval of d touches between ⌊d⌋ and ⌈d⌉+1 whole seconds of the traffic,
	// depending on where it starts within a second.
	d := clearedAt.Sub(injectedAt).Seconds()
	assert.InDelta(t, 100*d, nc, 20, "%.2f s of NC at 100 rps", d)
	require.NotNil(t, tr.ErrorWindow)
	assert.GreaterOrEqual(t, tr.ErrorWindow.LongestRunSeconds, int(math.Floor(d)), "NC for %.2f s", d)
	assert.LessOrEqual(t, tr.ErrorWindow.LongestRunSeconds, int(math.Ceil(d))+1, "NC for %.2f s", d)
	rel, ok := tr.ErrorWindow.RelativeTo["pod.restarted"]
	require.True(t, ok, "error window measured from the restart: %v", tr.ErrorWindow.RelativeTo)
	assert.InDelta(t, 0, rel.StartAfterSeconds, 0.25)
	cleared := tr.ErrorWindow.RelativeTo["chaos.cleared"]
	assert.InDelta(t, 0, cleared.EndAfterSeconds, 0.25, "errors end when the fault is cleared")
	assert.WithinDuration(t, injectedAt, tr.StartedAt.Add(time.Duration(tr.ErrorWindow.FirstSecond)*time.Second), 1100*time.Millisecond)

	// Control plane: a heap profile before the kill, the memory series up to the limit.
	cps := got.ControlPlaneStats
	require.NotNil(t, cps)
	assert.Equal(t, 1, cps.OOMKills)
	assert.EqualValues(t, limit, cps.MemoryLimit)
	var peak float64
	for _, m := range cps.Memory {
		peak = max(peak, m.Value)
	}
	assert.Greater(t, peak, 0.8*limit, "the memory series reaches the trigger")
	var before *results.Profile
	reasons := map[string]bool{}
	for i, p := range cps.Profiles {
		reasons[p.Reason] = true
		if p.Reason == "before-oom" {
			before = &cps.Profiles[i]
		}
		assert.FileExists(t, filepath.Join(dir, p.File))
	}
	require.NotNil(t, before, "profiles: %v", reasons)
	require.NotEmpty(t, before.Top)
	assert.True(t, strings.HasSuffix(before.Top[0].Function, "memhog.growHeap"), before.Top[0].Function)
	assert.True(t, reasons["after setup"] && reasons["after chaos"] && reasons["after recover"], "profiles at phase boundaries: %v", reasons)
	assert.Equal(t, cps.PeakHeapBytes, before.InUseBytes)

	// Timeline, in order, with the harness's bookkeeping.
	var kinds []string
	for _, e := range got.Events {
		if !strings.HasPrefix(e.Kind, "phase.") {
			kinds = append(kinds, e.Kind)
		}
	}
	assert.Equal(t, []string{"traffic.start", "chaos.injected", "cp.memory-high", "pod.oomkilled", "pod.restarted", "chaos.cleared", "traffic.stop"}, kinds)

	// The other artifacts.
	assert.FileExists(t, filepath.Join(dir, "traffic", "results.json"))
	for _, f := range []string{"report.md", "report.html", "charts/errors.svg", "charts/errors.png", "charts/latency.png", "charts/memory.png"} {
		assert.FileExists(t, filepath.Join(dir, f))
	}
	var ju struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
		} `xml:"testsuite"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "junit.xml"))
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(b, &ju))
	assert.Equal(t, 4, ju.Suites[0].Tests)
	assert.Equal(t, 2, ju.Suites[0].Failures)
	assert.Contains(t, out.String(), "check fail — error rate")
}

func quickExperiment(phases ...Phase) Experiment {
	return Experiment{Name: "quick", Phases: phases, Checks: []Check{
		Metric("always", func(*results.Summary) (float64, error) { return 1, nil }, results.GE, 1, ""),
	}}
}

func TestExecuteInterruptedLeavesErrorVerdictAndTearsDown(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var tornDown bool
	var midRun *results.Summary
	exp := quickExperiment(Phase{Name: "long", Do: func(ctx context.Context, r *Run) error {
		r.Event("chaos.injected", "x", "")
		// While the run goes on, the summary on disk is valid and says error (a crash now
		// would leave exactly this).
		s, err := results.Read(r.Dir())
		if err != nil {
			return err
		}
		midRun = s
		cancel() // the user presses ^C
		<-ctx.Done()
		return ctx.Err()
	}}, Phase{Name: "never", Do: func(context.Context, *Run) error { t.Error("phase after an interrupt ran"); return nil }})
	exp.Teardown = func(ctx context.Context, r *Run) error {
		require.NoError(t, ctx.Err(), "teardown gets a live context")
		tornDown = true
		return nil
	}
	s, err := Execute(ctx, exp, Options{Dir: dir, Progress: NewProgress(&bytes.Buffer{})})
	require.NoError(t, err)
	assert.True(t, tornDown)
	require.NotNil(t, midRun)
	assert.Equal(t, results.VerdictError, midRun.Verdict)
	assert.Nil(t, midRun.FinishedAt)
	assert.Equal(t, results.VerdictError, s.Verdict)
	assert.Contains(t, s.Error, "phase long: context canceled")
	got, err := results.Read(dir)
	require.NoError(t, err)
	assert.Equal(t, results.VerdictError, got.Verdict)
	assert.Empty(t, got.Checks, "checks are not evaluated on an interrupted run")
	assert.Len(t, got.Phases, 2, "long and teardown")
}

// TestExecuteRecordsTheSignal: a run cancelled with an Interrupt (the CLI's signal handler)
// says which signal came in which phase; one that comes during the teardown still makes the
// verdict error, though the checks had passed.
func TestExecuteRecordsTheSignal(t *testing.T) {
	for _, tc := range []struct{ during, want string }{{"chaos", "chaos"}, {"teardown", "teardown"}} {
		t.Run(tc.during, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithCancelCause(context.Background())
			sig := func() { cancel(&Interrupt{Signal: "terminated", At: time.Now()}) }
			exp := quickExperiment(Phase{Name: "chaos", Do: func(ctx context.Context, r *Run) error {
				if tc.during == "chaos" {
					sig()
					<-ctx.Done()
					return context.Cause(ctx)
				}
				return nil
			}})
			exp.Checks = []Check{func(*results.Summary) (results.Check, error) {
				return results.Check{Name: "x", Op: results.LE, Pass: true}, nil
			}}
			exp.Teardown = func(ctx context.Context, r *Run) error {
				if tc.during == "teardown" {
					sig()
				}
				return ctx.Err()
			}
			s, err := Execute(ctx, exp, Options{Dir: dir, Progress: NewProgress(&bytes.Buffer{})})
			require.NoError(t, err)
			got, err := results.Read(dir)
			require.NoError(t, err)
			for _, x := range []results.Summary{s, *got} {
				assert.Equal(t, results.VerdictError, x.Verdict)
				assert.Contains(t, x.Error, "interrupted by terminated")
				require.NotNil(t, x.Interrupted)
				assert.Equal(t, "terminated", x.Interrupted.Signal)
				assert.Equal(t, tc.want, x.Interrupted.Phase)
			}
		})
	}
}

func TestExecuteSetupFailureSkipsPhasesButTearsDown(t *testing.T) {
	var tornDown bool
	exp := quickExperiment(Phase{Name: "p", Do: func(context.Context, *Run) error { t.Error("phase ran after failed setup"); return nil }})
	exp.Setup = func(context.Context, *Run) error { return errors.New("no cluster") }
	exp.Teardown = func(context.Context, *Run) error { tornDown = true; return nil }
	s, err := Execute(context.Background(), exp, Options{Dir: t.TempDir(), Progress: NewProgress(&bytes.Buffer{})})
	require.NoError(t, err)
	assert.True(t, tornDown)
	assert.Equal(t, results.VerdictError, s.Verdict)
	assert.Equal(t, "phase setup: no cluster", s.Error)
}

// TestExecuteRecordsTheHarnessBuild: summary.json says which build of meshchaos measured the run
// from its first write, so even a crashed run's summary can be matched to a harness.
func TestExecuteRecordsTheHarnessBuild(t *testing.T) {
	dir := t.TempDir()
	build := version.Get()
	var midRun *results.Summary
	s, err := Execute(context.Background(), quickExperiment(Phase{Name: "p", Do: func(context.Context, *Run) error {
		var err error
		midRun, err = results.Read(dir)
		return err
	}}), Options{Dir: dir, Progress: NewProgress(&bytes.Buffer{})})
	require.NoError(t, err)
	assert.Equal(t, results.VerdictPass, s.Verdict, s.Error)
	require.NotNil(t, midRun)
	assert.NotEmpty(t, midRun.HarnessVersion)
	assert.Equal(t, build.Version, midRun.HarnessVersion, "in the summary before the run finished")
	assert.Equal(t, build.Revision, midRun.HarnessCommit)
	final, err := results.Read(dir)
	require.NoError(t, err)
	assert.Equal(t, build.Version, final.HarnessVersion)
	assert.Equal(t, build.Revision, final.HarnessCommit)
}

func TestExecutePanicIsAnError(t *testing.T) {
	s, err := Execute(context.Background(), quickExperiment(Phase{Name: "boom", Do: func(context.Context, *Run) error { panic("oops") }}),
		Options{Dir: t.TempDir(), Progress: NewProgress(&bytes.Buffer{})})
	require.NoError(t, err)
	assert.Equal(t, results.VerdictError, s.Verdict)
	assert.Contains(t, s.Error, "phase boom panicked: oops")
}

func TestExecuteUnmeasuredCheckIsAnError(t *testing.T) {
	exp := Experiment{Name: "no-traffic", Checks: []Check{ErrorRate(results.LE, 0)}}
	s, err := Execute(context.Background(), exp, Options{Dir: t.TempDir(), Progress: NewProgress(&bytes.Buffer{})})
	require.NoError(t, err)
	assert.Equal(t, results.VerdictError, s.Verdict, "an error-rate check without traffic must not pass")
	assert.Contains(t, s.Error, "no traffic was measured")
}

func TestExecutePassingRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	// The "control plane's" metrics: this process's own Go metrics plus a push counter.
	reg := prometheus.NewRegistry()
	pushes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xds_pushes_total"}, []string{"type"})
	reg.MustRegister(collectors.NewGoCollector(), pushes)
	metrics := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer metrics.Close()
	pushes.WithLabelValues("full")
	exp := Experiment{Name: "steady", Phases: []Phase{{Name: "load", Do: func(ctx context.Context, r *Run) error {
		if err := r.Measure(testCPMetrics(metrics.URL)); err != nil {
			return err
		}
		if err := r.StartTraffic(traffic.Options{Targets: []traffic.Target{{URL: srv.URL}}, Rate: 50, Duration: 2 * time.Second}); err != nil {
			return err
		}
		// The counter grows after a first scrape has seen it at 0.
		if err := waitFor(ctx, func() bool { return scraped(r.Summary()) > 0 }); err != nil {
			return err
		}
		pushes.WithLabelValues("eds").Add(3)
		return r.WaitTraffic(ctx)
	}}}, Checks: []Check{ErrorRate(results.LE, 0), ErrorWindow(results.LE, 0), StatusRate("5xx", results.LE, 0), FullPushes(results.LE, 0), EDSPushes(results.EQ, 3), PeakHeap(results.LE, 1024)}}
	dir := t.TempDir()
	s, err := Execute(context.Background(), exp, Options{Dir: dir, Progress: NewProgress(&bytes.Buffer{})})
	require.NoError(t, err)
	assert.Equal(t, results.VerdictPass, s.Verdict, s.Error)
	assert.InDelta(t, 100, s.Traffic.Requests, 2)
	for _, c := range s.Checks {
		assert.True(t, c.Pass, c.String())
	}
	require.NotNil(t, s.ControlPlaneStats)
	assert.Positive(t, s.ControlPlaneStats.PeakHeapBytes, "peak heap from go_memstats_heap_inuse_bytes")
	require.NotNil(t, s.ControlPlaneStats.Pushes)
	assert.EqualValues(t, 3, s.ControlPlaneStats.Pushes.EDS, "the increase of the scraped counter")
	var names []string
	for _, m := range s.ControlPlaneStats.Metrics {
		names = append(names, m.Name)
		assert.GreaterOrEqual(t, len(m.Samples), 5, "scraped every 200 ms for 2 s: %s", m.Name)
	}
	assert.ElementsMatch(t, []string{"go_memstats_heap_inuse_bytes", "xds_pushes_total", "xds_pushes_total"}, names, "full and eds")
}

func TestStatusRate(t *testing.T) {
	s := &results.Summary{Traffic: &results.Traffic{Requests: 200, ByCode: map[string]int64{"200": 150, "503": 40, "504": 6, "404": 4}}}
	c, err := StatusRate("5xx", results.LE, 0)(s)
	require.NoError(t, err)
	assert.InDelta(t, 23, c.Observed, 1e-9)
	assert.False(t, c.Pass)
	c, err = StatusRate("503", results.LE, 25)(s)
	require.NoError(t, err)
	assert.InDelta(t, 20, c.Observed, 1e-9)
	assert.True(t, c.Pass)
}

func TestProgressPlainInCI(t *testing.T) {
	t.Setenv("CI", "true")
	var b bytes.Buffer
	p := NewProgress(&b)
	p.Phase("chaos")
	p.Traffic(traffic.Progress{Elapsed: 3 * time.Second, Duration: 10 * time.Second, Requests: 300, Errors: 2})
	p.Logf("chaos.injected %s", "x")
	assert.NotContains(t, b.String(), "\r", "no cursor tricks in CI logs")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	assert.Equal(t, []string{"[00:00] phase chaos", "[00:00] traffic 3s/10s: 300 requests, 2 errors", "[00:00] chaos.injected x"}, lines)
}

func TestProgressTerminalBar(t *testing.T) {
	var b bytes.Buffer
	p := &termProgress{w: &b, start: time.Now()}
	p.Phase("load")
	p.Traffic(traffic.Progress{Elapsed: 5 * time.Second, Duration: 10 * time.Second, Requests: 500})
	out := b.String()
	assert.Contains(t, out, "\r\x1b[2K00:00  load  ["+strings.Repeat("█", 12)+strings.Repeat("░", 12)+"]  50%  500 req  0 err")
}

func TestProgressTerminalStaysQuietAfterDone(t *testing.T) {
	var b bytes.Buffer
	p := &termProgress{w: &b, start: time.Now()}
	p.Phase("cluster up")
	p.Done()
	b.Reset()
	p.Logf("teardown step")
	assert.Equal(t, "\r\x1b[2K[00:00] teardown step\n", b.String(), "a line, and no status line redrawn after Done")
}

func testCPMetrics(url string) *observe.ControlPlaneMetrics {
	return &observe.ControlPlaneMetrics{URL: url, Interval: 200 * time.Millisecond, Measures: map[subject.Measure]subject.Metric{
		subject.FullPushes: {Name: "xds_pushes_total", Labels: map[string]string{"type": "full"}},
		subject.EDSPushes:  {Name: "xds_pushes_total", Labels: map[string]string{"type": "eds"}},
		subject.HeapInUse:  {Name: "go_memstats_heap_inuse_bytes"},
	}}
}

// scraped is how many scrapes of the control plane's metrics succeeded so far.
func scraped(s results.Summary) int {
	for _, m := range s.Measurements {
		if m.Name == "metrics" {
			return m.Samples
		}
	}
	return 0
}

func waitFor(ctx context.Context, cond func() bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("condition not met within 10 s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// TestExecuteUnscrapedPushesAreAnError: a control plane whose metrics cannot be scraped must not
// pass a push check on a zero it never read; the summary and report show the failed scrapes.
func TestExecuteUnscrapedPushesAreAnError(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL + "/metrics"
	dead.Close()
	exp := Experiment{Name: "unscraped", Phases: []Phase{{Name: "load", Do: func(ctx context.Context, r *Run) error {
		if err := r.Measure(testCPMetrics(url)); err != nil {
			return err
		}
		return waitFor(ctx, func() bool {
			for _, m := range r.Summary().Measurements {
				if m.Failures >= 2 {
					return true
				}
			}
			return false
		})
	}}}, Checks: []Check{FullPushes(results.LE, 0)}}
	dir := t.TempDir()
	s, err := Execute(context.Background(), exp, Options{Dir: dir, Progress: NewProgress(&bytes.Buffer{})})
	require.NoError(t, err)
	assert.Equal(t, results.VerdictError, s.Verdict)
	assert.Contains(t, s.Error, "metrics measurement of the control-plane was not usable")
	require.Len(t, s.Measurements, 1)
	assert.False(t, s.Measurements[0].OK)
	assert.GreaterOrEqual(t, s.Measurements[0].Failures, 2)
	assert.Contains(t, s.Measurements[0].Error, "connect")
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "| metrics | control-plane | **no** |")
}

// TestExecuteFinalWriteFailureSaysTheVerdict: a run whose final summary.json cannot be written
// (the disk went away at the end) returns an error that says so and what the verdict was — the
// run directory still says "in progress", so the caller must not take the verdict's exit code —
// and renders no report contradicting it; one whose reports cannot be written says that.
func TestExecuteFinalWriteFailureSaysTheVerdict(t *testing.T) {
	for _, tc := range []struct {
		name     string
		breakDir func(dir string) error
		want     string
	}{
		{name: "summary", want: "write the run's summary: ", breakDir: func(dir string) error {
			// A file where the run directory was: nothing can be written into it any more.
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			return os.WriteFile(dir, nil, 0o644)
		}},
		{name: "reports", want: "write the run's reports: render charts: ", breakDir: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, results.ChartsDir), nil, 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			exp := quickExperiment()
			exp.Teardown = func(context.Context, *Run) error { return tc.breakDir(dir) }
			s, err := Execute(context.Background(), exp, Options{Dir: dir, Progress: NewProgress(&bytes.Buffer{})})
			require.Error(t, err)
			assert.Equal(t, results.VerdictPass, s.Verdict, "the verdict in memory")
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasSuffix(err.Error(), ": the verdict was pass"), err.Error())
			if tc.name == "reports" {
				got, err := results.Read(dir)
				require.NoError(t, err)
				assert.Equal(t, results.VerdictPass, got.Verdict, "the summary was written before the reports")
				assert.NoFileExists(t, filepath.Join(dir, results.HTMLFile))
			}
		})
	}
}

// TestTeardownSeesTheVerdictSoFar: the teardown knows the verdict it is about to make final (what
// --keep-cluster on-failure decides on): the checks' when they ran, error when the run could
// not be carried out.
func TestTeardownSeesTheVerdictSoFar(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pass  bool
		setup error
		want  results.Verdict
	}{
		{"pass", true, nil, results.VerdictPass},
		{"fail", false, nil, results.VerdictFail},
		{"error", true, errors.New("no cluster"), results.VerdictError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := quickExperiment()
			exp.Setup = func(context.Context, *Run) error { return tc.setup }
			observed := 0.0
			if !tc.pass {
				observed = 1
			}
			exp.Checks = []Check{func(*results.Summary) (results.Check, error) {
				return results.NewCheck("x", observed, results.LE, 0, ""), nil
			}}
			var seen results.Verdict
			exp.Teardown = func(_ context.Context, r *Run) error { seen = r.VerdictSoFar(); return nil }
			s, err := Execute(context.Background(), exp, Options{Dir: t.TempDir(), Progress: NewProgress(&bytes.Buffer{})})
			require.NoError(t, err)
			assert.Equal(t, tc.want, seen)
			assert.Equal(t, tc.want, s.Verdict)
		})
	}
}
