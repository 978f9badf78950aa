package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func needRoot(t *testing.T) {
	prereq.Root(t, "cgroup tests create cgroups")
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
	used0, err := g.CPUUsage()
	require.NoError(t, err)
	start := time.Now()
	// Positive signal: the group's throttled periods grow (a spinning process over its quota).
	require.Eventually(t, func() bool {
		during, err := g.CPUStat()
		return err == nil && during.ThrottledPeriods-before.ThrottledPeriods > 3
	}, 10*time.Second, 20*time.Millisecond, "a spinning process over its quota is throttled")
	used1, err := g.CPUUsage()
	require.NoError(t, err)
	// The quota caps the usage the group accounts: about 10 % of the wall time, never much more.
	used := used1 - used0
	assert.Greater(t, used, time.Duration(0), "the spinning process's CPU time is accounted to the group")
	assert.Less(t, used.Seconds(), 0.1*time.Since(start).Seconds()+0.03, "usage stays within the quota")

	// Below 1 ms per 100 ms the period stretches instead of the quota being clamped.
	require.NoError(t, g.SetCPUQuota(0.002))
	q, err = g.CPUQuota()
	require.NoError(t, err)
	assert.InDelta(t, 0.002, q, 0.0001)

	require.NoError(t, g.SetCPUQuota(0))
	q, err = g.CPUQuota()
	require.NoError(t, err)
	assert.Zero(t, q)
	// Positive signal that the limit is gone: over some 300 ms the spinning process gets more
	// than twice the old quota's share of the wall time (on a busy host it may take a few tries).
	require.Eventually(t, func() bool {
		u0, err := g.CPUUsage()
		if err != nil {
			return false
		}
		t0 := time.Now()
		time.Sleep(300 * time.Millisecond)
		u1, err := g.CPUUsage()
		return err == nil && (u1-u0).Seconds() > 0.2*time.Since(t0).Seconds()
	}, 20*time.Second, time.Millisecond, "the process runs beyond the cleared quota")
}

// CPUUsage reads cpuacct.usage (ns) on v1 and usage_usec of cpu.stat on v2.
func TestCPUUsageReadsBothVersions(t *testing.T) {
	v1 := t.TempDir()
	require.NoError(t, os.MkdirAll(v1+"/g", 0o755))
	require.NoError(t, os.WriteFile(v1+"/g/cpuacct.usage", []byte("1500000000\n"), 0o644))
	g := &Group{Path: "/g", hs: []Hierarchy{{Dir: t.TempDir(), Controllers: []string{"cpu"}}, {Dir: v1, Controllers: []string{"cpuacct"}}}}
	u, err := g.CPUUsage()
	require.NoError(t, err)
	assert.Equal(t, 1500*time.Millisecond, u)

	v2 := t.TempDir()
	require.NoError(t, os.MkdirAll(v2+"/g", 0o755))
	require.NoError(t, os.WriteFile(v2+"/cgroup.controllers", []byte("cpu memory\n"), 0o644))
	require.NoError(t, os.WriteFile(v2+"/g/cgroup.controllers", []byte("cpu\n"), 0o644))
	require.NoError(t, os.WriteFile(v2+"/g/cpu.stat", []byte("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"), 0o644))
	g = &Group{Path: "/g", hs: []Hierarchy{{Dir: v2, V2: true}}}
	u, err = g.CPUUsage()
	require.NoError(t, err)
	assert.Equal(t, 2500*time.Millisecond, u)

	_, err = (&Group{Path: "/missing", hs: []Hierarchy{{Dir: v1, Controllers: []string{"cpuacct"}}}}).CPUUsage()
	assert.Error(t, err)
}
