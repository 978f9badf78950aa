package soak

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

func TestSoakTrendsSegmentsTheControlPlaneByProcess(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var settled []results.SoakSample
	for i := range 8 {
		start, heap := 1000.0, 50+i // MiB, 1 MiB per 5 minutes = 12 MiB/h
		if i >= 4 {
			start, heap = 2000, 30+i
		}
		settled = append(settled, results.SoakSample{At: t0.Add(time.Duration(i) * 5 * time.Minute), ControlPlaneOK: i != 2,
			ControlPlaneStart: start, ControlPlaneHeapBytes: int64(heap) << 20, HarnessHeapBytes: 10 << 20, HarnessLiveBytes: 10 << 20})
	}
	cp, h := Trends(nil, settled)
	require.NotNil(t, cp)
	require.NotNil(t, h)
	assert.InDelta(t, 12, cp.SlopePerHour/(1<<20), 1e-6)
	assert.Equal(t, 2, cp.Segments)
	assert.Equal(t, 7, cp.Points) // the unread sample is left out
	assert.InDelta(t, 0, h.SlopePerHour, 1e-6)
	cp, h = Trends(nil, settled[:2])
	assert.Nil(t, cp)
	assert.Nil(t, h)
}

// The harness's trend takes every periodic sample's live heap from the first settled sample on:
// a short soak with two settled points still has a harness trend, and the start-up before the
// first settled sample (its heap still rising) is left out.
func TestSoakTrendsFitTheHarnessOverPeriodicSamples(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var samples []results.SoakSample
	for i := range 40 { // every 10 s; 6 MiB/h = 1/60 MiB per 10 s after the first 100 s
		live := 20.0 + float64(i-10)/60
		if i < 10 {
			live = 2 * float64(i) // start-up
		}
		samples = append(samples, results.SoakSample{At: t0.Add(time.Duration(i) * 10 * time.Second),
			HarnessHeapBytes: 99 << 20, HarnessLiveBytes: int64(live * (1 << 20))})
	}
	settled := []results.SoakSample{
		{At: t0.Add(100 * time.Second), HarnessHeapBytes: 20 << 20, HarnessLiveBytes: 20 << 20},
		{At: t0.Add(300 * time.Second), HarnessHeapBytes: 20<<20 + 20<<20/60, HarnessLiveBytes: 20<<20 + 20<<20/60},
	}
	_, h := Trends(samples, settled)
	require.NotNil(t, h)
	assert.Equal(t, 32, h.Points, "30 periodic samples from 100 s on and 2 settled")
	assert.InDelta(t, 6, h.SlopePerHour/(1<<20), 0.05)
	// Samples of an older summary (no live figure) are left out, not read as 0.
	for i := range samples {
		samples[i].HarnessLiveBytes = 0
	}
	_, h = Trends(samples, settled)
	assert.Nil(t, h, "two settled points are too few")
}
