package observe

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/internal/memhog"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
}

func TestCgroupMemoryV1(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"memory.usage_in_bytes": "104857600\n",
		"memory.limit_in_bytes": "134217728\n",
		"memory.stat":           "cache 20971520\ninactive_file 1\ntotal_inactive_file 10485760\n",
	})
	m, err := OpenCgroupMemory(dir)
	require.NoError(t, err)
	assert.False(t, m.V2)
	u, err := m.ReadMemory()
	require.NoError(t, err)
	assert.EqualValues(t, 100<<20, u.Usage)
	assert.EqualValues(t, 90<<20, u.WorkingSet, "usage minus total_inactive_file")
	assert.EqualValues(t, 128<<20, u.Limit)
	assert.InDelta(t, 90.0/128, u.Fraction(), 1e-9)

	writeFiles(t, dir, map[string]string{"memory.limit_in_bytes": "9223372036854771712\n"})
	u, err = m.ReadMemory()
	require.NoError(t, err)
	assert.Zero(t, u.Limit, "v1's huge number means no limit")
	assert.Zero(t, u.Fraction())
}

func TestCgroupMemoryV2(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"memory.current": "52428800\n",
		"memory.max":     "max\n",
		"memory.stat":    "anon 1\ninactive_file 2097152\n",
	})
	m, err := OpenCgroupMemory(dir)
	require.NoError(t, err)
	assert.True(t, m.V2)
	u, err := m.ReadMemory()
	require.NoError(t, err)
	assert.EqualValues(t, 48<<20, u.WorkingSet)
	assert.Zero(t, u.Limit)

	_, err = OpenCgroupMemory(t.TempDir())
	assert.ErrorContains(t, err, "not a memory cgroup")
}

func TestCgroupMemoryForSelf(t *testing.T) {
	m, err := CgroupMemoryForPID(os.Getpid())
	if err != nil {
		prereq.Missing(t, "no memory cgroup visible here: %v", err) // containers without cgroupfs
	}
	u, err := m.ReadMemory()
	require.NoError(t, err)
	assert.Positive(t, u.Usage)
}

type fakeMemory struct {
	mu   sync.Mutex
	vals []int64 // working sets, one per read; the last repeats
	i    int
}

func (f *fakeMemory) ReadMemory() (MemoryUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.vals[min(f.i, len(f.vals)-1)]
	f.i++
	if v < 0 {
		return MemoryUsage{}, errors.New("cgroup gone")
	}
	return MemoryUsage{At: time.Now(), Usage: v, WorkingSet: v, Limit: 100}, nil
}

func TestOOMTriggerFiresOncePerApproach(t *testing.T) {
	// Rises past 80, stays, dips to 70 (not re-armed), errors (restart), drops to 10 (re-armed),
	// rises again.
	mem := &fakeMemory{vals: []int64{10, 50, 79, 85, 95, 70, 90, -1, 10, 60, 81, 99, 99}}
	var fired []int64
	var samples int
	ctx, cancel := context.WithCancel(context.Background())
	trig := &OOMTrigger{Memory: mem, Interval: time.Millisecond,
		Fire:   func(_ context.Context, m MemoryUsage) { fired = append(fired, m.WorkingSet) },
		Sample: func(MemoryUsage) { samples++ },
	}
	done := make(chan error)
	go func() { done <- trig.Run(ctx) }()
	require.Eventually(t, func() bool { mem.mu.Lock(); defer mem.mu.Unlock(); return mem.i > 15 }, 5*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, []int64{85, 81}, fired)
	assert.Greater(t, samples, 12)
}

func TestOOMTriggerReportsNeverRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := (&OOMTrigger{Memory: &fakeMemory{vals: []int64{-1}}, Interval: time.Millisecond}).Run(ctx)
	assert.ErrorContains(t, err, "cgroup gone")
}

// TestOOMTriggerCapturesHeapBeforeKernelKill runs a real process that grows its heap inside a
// memory-limited cgroup; the trigger must capture a heap profile from the process's pprof port
// before the kernel's OOM killer ends it.
func TestOOMTriggerCapturesHeapBeforeKernelKill(t *testing.T) {
	prereq.Integration(t)
	const limit = 160 << 20
	cg := memhog.NewCgroup(t, limit)
	c := memhog.Start(t, memhog.Options{Cgroup: cg})

	mem, err := CgroupMemoryForPID(c.Cmd.Process.Pid)
	require.NoError(t, err)
	assert.Equal(t, cg.Dir, mem.Dir, "the child's cgroup is found from /proc")

	runDir := t.TempDir()
	prof := NewProfiler("http://"+c.Addr, runDir, nil)
	var mu sync.Mutex
	var captured []results.Profile
	var fireUsage MemoryUsage
	var peak int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trig := &OOMTrigger{
		Memory:   mem,
		Fraction: 0.75,
		Interval: 20 * time.Millisecond,
		Fire: func(ctx context.Context, m MemoryUsage) {
			p, err := prof.Capture(ctx, Heap, "before-oom")
			mu.Lock()
			defer mu.Unlock()
			fireUsage = m
			if err != nil {
				t.Errorf("capture before OOM: %v", err)
				return
			}
			captured = append(captured, p)
		},
		Sample: func(m MemoryUsage) {
			mu.Lock()
			peak = max(peak, m.WorkingSet)
			mu.Unlock()
		},
	}
	trigDone := make(chan error, 1)
	go func() { trigDone <- trig.Run(ctx) }()

	killsBefore, err := cg.OOMKills()
	require.NoError(t, err)
	require.NoError(t, c.Grow())
	select {
	case <-c.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the child was not OOM-killed within 60 s")
	}
	cancel()
	require.NoError(t, <-trigDone)

	ended, waitErr := c.Ended()
	var exit *exec.ExitError
	require.True(t, errors.As(waitErr, &exit), "child ended with %v", waitErr)
	ws := exit.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled(), "child was killed by a signal")
	assert.Equal(t, syscall.SIGKILL, ws.Signal())
	killsAfter, err := cg.OOMKills()
	require.NoError(t, err)
	assert.Greater(t, killsAfter, killsBefore, "the kernel's OOM killer did it")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, captured, 1, "one heap profile on the approach to the limit")
	p := captured[0]
	assert.True(t, p.At.Before(ended), "captured at %s, before the kill at %s", p.At, ended)
	assert.GreaterOrEqual(t, fireUsage.Fraction(), 0.75)
	assert.EqualValues(t, limit, fireUsage.Limit)
	t.Logf("fired at %.1f MiB of %d MiB; peak working set seen %.1f MiB; profile in use %.1f MiB; killed %s after capture",
		float64(fireUsage.WorkingSet)/(1<<20), limit>>20, float64(peak)/(1<<20), float64(p.InUseBytes)/(1<<20), ended.Sub(p.At).Round(time.Millisecond))

	f, err := os.Open(filepath.Join(runDir, p.File))
	require.NoError(t, err, "profile saved in the run directory")
	defer f.Close()
	parsed, err := profile.Parse(f)
	require.NoError(t, err)
	total, top := TopInUse(parsed, 3)
	assert.Equal(t, p.InUseBytes, total)
	require.NotEmpty(t, top)
	assert.True(t, strings.HasSuffix(top[0].Function, ".growHeap"), "top in-use site is the allocating function, got %q", top[0].Function)
	assert.Greater(t, float64(top[0].InUseBytes), 0.8*float64(total), "it holds most of the heap")
	// Well beyond the idle process's ~10 MiB: the profile shows the approach to the limit. (Not
	// a fixed share of the limit: under -race the shadow memory takes much of the cgroup.)
	assert.Greater(t, top[0].InUseBytes, int64(limit/4))
}
