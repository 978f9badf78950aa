package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

func TestRenderWritesReports(t *testing.T) {
	dir := t.TempDir()
	s := sample()
	require.NoError(t, results.Write(dir, s))
	require.NoError(t, Render(dir, s))
	for _, f := range []string{results.JUnitFile, results.MarkdownFile, results.HTMLFile, "charts/errors.svg", "charts/errors.png", "charts/latency.png", "charts/memory.svg"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
		assert.Positive(t, st.Size(), f)
	}
	md, err := os.ReadFile(filepath.Join(dir, results.MarkdownFile))
	require.NoError(t, err)
	for _, want := range []string{
		"# meshchaos: cp-oom — fail",
		"| error rate | **fail** | 3.75 % | ≤ 0 % |",
		"400 requests, 15 errors (3.750 %)",
		"| NC | 15 |",
		"first error +0.10 s, last error +1.90 s",
		"![Errors per second](charts/errors.png)",
		"**1** chaos.injected cp (+2.0 s)",
		"| +3.0s | 2 | pod.oomkilled | ns/cp-0/discovery | a \\| b |",
		"`main.grow`",
		"| Harness | v0.4.0-3-g248835d-dirty (248835d732d4b01647831fd771466f9d133049c4) |",
	} {
		assert.Contains(t, string(md), want)
	}
	html, err := os.ReadFile(filepath.Join(dir, results.HTMLFile))
	require.NoError(t, err)
	for _, want := range []string{`<span class="verdict fail">fail</span>`, `<img class="chart" src="charts/errors.svg"`, `<img class="chart" src="charts/memory.svg"`, "<code>main.grow</code>",
		"<tr><th>Harness</th><td>v0.4.0-3-g248835d-dirty (248835d732d4b01647831fd771466f9d133049c4)</td></tr>"} {
		assert.Contains(t, string(html), want)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "charts/errors.svg"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(strings.TrimSpace(string(svg)), "<?xml") || strings.Contains(string(svg), "<svg"))
}

func TestRenderWithoutTraffic(t *testing.T) {
	dir := t.TempDir()
	s := sample()
	s.Traffic, s.ControlPlaneStats = nil, nil
	require.NoError(t, Render(dir, s))
	_, err := os.Stat(filepath.Join(dir, "charts/errors.png"))
	assert.True(t, os.IsNotExist(err), "no chart without data")
	md, err := os.ReadFile(filepath.Join(dir, results.MarkdownFile))
	require.NoError(t, err)
	assert.NotContains(t, string(md), "## Traffic")
}

func TestRenderStartupModesSideBySide(t *testing.T) {
	dir := t.TempDir()
	s := sample()
	s.Startup = []results.Startup{
		{Mode: "none", Pods: 20, Started: 20, AppRestarts: 31, ExitCodes: map[string]int{"1": 20}, FailedFirstCalls: 20,
			FirstSuccessMs: results.Latency{P50: 12000, P99: 31000}, ReadyMs: results.Latency{P50: 12500, P99: 31500}, ProxyFirstConfigMs: results.Latency{P50: 2100, P99: 4000}, PodSpec: "startup/none-pod.yaml"},
		{Mode: "native", Pods: 20, Started: 20, FirstSuccessMs: results.Latency{P50: 3100, P99: 5200}},
	}
	require.NoError(t, Render(dir, s))
	md, err := os.ReadFile(filepath.Join(dir, results.MarkdownFile))
	require.NoError(t, err)
	for _, want := range []string{
		"## App start-up by sidecar start mode",
		"| none | 20 (20) | 31 | 1×20 | 20 | 12000 / 31000 ms | 12500 / 31500 ms | 2100 / 4000 ms | [startup/none-pod.yaml](startup/none-pod.yaml) |",
		"| native | 20 (20) | 0 |  | 0 | 3100 / 5200 ms |",
	} {
		assert.Contains(t, string(md), want)
	}
	html, err := os.ReadFile(filepath.Join(dir, results.HTMLFile))
	require.NoError(t, err)
	assert.Contains(t, string(html), `<td>none</td><td class="num">20 (20)</td><td class="num">31</td>`)
	assert.Contains(t, string(html), `<a href="startup/none-pod.yaml">`)
}

func TestMarkdownShowsPushesAndConvergence(t *testing.T) {
	s := sample()
	at := func(sec int) time.Time { return s.StartedAt.Add(time.Duration(sec) * time.Second) }
	cpu := 12.5
	cp := s.ControlPlaneStats
	cp.CPUSeconds = &cpu
	cp.PushTime = &results.Histogram{Count: 4, P50Ms: 8, P99Ms: 3000, Buckets: []results.Bucket{{LeMs: 10, Count: 2}, {LeMs: 5000, Count: 4}, {LeMs: -1, Count: 4}}}
	cp.PushRate = []results.PushSecond{{At: at(5), Full: 1}, {At: at(9), EDS: 2}}
	s.Convergence = &results.Convergence{Service: "default/flap", Proxies: 20, Missed: 1,
		Latency: results.Histogram{Count: 39, P50Ms: 100, P99Ms: 400, MaxMs: 450, Buckets: []results.Bucket{{LeMs: 100, Count: 20}, {LeMs: -1, Count: 39}}},
		Changes: []results.EndpointChange{
			{At: at(5), Ready: 1, Received: 20, P50Ms: 100, P99Ms: 400, MaxMs: 450, Pushes: &results.Pushes{Full: 1}},
			{At: at(9), Ready: 0, Received: 19, P50Ms: 90, P99Ms: 95, MaxMs: 95},
		}}
	require.NoError(t, s.Validate())
	b, err := Markdown(s, nil)
	require.NoError(t, err)
	md := string(b)
	assert.Contains(t, md, "CPU 12.50 s")
	assert.Contains(t, md, "Push time over 4 responses (each its own generation and send): p50 8.0 ms, p99 3000.0 ms")
	assert.Contains(t, md, "5000–+Inf   ms |")
	chart := results.PushChartText(s)
	lines := strings.Split(strings.TrimSpace(chart), "\n")
	require.Len(t, lines, 2, chart)
	assert.Regexp(t, `^\s*\+5s \|F+\s+full 1\s+eds 0\s+▲ 1$`, lines[0])
	assert.Regexp(t, `^\s*\+9s \|e+\s+full 0\s+eds 2\s+▼ 0$`, lines[1])
	assert.Contains(t, md, chart)
	assert.Contains(t, md, "| 0 | +5.0s | 1 | 20 | 100.0 ms | 400.0 ms | 450.0 ms | 1 | 0 |")
	assert.Contains(t, md, "| 1 | +9.0s | 0 | 19 | 90.0 ms | 95.0 ms | 95.0 ms | – | – |")
	assert.Contains(t, md, "1 missed")
	assert.NotContains(t, md, "The proxy fleet", "no fleet, no section")

	s.Fleet = &results.Fleet{At: at(60), Clients: 3, Connected: 3, Configured: 2, RSSBytes: 3 << 20, RSSBytesPerClient: 1 << 20,
		Pods: []results.FleetPod{{Name: "adsload-0", Node: 2, Clients: 2, Configured: 2, RSSBytes: 2 << 20}, {Name: "adsload-1", Clients: 1, Configured: 0, RSSBytes: 1 << 20}}}
	b, err = Markdown(s, nil)
	require.NoError(t, err)
	md = string(b)
	assert.Contains(t, md, "3 ADS clients on 2 pod(s) at +60.0s: 3 connected, 2 configured; RSS 3.0 MiB in all, 1024 KiB a client.")
	assert.Contains(t, md, "| adsload-0 | 2 | 2 | 2 | 2.0 MiB |")
	assert.Contains(t, md, "| adsload-1 | any | 1 | 0 | 1.0 MiB |")
}

// sample builds a valid finished summary with traffic, control-plane stats, events and checks.
func sample() *results.Summary {
	start := time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	end := start.Add(30 * time.Second)
	series := []results.Second{
		{T: 0, Requests: 100, ByCode: map[string]int64{"200": 100}, LatencyMs: results.Latency{P50: 1, P90: 2, P99: 3, Max: 4}},
		{T: 1, Requests: 100, Errors: 10, ByCode: map[string]int64{"200": 90, "503": 10}, ByFlag: map[string]int64{"NC": 10}, LatencyMs: results.Latency{P50: 1, P90: 2, P99: 5, Max: 9}},
		{T: 2, Requests: 100, Errors: 5, ByCode: map[string]int64{"200": 95, "503": 5}, ByFlag: map[string]int64{"NC": 5}, LatencyMs: results.Latency{P50: 1, P90: 2, P99: 3, Max: 4}},
		{T: 3, Requests: 100, ByCode: map[string]int64{"200": 100}, LatencyMs: results.Latency{P50: 1, P90: 2, P99: 3, Max: 4}},
	}
	return &results.Summary{
		Schema: results.SchemaVersion, Experiment: "cp-oom", Substrate: "local", ControlPlane: "reference",
		Params:         map[string]string{"rate": "100"},
		HarnessVersion: "v0.4.0-3-g248835d-dirty", HarnessCommit: "248835d732d4b01647831fd771466f9d133049c4",
		StartedAt: start, FinishedAt: &end,
		Phases: []results.Phase{{Name: "load", StartedAt: start, FinishedAt: &end}},
		Traffic: &results.Traffic{
			StartedAt: start.Add(time.Second), Rate: 100, Requests: 400, Errors: 15, ErrorRate: 15.0 / 400,
			ByCode: map[string]int64{"200": 385, "503": 15}, ByFlag: map[string]int64{"NC": 15},
			LatencyMs: results.Latency{P50: 1, P90: 2, P99: 4, Max: 9}, ErrorWindowSeconds: 2,
			ErrorWindow: &results.ErrorWindow{FirstSecond: 1, LastSecond: 2, LongestRunSeconds: 2, LongestRunStart: 1,
				RelativeTo: map[string]results.RelativeWindow{"chaos.injected": {StartAfterSeconds: 0.1, EndAfterSeconds: 1.9}}},
			Series: series,
		},
		ControlPlaneStats: &results.ControlPlaneStats{Restarts: 1, OOMKills: 1, Pushes: &results.Pushes{Full: 3, EDS: 10}, PeakHeapBytes: 100 << 20,
			MemoryLimit: 128 << 20,
			Memory:      []results.Sample{{At: start, Value: 50 << 20}, {At: start.Add(2 * time.Second), Value: 110 << 20}, {At: start.Add(3 * time.Second), Value: 10 << 20}},
			Profiles:    []results.Profile{{File: "pprof/001-heap-before-oom.pb.gz", Kind: "heap", Reason: "before-oom", At: start.Add(2 * time.Second), InUseBytes: 100 << 20, Top: []results.AllocSite{{Function: "main.grow", InUseBytes: 90 << 20, Flat: true}}}},
		},
		Events: []results.Event{
			{At: start.Add(2 * time.Second), Kind: "chaos.injected", Object: "cp", Detail: "memory hog"},
			{At: start.Add(3 * time.Second), Kind: "pod.oomkilled", Object: "ns/cp-0/discovery", Detail: "a | b"},
		},
		Checks: []results.Check{
			results.NewCheck("error rate", 3.75, results.LE, 0, "%"),
			results.NewCheck("control-plane OOM kills", 1, results.GE, 1, ""),
		},
		Verdict: results.VerdictFail,
	}
}
