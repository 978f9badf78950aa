package results

import (
	"encoding/xml"
	"os"
	"path/filepath"
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

// endpoint-flap's charts: xDS pushes per second by type, stacked, from the per-type push
// counter (a restart's reset counted from zero), and the push-time and convergence histograms,
// each an SVG and a PNG (report.html shows them: render's tests).
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
	charts, err := RenderCharts(dir, s)
	require.NoError(t, err)
	var svgs []string
	for _, c := range charts {
		svgs = append(svgs, c.SVG)
	}
	for _, name := range []string{ChartPushes, ChartPushTime, ChartConvergence} {
		assert.Contains(t, svgs, ChartsDir+"/"+name+".svg")
		for _, ext := range []string{".svg", ".png"} {
			st, err := os.Stat(filepath.Join(dir, ChartsDir, name+ext))
			require.NoError(t, err, name+ext)
			assert.Positive(t, st.Size())
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, ChartsDir, ChartPushTime+".svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "P99 480 ms")
}
