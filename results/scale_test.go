package results

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFitPower(t *testing.T) {
	xs := []float64{500, 1000, 2500, 5000}
	lin, quad := make([]float64, len(xs)), make([]float64, len(xs))
	for i, x := range xs {
		lin[i] = 2048 * x
		quad[i] = 80 * x * x
	}
	f, err := FitPower(xs, lin)
	require.NoError(t, err)
	assert.InDelta(t, 1, f.Exponent, 1e-9)
	assert.InDelta(t, 2048, f.Coeff, 1e-6)
	assert.InDelta(t, 0, f.StdErr, 1e-9)
	assert.InDelta(t, 3000, f.Inverse(f.At(3000)), 1e-6)
	f, err = FitPower(xs, quad)
	require.NoError(t, err)
	assert.InDelta(t, 2, f.Exponent, 1e-9)

	// Noise gives a standard error; points at or below zero are skipped.
	noisy := []float64{1000, 2300, 4500, 11000}
	f, err = FitPower(xs, noisy)
	require.NoError(t, err)
	assert.Positive(t, f.StdErr)
	_, err = FitPower([]float64{1, 2}, []float64{5, -1})
	assert.ErrorContains(t, err, "1 usable points")
}

func TestExponentResolution(t *testing.T) {
	const mib = 1 << 20
	// The kind example's run in CI on 2026-11-24: 50 and 100 ServiceEntries, exponent 2.011.
	tiny := ExponentResolution([]float64{507, 1014}, []float64{0.7 * mib, 2.9 * mib}, 0.5*mib)
	assert.InDelta(t, 1.28, tiny, 0.01)
	// The both-ways test's scale (200/400/800), its smallest growth measured: resolved.
	small := ExponentResolution([]float64{2007, 4014, 8021}, []float64{2.1 * mib, 5.6 * mib, 9.5 * mib}, 0.5*mib)
	assert.InDelta(t, 0.21, small, 0.01)
	// Points the fit skips are skipped here too; without two of them nothing is resolved.
	assert.Equal(t, small, ExponentResolution([]float64{1000, 2007, 4014, 8021}, []float64{-1, 2.1 * mib, 5.6 * mib, 9.5 * mib}, 0.5*mib))
	assert.True(t, math.IsInf(ExponentResolution([]float64{1000, 2000}, []float64{mib, 0}, 0.5*mib), 1))
	assert.True(t, math.IsInf(ExponentResolution(nil, nil, 0.5*mib), 1))
}

func TestScaleChart(t *testing.T) {
	s := &Scale{Baseline: ScaleStep{HeapBytes: 1 << 20}, MismatchCount: map[string]int{"endpoint-port": 2}}
	for _, n := range []int{50, 100, 200} {
		s.Steps = append(s.Steps, ScaleStep{ServiceEntries: n, Endpoints: 10 * n, HeapBytes: 1<<20 + int64(2000*10*n), Converged: true})
	}
	var xs, ys []float64
	for _, st := range s.Steps {
		xs, ys = append(xs, float64(st.Endpoints)), append(ys, float64(st.HeapBytes-s.Baseline.HeapBytes))
	}
	f, err := FitPower(xs, ys)
	require.NoError(t, err)
	f.Resolution = ExponentResolution(xs, ys, 512<<10)
	s.Fit = &f
	s.Mismatches = []Mismatch{{Step: 50, Scenario: "endpoint-port", Cluster: "outbound|80||a", Want: "10.0.0.1:9000", Got: "10.0.0.1:80"}}
	// The report's section (render's tests) shows this chart.
	c := s.Chart(60, 16)
	assert.Equal(t, 3+1, strings.Count(c, "*"), "three points and the legend: %s", c)
	assert.False(t, math.IsNaN(f.Coeff))
}
