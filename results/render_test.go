package results

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJUnit(t *testing.T) {
	s := sample()
	b, err := JUnit(s)
	require.NoError(t, err)
	var doc struct {
		Suites []struct {
			Name     string  `xml:"name,attr"`
			Tests    int     `xml:"tests,attr"`
			Failures int     `xml:"failures,attr"`
			Errors   int     `xml:"errors,attr"`
			Time     float64 `xml:"time,attr"`
			Cases    []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(b, &doc))
	su := doc.Suites[0]
	assert.Equal(t, "meshchaos.cp-oom", su.Name)
	assert.Equal(t, 2, su.Tests)
	assert.Equal(t, 1, su.Failures)
	assert.Zero(t, su.Errors)
	assert.EqualValues(t, 30, su.Time)
	require.NotNil(t, su.Cases[0].Failure)
	assert.Equal(t, "observed 3.75 %, threshold ≤ 0 %", su.Cases[0].Failure.Message)
	assert.Nil(t, su.Cases[1].Failure)
	assert.Contains(t, string(b), `<property name="harnessCommit" value="248835d732d4b01647831fd771466f9d133049c4">`, "which harness produced the CI result")

	s.Verdict, s.Error = VerdictError, "setup: no cluster"
	b, err = JUnit(s)
	require.NoError(t, err)
	doc.Suites = nil
	require.NoError(t, xml.Unmarshal(b, &doc))
	assert.Equal(t, 1, doc.Suites[0].Errors, "an errored run is never green in CI")
	assert.Contains(t, string(b), `<error message="setup: no cluster" type="RunError">`)
}

func TestRenderWritesReports(t *testing.T) {
	dir := t.TempDir()
	s := sample()
	require.NoError(t, Write(dir, s))
	require.NoError(t, Render(dir, s))
	for _, f := range []string{JUnitFile, MarkdownFile, HTMLFile, "charts/errors.svg", "charts/errors.png", "charts/latency.png", "charts/memory.svg"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
		assert.Positive(t, st.Size(), f)
	}
	md, err := os.ReadFile(filepath.Join(dir, MarkdownFile))
	require.NoError(t, err)
	for _, want := range []string{
		"# meshchaos: cp-oom — fail",
		"| error rate | FAIL | 3.75 % | ≤ 0 % |",
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
	html, err := os.ReadFile(filepath.Join(dir, HTMLFile))
	require.NoError(t, err)
	for _, want := range []string{`<span class="verdict fail">fail</span>`, `<img class="chart" src="charts/errors.svg"`, `<img class="chart" src="charts/memory.svg"`, "<code>main.grow</code>",
		"<tr><th>Harness</th><td colspan=\"3\">v0.4.0-3-g248835d-dirty (248835d732d4b01647831fd771466f9d133049c4)</td></tr>"} {
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
	md, err := os.ReadFile(filepath.Join(dir, MarkdownFile))
	require.NoError(t, err)
	assert.NotContains(t, string(md), "## Traffic")
}

func TestMarkersGroupCloseEvents(t *testing.T) {
	s := sample()
	s.Events = append(s.Events, Event{At: s.Events[1].At.Add(100e6), Kind: "pod.restarted"}, Event{At: s.Events[1].At, Kind: "traffic.stop"})
	ms := Markers(s)
	require.Len(t, ms, 3, "traffic.* is bookkeeping, not a marker")
	labels := markerLabels(ms)
	require.Len(t, labels, 2)
	assert.Equal(t, "1", labels[0].Event.Detail)
	assert.Equal(t, "2,3", labels[1].Event.Detail)
}

func TestRenderStartupModesSideBySide(t *testing.T) {
	dir := t.TempDir()
	s := sample()
	s.Startup = []Startup{
		{Mode: "none", Pods: 20, Started: 20, AppRestarts: 31, ExitCodes: map[string]int{"1": 20}, FailedFirstCalls: 20,
			FirstSuccessMs: Latency{P50: 12000, P99: 31000}, ReadyMs: Latency{P50: 12500, P99: 31500}, ProxyFirstConfigMs: Latency{P50: 2100, P99: 4000}, PodSpec: "startup/none-pod.yaml"},
		{Mode: "native", Pods: 20, Started: 20, FirstSuccessMs: Latency{P50: 3100, P99: 5200}},
	}
	require.NoError(t, Render(dir, s))
	md, err := os.ReadFile(filepath.Join(dir, MarkdownFile))
	require.NoError(t, err)
	for _, want := range []string{
		"## App start-up by sidecar start mode",
		"| none | 20 (20) | 31 | 1×20  | 20 | 12000 / 31000 ms | 12500 / 31500 ms | 2100 / 4000 ms | [startup/none-pod.yaml](startup/none-pod.yaml) |",
		"| native | 20 (20) | 0 |  | 0 | 3100 / 5200 ms |",
	} {
		assert.Contains(t, string(md), want)
	}
	html, err := os.ReadFile(filepath.Join(dir, HTMLFile))
	require.NoError(t, err)
	assert.Contains(t, string(html), `<td>none</td><td class="num">20 (20)</td><td class="num">31</td>`)
	assert.Contains(t, string(html), `<a href="startup/none-pod.yaml">`)
}

// endpoint-flap's charts: xDS pushes per second by type, stacked, from the per-type push
// counter (a restart's reset counted from zero), and the push-time and convergence histograms,
// each an SVG and a PNG shown in report.html.
func TestRenderPushAndHistogramCharts(t *testing.T) {
	dir := t.TempDir()
	s := sample()
	t0 := s.StartedAt
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s.ControlPlaneStats.Metrics = append(s.ControlPlaneStats.Metrics,
		Series{Name: "pilot_xds_pushes", Labels: map[string]string{"type": "eds"}, Samples: []Sample{{At: at(1000), Value: 0}, {At: at(1500), Value: 20}, {At: at(2200), Value: 25}, {At: at(3100), Value: 5}}},
		Series{Name: "pilot_xds_pushes", Labels: map[string]string{"type": "cds"}, Samples: []Sample{{At: at(1000), Value: 4}, {At: at(2100), Value: 24}}})
	types, from, counts := pushesPerSecond(s.ControlPlaneStats.Metrics)
	assert.Equal(t, []string{"cds", "eds"}, types)
	assert.Equal(t, t0.Add(time.Second).UTC(), from)
	assert.Equal(t, []float64{20, 5, 5}, counts["eds"], "second 1: +20; second 2: +5; second 3: a reset, 5 from zero")
	assert.Equal(t, []float64{0, 20, 0}, counts["cds"])
	s.ControlPlaneStats.PushTime = &Histogram{Count: 10, P50Ms: 40, P99Ms: 480, Buckets: []Bucket{{LeMs: 10, Count: 0}, {LeMs: 100, Count: 8}, {LeMs: 500, Count: 10}, {LeMs: -1, Count: 10}}}
	s.Convergence = &Convergence{Latency: Histogram{Count: 4, P50Ms: 150, P99Ms: 300, Buckets: []Bucket{{LeMs: 100, Count: 1}, {LeMs: 250, Count: 3}, {LeMs: 500, Count: 4}}}}
	require.NoError(t, Render(dir, s))
	html, err := os.ReadFile(filepath.Join(dir, HTMLFile))
	require.NoError(t, err)
	for _, name := range []string{ChartPushes, ChartPushTime, ChartConvergence} {
		for _, ext := range []string{".svg", ".png"} {
			st, err := os.Stat(filepath.Join(dir, ChartsDir, name+ext))
			require.NoError(t, err, name+ext)
			assert.Positive(t, st.Size())
		}
		assert.Contains(t, string(html), `<img class="chart" src="charts/`+name+`.svg"`)
	}
	svg, err := os.ReadFile(filepath.Join(dir, ChartsDir, ChartPushTime+".svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "P99 480 ms")
}
