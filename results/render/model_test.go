package render

import (
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

// full is sample() with every optional section populated.
func full(t *testing.T) *results.Summary {
	s := sample()
	at := func(sec int) time.Time { return s.StartedAt.Add(time.Duration(sec) * time.Second) }
	cpu, rejects := 3.5, int64(2)
	cp := s.ControlPlaneStats
	cp.CPUSeconds, cp.XDSRejects, cp.ChaosCPUSeconds = &cpu, &rejects, &cpu
	cp.PushTime = &results.Histogram{Count: 4, P50Ms: 8, P99Ms: 30, Buckets: []results.Bucket{{LeMs: 10, Count: 2}, {LeMs: -1, Count: 4}}}
	cp.ChaosPushTime = &results.Histogram{Count: 2, P50Ms: 8, P99Ms: 30}
	cp.PushRate = []results.PushSecond{{At: at(5), Full: 1}, {At: at(9), EDS: 2}}
	s.Convergence = &results.Convergence{Service: "default/flap", Proxies: 2,
		Latency: results.Histogram{Count: 2, P50Ms: 100, P99Ms: 400, MaxMs: 400, Buckets: []results.Bucket{{LeMs: 100, Count: 1}, {LeMs: -1, Count: 2}}},
		Changes: []results.EndpointChange{{At: at(5), Ready: 1, Received: 2, P50Ms: 100, P99Ms: 400, MaxMs: 400}}}
	s.Workloads = map[string]*results.WorkloadStats{"app": {Restarts: 1, Ready: 2, NotReady: 1}}
	s.Startup = []results.Startup{{Mode: "native", Pods: 2, Started: 2}}
	s.Faults = []results.Fault{{Name: "memory-ballast/control-plane", Implementation: "cgroup", Fallback: true}}
	s.Measurements = []results.Measurement{{Name: "metrics", Role: "control-plane", Samples: 0, Failures: 3, Error: "connect: refused"}}
	s.Scale = scaleFixture(t)
	s.Soak = soakFixture()
	s.Logs = logsFixture()
	noConfig := 2.28
	s.Attacks = map[string]*results.Traffic{
		"grpc": {Requests: 4100, Errors: 125, ErrorRate: 125.0 / 4100, ByCode: map[string]int64{"OK": 3975, "Unavailable": 125}, NoConfigSeconds: &noConfig},
		"flap": {Requests: 400, Errors: 40, ErrorRate: 0.1, ByCode: map[string]int64{"200": 360, "503": 40}},
	}
	s.Kept = &results.KeptCluster{Name: "cpoo4242", Substrate: "local", Kubeconfig: "/var/lib/meshchaos/clusters/cpoo4242/kubeconfig", Why: "keep on-failure, verdict fail"}
	require.NoError(t, s.Validate())
	return s
}

func logsFixture() *results.Logs {
	return &results.Logs{Namespaces: []string{"default", "meshchaos-system"}, MaxBytes: 4 << 20,
		Files: []results.LogFile{
			{Namespace: "meshchaos-system", Pod: "cp-0", Container: "discovery", Path: "logs/meshchaos-system/cp-0/discovery.log", Bytes: 2048},
			{Namespace: "meshchaos-system", Pod: "cp-0", Container: "discovery", Previous: true, Path: "logs/meshchaos-system/cp-0/discovery.previous.log", Bytes: 4 << 20, Cut: true},
			{Namespace: "default", Pod: "gateway-1", Container: "proxy", Error: "the server rejected our request"},
		},
		Errors: []string{"namespace istio-system not read: it is the installed control plane's, not the run's"}}
}

// TestLogsListedInBoth: the kept logs are linked in both reports, with the previous
// container's, a cut log and one that could not be read said as such, and a kept cluster says
// how to reach and remove it.
func TestLogsListedInBoth(t *testing.T) {
	s := full(t)
	for _, render := range []func(*results.Summary, []results.Chart) ([]byte, error){Markdown, HTML} {
		b, err := render(s, nil)
		require.NoError(t, err)
		out := html.UnescapeString(string(b))
		for _, want := range []string{"2 container logs of the pods of the run's namespaces (default, meshchaos-system)",
			"logs/meshchaos-system/cp-0/discovery.previous.log", "discovery (previous)", "cut: its end only", "2.0 KiB",
			"the server rejected our request", "istio-system not read",
			"export KUBECONFIG=/var/lib/meshchaos/clusters/cpoo4242/kubeconfig", "meshchaos cluster down cpoo4242"} {
			assert.Contains(t, out, want)
		}
		assert.NotContains(t, out, "4096.0 KiB", "a size in the unit that reads")
	}
}

// TestAttacksInBoth: the further attacks (endpoint-flap's, the grpc-go clients' RPCs) are
// reported as the main traffic is, with the clients' longest time without config.
func TestAttacksInBoth(t *testing.T) {
	s := full(t)
	for _, render := range []func(*results.Summary, []results.Chart) ([]byte, error){Markdown, HTML} {
		b, err := render(s, nil)
		require.NoError(t, err)
		out := html.UnescapeString(string(b))
		for _, want := range []string{"Traffic: grpc", "4100 requests, 125 errors (3.049 %)", "Unavailable",
			"Longest time a client channel had no usable config: 2.28 s", "Traffic: flap", "400 requests, 40 errors"} {
			assert.Contains(t, out, want)
		}
		assert.NotContains(t, out, "No errors.", "no section with errors says it had none")
	}
}

var h2 = regexp.MustCompile(`<h2>(.*?)</h2>`)

// headings are the section titles of report.md and report.html, in order.
func headings(t *testing.T, s *results.Summary) (md, htm []string) {
	charts := []results.Chart{{Title: "Errors per second", SVG: "charts/errors.svg", PNG: "charts/errors.png"}}
	m, err := Markdown(s, charts)
	require.NoError(t, err)
	for _, l := range strings.Split(string(m), "\n") {
		if t, ok := strings.CutPrefix(l, "## "); ok {
			md = append(md, t)
		}
	}
	h, err := HTML(s, charts)
	require.NoError(t, err)
	for _, g := range h2.FindAllStringSubmatch(string(h), -1) {
		htm = append(htm, html.UnescapeString(g[1]))
	}
	return md, htm
}

// TestEverySectionInBoth: report.md and report.html have the same sections in the same order,
// for a run with every section and for one with none of the optional ones.
func TestEverySectionInBoth(t *testing.T) {
	md, htm := headings(t, full(t))
	assert.Equal(t, []string{"Checks", "Traffic", "Traffic: flap", "Traffic: grpc", "Scale", "Soak", "Control plane", "Endpoint convergence at the proxies", "Workloads",
		"App start-up by sidecar start mode", "Faults", "Measurements", "Logs", "Heap profiles", "Charts", "Timeline"}, md,
		"the fixture populates every section: a new section belongs here too")
	assert.Equal(t, md, htm)

	bare := sample()
	bare.Traffic, bare.ControlPlaneStats = nil, nil
	md, htm = headings(t, bare)
	assert.Equal(t, []string{"Checks", "Charts", "Timeline"}, md)
	assert.Equal(t, md, htm)
}

// TestScaleAndSoakAreTables: in HTML, Scale's and Soak's tables are tables, not Markdown in <pre>.
func TestScaleAndSoakAreTables(t *testing.T) {
	h, err := HTML(full(t), nil)
	require.NoError(t, err)
	page := string(h)
	assert.Contains(t, page, "<th>ServiceEntries</th><th>Endpoints</th>")
	assert.Contains(t, page, "<th>#</th><th>fault</th><th>injected</th>")
	assert.NotContains(t, page, "|---|")
}

// TestMemoryIsWorkingSetAgainstLimit: a ballast the process holds but never touches swells the
// heap beyond the limit; the report sets the working set against the limit and labels the heap.
func TestMemoryIsWorkingSetAgainstLimit(t *testing.T) {
	s := sample()
	cp := s.ControlPlaneStats
	cp.PeakHeapBytes, cp.MemoryLimit = 545_700<<10, 256<<20 // the ballast's 512 MiB counted in the heap
	cp.Memory = []results.Sample{{At: s.StartedAt, Value: 90 << 20}, {At: s.StartedAt.Add(time.Second), Value: 200 << 20}}
	for _, render := range []func(*results.Summary, []results.Chart) ([]byte, error){Markdown, HTML} {
		b, err := render(s, nil)
		require.NoError(t, err)
		out := string(b)
		assert.Contains(t, out, "Peak memory working set 200.0 MiB of a 256.0 MiB limit (78 %)")
		assert.Contains(t, out, "Peak Go heap in use 532.9 MiB (the process")
		assert.NotContains(t, out, "Limit 256.0 MiB", "no bare limit beside the heap")
	}
}

// TestUnobservedFiguresLeftOut: a push histogram with no push in it, and counters never
// scraped, are not printed as zeros.
func TestUnobservedFiguresLeftOut(t *testing.T) {
	s := sample()
	cp := s.ControlPlaneStats
	cp.Pushes = &results.Pushes{Full: 1, EDS: 1}
	cp.PushTime = &results.Histogram{Count: 0, Buckets: []results.Bucket{{LeMs: 10}, {LeMs: -1}}}
	cp.ChaosPushTime = &results.Histogram{Count: 0}
	b, err := Markdown(s, nil)
	require.NoError(t, err)
	md := string(b)
	assert.Contains(t, md, "Pushes: full 1, EDS 1")
	assert.NotContains(t, md, "Push time")
	assert.NotContains(t, md, "chaos phase")
	assert.NotContains(t, md, "```", "no empty histogram block")
	assert.NotContains(t, md, "CPU", "CPU never scraped")
	assert.NotContains(t, md, "rejects", "rejects never scraped")

	cp.Pushes, cp.Memory, cp.PeakHeapBytes = nil, nil, 0
	b, err = Markdown(s, nil)
	require.NoError(t, err)
	md = string(b)
	assert.NotContains(t, md, "Pushes")
	assert.NotContains(t, md, "working set")
	assert.NotContains(t, md, "heap in use")
}

// TestTimelineInTimeOrder: events recorded out of order (one taken from the API, older than the
// one recorded before it) are shown in time order, numbered as the charts' markers.
func TestTimelineInTimeOrder(t *testing.T) {
	s := sample()
	s.Events = append(s.Events, results.Event{At: s.StartedAt.Add(time.Second), Kind: "pod.notready", Object: "ns/echo-0"})
	b, err := Markdown(s, nil)
	require.NoError(t, err)
	md := string(b)
	first := strings.Index(md, "| +1.0s | 1 | pod.notready |")
	second := strings.Index(md, "| +2.0s | 2 | chaos.injected |")
	third := strings.Index(md, "| +3.0s | 3 | pod.oomkilled |")
	require.True(t, first >= 0 && second >= 0 && third >= 0, md)
	assert.Less(t, first, second)
	assert.Less(t, second, third)
	ms := results.Markers(s)
	require.Len(t, ms, 3)
	assert.Equal(t, "pod.notready", ms[0].Event.Kind, "the charts number markers in the same order")
}

func scaleFixture(t *testing.T) *results.Scale {
	s := &results.Scale{Baseline: results.ScaleStep{HeapBytes: 1 << 20}, MismatchCount: map[string]int{"endpoint-port": 2}}
	for _, n := range []int{50, 100, 200} {
		s.Steps = append(s.Steps, results.ScaleStep{ServiceEntries: n, Endpoints: 10 * n, HeapBytes: 1<<20 + int64(2000*10*n), Converged: true})
	}
	var xs, ys []float64
	for _, st := range s.Steps {
		xs, ys = append(xs, float64(st.Endpoints)), append(ys, float64(st.HeapBytes-s.Baseline.HeapBytes))
	}
	f, err := results.FitPower(xs, ys)
	require.NoError(t, err)
	f.Resolution = results.ExponentResolution(xs, ys, 512<<10)
	s.Fit = &f
	s.Mismatches = []results.Mismatch{{Step: 50, Scenario: "endpoint-port", Cluster: "outbound|80||a", Want: "10.0.0.1:9000", Got: "10.0.0.1:80"}}
	return s
}

func TestScaleSection(t *testing.T) {
	s := sample()
	s.Scale = scaleFixture(t)
	b, err := Markdown(s, nil)
	require.NoError(t, err)
	md := string(b)
	assert.Contains(t, md, "endpoints^**1.000**")
	assert.Contains(t, md, "the heap's jitter alone could move it by 0.47)", "the fit says how much its steps resolve")
	assert.Contains(t, md, "| 200 | 2000 |")
	assert.Contains(t, md, "| not measured |", "push counts never read are not shown as 0")
	assert.Contains(t, md, "endpoint-port 2")
	assert.Contains(t, md, "outbound\\|80\\|\\|a")
	assert.Contains(t, md, s.Scale.Chart(60, 16))
}

func soakFixture() *results.Soak {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := t0.Add(40 * time.Second)
	return &results.Soak{FaultEverySeconds: 300,
		Faults: []results.SoakFault{
			{Name: "pod-kill/echo", InjectedAt: t0.Add(10 * time.Second), Recovered: true, RecoveredAt: &rec, RecoverySeconds: 30},
			{Name: "cp-oom-kill", InjectedAt: t0.Add(310 * time.Second), Error: "not ready | again"},
		},
		Samples: []results.SoakSample{
			{At: t0, ControlPlaneOK: true, ControlPlaneHeapBytes: 20 << 20, ControlPlaneGoroutines: 40, HarnessHeapBytes: 10 << 20, HarnessGoroutines: 30},
			{At: t0.Add(300 * time.Second), HarnessHeapBytes: 11 << 20, HarnessGoroutines: 31},
		},
		ControlPlaneHeap:  &results.Growth{SlopePerHour: 1 << 20, StdErr: 1 << 19, Points: 12, Segments: 3, Mean: 20 << 20},
		HarnessGoroutines: &results.GoroutineDelta{Start: 30, End: 33, Grown: []results.StackCount{{Stack: "a ← b", Delta: 3}}},
	}
}

func TestSoakSection(t *testing.T) {
	s := sample()
	s.Soak = soakFixture()
	b, err := Markdown(s, nil)
	require.NoError(t, err)
	md := string(b)
	for _, want := range []string{
		"2 faults, one every 5m0s; 1 recovered.",
		"| 1 | pod-kill/echo | 00:00:10 | 30.0 s |  |",
		`| 2 | cp-oom-kill | 00:05:10 | — | not ready \| again |`,
		"control-plane live heap: +1.00 ± 0.50 MiB/hour (mean 20.0 MiB, 12 points, 3 process lifetime(s))",
		"harness live heap: no trend",
		"- harness goroutines: 30 at the start, 33 at the end",
		"<br>+3 a ← b",
		"control-plane goroutines: no profiles",
		s.Soak.Chart(),
	} {
		assert.Contains(t, md, want)
	}
}
