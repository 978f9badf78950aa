package hog

import (
	"context"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanSplitsCPUsIntoBusyWorkers(t *testing.T) {
	for _, c := range []struct {
		cpus    float64
		workers int
		busy    time.Duration
	}{
		{1, 1, 100 * time.Millisecond},
		{2, 2, 100 * time.Millisecond},
		{0.25, 1, 25 * time.Millisecond},
		{1.5, 2, 75 * time.Millisecond},
	} {
		w, b := plan(c.cpus)
		assert.Equal(t, c.workers, w, "cpus %v", c.cpus)
		assert.Equal(t, c.busy, b, "cpus %v", c.cpus)
	}
}

func TestValidateRefusesNonsense(t *testing.T) {
	for _, bad := range []float64{0, -1, MaxCPUs + 1, math.NaN()} {
		assert.Error(t, Validate(bad), "cpus %v", bad)
	}
	assert.NoError(t, Validate(0.5))
	assert.Error(t, Run(context.Background(), 0), "Run validates too")
}

func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A quarter CPU for a second is about 250 ms of CPU time: clearly some, clearly not a whole CPU.
func TestRunBurnsTheAskedShare(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	before := cpuTime(t)
	start := time.Now()
	require.NoError(t, Run(ctx, 0.25))
	used, wall := cpuTime(t)-before, time.Since(start)
	t.Logf("%.2f s of CPU in %.2f s", used.Seconds(), wall.Seconds())
	assert.Less(t, wall, 1300*time.Millisecond, "Run returns when its context ends")
	assert.Greater(t, used.Seconds(), 0.1*wall.Seconds())
	assert.Less(t, used.Seconds(), 0.45*wall.Seconds())
}
