package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func needRoot(t *testing.T) {
	if os.Getenv("MESHCHAOS_SKIP_INTEGRATION") == "1" {
		t.Skip("MESHCHAOS_SKIP_INTEGRATION=1")
	}
	if os.Geteuid() != 0 {
		t.Fatal("cgroup tests need root")
	}
}

// A CPU-bound process in a group with a 10 % quota gets throttled; clearing the quota stops it.
func TestCPUQuotaThrottlesAndClears(t *testing.T) {
	needRoot(t)
	g, err := Create(fmt.Sprintf("/meshchaos-test/cpu-%d", os.Getpid()))
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, g.Remove(5*time.Second))
		parent, _ := Open("/meshchaos-test")
		_ = parent.Remove(time.Second)
		assert.False(t, g.Exists())
	})
	spin := exec.Command("sh", "-c", "while :; do :; done")
	require.NoError(t, spin.Start())
	go func() { _ = spin.Wait() }()
	require.NoError(t, g.AddProcess(spin.Process.Pid))
	assert.Contains(t, g.Procs(), spin.Process.Pid)

	require.NoError(t, g.SetCPUQuota(0.1))
	q, err := g.CPUQuota()
	require.NoError(t, err)
	assert.InDelta(t, 0.1, q, 0.001)
	before, err := g.CPUStat()
	require.NoError(t, err)
	time.Sleep(700 * time.Millisecond)
	during, err := g.CPUStat()
	require.NoError(t, err)
	assert.Greater(t, during.ThrottledPeriods-before.ThrottledPeriods, int64(3), "a spinning process over its quota is throttled")

	// Below 1 ms per 100 ms the period stretches instead of the quota being clamped.
	require.NoError(t, g.SetCPUQuota(0.002))
	q, err = g.CPUQuota()
	require.NoError(t, err)
	assert.InDelta(t, 0.002, q, 0.0001)

	require.NoError(t, g.SetCPUQuota(0))
	q, err = g.CPUQuota()
	require.NoError(t, err)
	assert.Zero(t, q)
	time.Sleep(200 * time.Millisecond)
	after1, _ := g.CPUStat()
	time.Sleep(500 * time.Millisecond)
	after2, _ := g.CPUStat()
	assert.Equal(t, after1.ThrottledPeriods, after2.ThrottledPeriods, "no throttling once the quota is cleared")
}
