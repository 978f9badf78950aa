package capacity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

// Synthetic control plane: heap = 20 MiB + 1500 B·endpoints + 40 KiB·proxies, RSS = 2.5× heap.
const (
	heapA, heapB, heapC = 20 << 20, 1500.0, 40 << 10
	rssFactor           = 2.5
)

func heapAt(eps, proxies int) int64 {
	return int64(heapA + heapB*float64(eps) + heapC*float64(proxies))
}

// synthRun is a serviceentry-scale summary at a fleet size with the given steps (10 endpoints
// per ServiceEntry), its memory on the synthetic line plus noise (± noise bytes, alternating).
func synthRun(proxies int, steps []int, noise int64) *results.Summary {
	t0 := time.Date(2026, 11, 26, 21, 0, 0, 0, time.UTC)
	t1 := t0.Add(3 * time.Minute)
	sc := &results.Scale{Baseline: results.ScaleStep{HeapBytes: heapAt(0, proxies), RSSBytes: int64(rssFactor * float64(heapAt(0, proxies))), Proxies: proxies}}
	for i, n := range steps {
		d := noise
		if i%2 == 1 {
			d = -noise
		}
		h := heapAt(n*10, proxies) + d
		sc.Steps = append(sc.Steps, results.ScaleStep{ServiceEntries: n, Endpoints: n * 10, HeapBytes: h, RSSBytes: int64(rssFactor * float64(h)),
			PushMeasured: true, PushP99Ms: float64(n) / 10, PushCount: 3, ConvergeSeconds: 1, Converged: true,
			Proxies: proxies, FleetMeasured: proxies > 0, FleetConverged: proxies > 0, FleetConvergeSeconds: 2})
	}
	return &results.Summary{Experiment: "serviceentry-scale", Params: map[string]string{"proxies": fmt.Sprint(proxies), "endpoints": "10"},
		Verdict: results.VerdictPass, StartedAt: t0, FinishedAt: &t1, Scale: sc}
}

func TestFitRecoversKnownCoefficients(t *testing.T) {
	var pts []Point
	for _, p := range []int{100, 1000, 5000} {
		got, err := Points(fmt.Sprintf("run-%d", p), synthRun(p, []int{500, 1000, 2500}, 0))
		require.NoError(t, err)
		require.Len(t, got, 4, "the baseline and three steps")
		pts = append(pts, got...)
	}
	f, err := FitLinear(pts, func(p Point) float64 { return float64(p.HeapBytes) }, false)
	require.NoError(t, err)
	assert.InDelta(t, heapA, f.A, 1)
	assert.InDelta(t, heapB, f.B, 1e-6)
	assert.InDelta(t, heapC, f.C, 1e-3)
	assert.True(t, f.ProxiesFitted)
	assert.InDelta(t, 1, f.R2, 1e-9)
	assert.Equal(t, 12, f.Points)
	assert.Equal(t, [4]int{0, 25000, 100, 5000}, [4]int{f.EndpointsMin, f.EndpointsMax, f.ProxiesMin, f.ProxiesMax})
}

func TestFitWithNoiseHasRSquaredBelowOne(t *testing.T) {
	var pts []Point
	for _, p := range []int{100, 1000} {
		got, err := Points("r", synthRun(p, []int{500, 1000, 2500, 5000}, 2<<20))
		require.NoError(t, err)
		pts = append(pts, got...)
	}
	f, err := FitLinear(pts, func(p Point) float64 { return float64(p.HeapBytes) }, false)
	require.NoError(t, err)
	assert.Less(t, f.R2, 1.0)
	assert.Greater(t, f.R2, 0.99, "2 MiB of noise on a 75 MiB rise")
	assert.InDelta(t, heapB, f.B, 100, "the per-endpoint cost within 100 B")
	assert.InDelta(t, 2<<20, f.RMS, 1<<20)
}

func TestCrossFitRecoversPerEndpointPerProxy(t *testing.T) {
	// Each proxy holds 8 B per endpoint on top of the synthetic line (its subscriptions).
	const d = 8.0
	var pts []Point
	for _, p := range []int{100, 1000} {
		got, err := Points("r", synthRun(p, []int{500, 1000, 2500}, 0))
		require.NoError(t, err)
		for i := range got {
			got[i].HeapBytes += int64(d * float64(got[i].Endpoints) * float64(got[i].Proxies))
		}
		pts = append(pts, got...)
	}
	heap := func(p Point) float64 { return float64(p.HeapBytes) }
	lin, err := FitLinear(pts, heap, false)
	require.NoError(t, err)
	assert.Less(t, lin.R2, 0.99, "a + b·E + c·P misses the cross term")
	f, err := FitLinear(pts, heap, true)
	require.NoError(t, err)
	require.True(t, f.Cross)
	assert.InDelta(t, heapA, f.A, 1)
	assert.InDelta(t, heapB, f.B, 1e-6)
	assert.InDelta(t, heapC, f.C, 1e-3)
	assert.InDelta(t, d, f.D, 1e-9)
	assert.InDelta(t, 1, f.R2, 1e-9)
	assert.InDelta(t, heapB+d*1000, f.PerEndpointAt(1000), 1e-6)

	p, err := Project(f, 4<<30, 1000, 10)
	require.NoError(t, err)
	assert.True(t, p.Cross)
	assert.InDelta(t, (float64(4<<30)-heapA-heapC*1000)/(heapB+d*1000), p.Endpoints, 1)

	one, err := FitLinear(pts[:4], heap, true)
	require.NoError(t, err)
	assert.False(t, one.Cross, "one fleet size: no cross term")
}

func TestFitOneFleetSizeFitsNoPerProxyTerm(t *testing.T) {
	pts, err := Points("r", synthRun(1000, []int{500, 1000, 2500}, 0))
	require.NoError(t, err)
	f, err := FitLinear(pts, func(p Point) float64 { return float64(p.HeapBytes) }, false)
	require.NoError(t, err)
	assert.False(t, f.ProxiesFitted)
	assert.Zero(t, f.C)
	assert.InDelta(t, heapA+heapC*1000, f.A, 1, "the fleet's cost lands in the constant")
	assert.InDelta(t, heapB, f.B, 1e-6)
}

func TestFitRefusesTooFewPoints(t *testing.T) {
	_, err := FitLinear(nil, func(p Point) float64 { return 0 }, false)
	require.Error(t, err)
	_, err = FitLinear([]Point{{Endpoints: 10, HeapBytes: 1}, {Endpoints: 10, HeapBytes: 2}}, func(p Point) float64 { return float64(p.HeapBytes) }, false)
	require.ErrorContains(t, err, "two sizes")
	_, err = FitLinear([]Point{{Endpoints: 0, Proxies: 1}, {Endpoints: 10, Proxies: 2}, {Endpoints: 20, Proxies: 3}}, func(p Point) float64 { return 1 }, false)
	require.ErrorContains(t, err, "want at least 4")
}

func TestRunWithoutMeasurementIsAnError(t *testing.T) {
	s := synthRun(100, []int{500, 1000}, 0)
	s.Scale.Steps[1].RSSBytes = 0
	_, err := Points("runs/x", s)
	require.ErrorContains(t, err, "step 2 (1000 ServiceEntries): RSS not measured")

	s = synthRun(100, []int{500}, 0)
	s.Scale.Baseline.HeapBytes = 0
	_, err = Points("runs/x", s)
	require.ErrorContains(t, err, "the baseline: heap not measured")

	_, err = Points("runs/y", &results.Summary{Verdict: results.VerdictError, Error: "setup failed"})
	require.ErrorContains(t, err, "no scale steps in the summary (verdict error: setup failed)")

	s = synthRun(100, nil, 0)
	_, err = Points("runs/z", s)
	require.ErrorContains(t, err, "no step was measured")

	s = synthRun(100, []int{500}, 0)
	s.Params["proxies"] = "many"
	_, err = Points("runs/w", s)
	require.ErrorContains(t, err, `proxies="many"`)
}

func TestBuildReportsAMissingRunAndFitsTheOthers(t *testing.T) {
	bad := synthRun(5000, []int{500}, 0)
	bad.Scale.Steps[0].RSSBytes = 0
	// A run with figures whose verdict is error, for reasons on two lines (istiod at 5000
	// proxies: a step that never reached the oracle client, said of three checks).
	slow := synthRun(1000, []int{500, 1000, 2500}, 0)
	slow.Verdict, slow.Error = results.VerdictError, "check \"a\": step 500 never reached the oracle client\ncheck \"b\": the same | again"
	runs := []Run{
		{ControlPlane: "istiod@2026-08", Dir: "a/1", Summary: synthRun(100, []int{500, 1000, 2500}, 0)},
		{ControlPlane: "istiod@2026-08", Dir: "a/4", Summary: slow},
		{ControlPlane: "reference", Dir: "b/1", Summary: synthRun(100, []int{500, 1000, 2500}, 0)},
		{ControlPlane: "istiod@2026-08", Dir: "a/2", Summary: synthRun(1000, []int{500, 1000, 2500}, 0)},
		{ControlPlane: "istiod@2026-08", Dir: "a/3", Summary: bad},
		{ControlPlane: "reference", Dir: "b/2", Summary: nil},
	}
	r := Build(runs, 4<<30, []int{100, 1000, 5000})
	require.Len(t, r.ControlPlanes, 2)
	is, ref := r.ControlPlanes[0], r.ControlPlanes[1]
	assert.Equal(t, "istiod@2026-08", is.Name, "in the order the control planes first appear")
	require.NotNil(t, is.RSS)
	assert.InDelta(t, rssFactor*heapB, is.RSS.B, 1e-3)
	assert.InDelta(t, rssFactor*heapC, is.RSS.C, 1e-2)
	require.Len(t, is.Errors, 1)
	assert.Contains(t, is.Errors[0], "a/3: step 1 (500 ServiceEntries): RSS not measured")
	assert.Len(t, is.Runs, 4, "the unusable run is listed")
	assert.Equal(t, 1000, is.Rows[len(is.Rows)-1].Proxies, "rows by fleet, then ServiceEntries")

	require.Len(t, is.Projections, 6, "three fleets by each model")
	require.NotNil(t, is.RSSCross)
	assert.InDelta(t, 0, is.RSSCross.D, 1e-6, "no cross term in the synthetic data")
	for _, p := range is.Projections {
		want := (float64(4<<30) - rssFactor*(heapA+heapC*float64(p.Proxies))) / (rssFactor * heapB)
		assert.InDelta(t, want, p.Endpoints, 1, "at %d proxies", p.Proxies)
		assert.Equal(t, p.Endpoints/10, p.ServiceEntries)
		assert.True(t, p.Extrapolated, "beyond the 25 000 endpoints measured")
	}
	assert.Equal(t, 5000, is.Projections[2].Proxies)
	assert.True(t, is.Projections[2].Extrapolated)

	assert.False(t, ref.RSS.ProxiesFitted, "one fleet size")
	assert.Contains(t, ref.Errors, "b/2: no summary")

	var md bytes.Buffer
	require.NoError(t, r.WriteMarkdown(&md))
	for _, want := range []string{"| istiod@2026-08 | RSS | 50.0 MiB | 3750 B | 100.0 KiB | — | 1.000 |", "not fitted (one fleet size)",
		"| istiod@2026-08 | 1000 | 2500 | 25000 |", "## Not measured", "a/3: step 1 (500 ServiceEntries): RSS not measured", "extrapolated"} {
		assert.Contains(t, md.String(), want)
	}
	assert.Contains(t, md.String(), "| istiod@2026-08 | 1000 | error: check \"a\": step 500 never reached the oracle client check \"b\": the same \\| again | 3m0s | a/4 |\n",
		"a run's multi-line error stays in its row of the table")

	dir := t.TempDir()
	require.NoError(t, Write(dir, r))
	assert.Len(t, In(dir), 2)
	b, err := os.ReadFile(filepath.Join(dir, JSONFile))
	require.NoError(t, err)
	var back Report
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, Schema, back.Schema)
	assert.InDelta(t, r.ControlPlanes[0].RSS.B, back.ControlPlanes[0].RSS.B, 1e-9)
}

func TestProjectionEdges(t *testing.T) {
	f := Fit{A: 100 << 20, B: 2000, C: 1 << 20, ProxiesFitted: true, EndpointsMin: 0, EndpointsMax: 500000, ProxiesMin: 100, ProxiesMax: 1000}
	p, err := Project(f, 1<<30, 500, 10)
	require.NoError(t, err)
	assert.False(t, p.None)
	assert.Equal(t, (1<<30-600<<20)/2000, p.Endpoints)
	assert.False(t, p.Extrapolated)
	p, err = Project(f, 1<<30, 2000, 10)
	require.NoError(t, err)
	assert.True(t, p.None, "2000 proxies at 1 MiB each fill 1 GiB alone")
	_, err = Project(Fit{B: -1}, 1<<30, 100, 10)
	require.ErrorContains(t, err, "does not grow with endpoints")
}
