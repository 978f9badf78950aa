package results

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFitTrendSharesTheSlopeAcrossSegments(t *testing.T) {
	// Two process lifetimes growing 2 MiB/h each, the second starting lower (a restart): one
	// line through all would fall; the per-segment intercepts find the growth.
	hours := []float64{0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8}
	seg := []float64{1, 1, 1, 1, 2, 2, 2, 2}
	ys := make([]float64, len(hours))
	for i, h := range hours {
		base := 100.0
		if seg[i] == 2 {
			base = 40
		}
		ys[i] = (base + 2*h) * (1 << 20)
	}
	tr, err := FitGrowth(hours, ys, seg)
	require.NoError(t, err)
	assert.InDelta(t, 2<<20, tr.SlopePerHour, 1e-3)
	assert.InDelta(t, 0, tr.StdErr, 1e-3)
	assert.Equal(t, 8, tr.Points)
	assert.Equal(t, 2, tr.Segments)

	// Flat with noise: a slope near zero with a standard error that covers it.
	flat := []float64{50, 52, 49, 51, 50, 48, 52, 50}
	one := make([]float64, len(flat))
	tr, err = FitGrowth(hours, flat, one)
	require.NoError(t, err)
	assert.Less(t, tr.SlopePerHour, 3*tr.StdErr+1e-9)
	assert.Positive(t, tr.StdErr)

	// A segment of one point says nothing about the slope.
	_, err = FitGrowth([]float64{0, 1, 2}, []float64{1, 2, 3}, []float64{1, 2, 3})
	assert.ErrorContains(t, err, "0 usable points")
}

func TestRecentTraffic(t *testing.T) {
	tr := &Traffic{Series: []Second{{T: 0, Requests: 5, Errors: 5}, {T: 1, Requests: 10}, {T: 2, Requests: 10, Errors: 1}, {T: 3, Requests: 10}}}
	req, errs := RecentTraffic(tr, 2)
	assert.Equal(t, int64(20), req)
	assert.Equal(t, int64(1), errs)
	req, errs = RecentTraffic(tr, 60)
	assert.Equal(t, int64(35), req)
	assert.Equal(t, int64(6), errs)
	req, _ = RecentTraffic(nil, 60)
	assert.Zero(t, req)
}

func TestSoakChart(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := t0.Add(40 * time.Second)
	s := &Soak{FaultEverySeconds: 300,
		Faults: []SoakFault{
			{Name: "pod-kill/echo", InjectedAt: t0.Add(10 * time.Second), Recovered: true, RecoveredAt: &rec, RecoverySeconds: 30},
			{Name: "cp-oom-kill", InjectedAt: t0.Add(310 * time.Second), Error: "not ready | again"},
		},
		Samples: []SoakSample{
			{At: t0, ControlPlaneOK: true, ControlPlaneHeapBytes: 20 << 20, ControlPlaneGoroutines: 40, HarnessHeapBytes: 10 << 20, HarnessGoroutines: 30},
			{At: t0.Add(300 * time.Second), HarnessHeapBytes: 11 << 20, HarnessGoroutines: 31},
			{At: t0.Add(600 * time.Second), ControlPlaneOK: true, ControlPlaneHeapBytes: 21 << 20, ControlPlaneGoroutines: 40, HarnessHeapBytes: 11 << 20, HarnessGoroutines: 30},
		},
		ControlPlaneHeap:  &Growth{SlopePerHour: 1 << 20, StdErr: 1 << 19, Points: 12, Segments: 3, Mean: 20 << 20},
		HarnessGoroutines: &GoroutineDelta{Start: 30, End: 33, Grown: []StackCount{{Stack: "a ← b", Delta: 3}}},
	}
	// One chart line per sample; the fault mark on the sample after it; an unread control plane
	// shows as such, not as zero.
	lines := strings.Split(strings.TrimSpace(s.Chart()), "\n")
	require.GreaterOrEqual(t, len(lines), 4)
	assert.True(t, strings.HasPrefix(lines[2], "!"), lines[2])
	assert.Contains(t, lines[2], "(unread)")
	assert.Contains(t, lines[1], "CCCC")
}
