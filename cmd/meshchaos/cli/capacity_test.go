package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/results/capacity"
)

// TestCapacityRefusesBadInputBeforeAnything: every input is checked before a run directory
// or a cluster exists.
func TestCapacityRefusesBadInputBeforeAnything(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--proxies", "100,lots"}, `--proxies "100,lots": want comma-separated integers`},
		{[]string{"--proxies", "100,100"}, "100 twice"},
		{[]string{"--proxies", "0"}, "from 1 to 10000"},
		{[]string{"--memory-budget", "much"}, `--memory-budget "much"`},
		{[]string{"--set", "proxies=5"}, "--set proxies=5: use --proxies"},
		{[]string{"--cp", "nosuch"}, "--cp"},
		{[]string{"--steps", "0"}, "steps"},
	} {
		home := t.TempDir()
		t.Setenv("MESHCHAOS_HOME", home)
		out := filepath.Join(t.TempDir(), "out")
		code, msg := run(t, append([]string{"capacity", "--out", out}, tc.args...)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, msg)
		assert.Contains(t, msg, tc.msg, "%v", tc.args)
		assert.NoDirExists(t, out, "%v: nothing created", tc.args)
		assertNothingStarted(t, home, false)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, capacity.JSONFile), []byte("{}"), 0o644))
	code, msg := run(t, "capacity", "--out", dir)
	assert.Equal(t, 2, code)
	assert.Contains(t, msg, "already holds a capacity report")
}

// writeScaleRun writes a serviceentry-scale run directory: memory on a known line.
func writeScaleRun(t *testing.T, dir, cp string, proxies int, rss bool) {
	t.Helper()
	t0 := time.Date(2026, 11, 26, 21, 0, 0, 0, time.UTC)
	t1 := t0.Add(2 * time.Minute)
	at := func(eps int) results.ScaleStep {
		h := int64(30<<20 + 1000*eps + 50<<10*proxies)
		st := results.ScaleStep{ServiceEntries: eps / 10, Endpoints: eps, HeapBytes: h, Proxies: proxies, PushMeasured: true, PushP99Ms: 120, Converged: true, ConvergeSeconds: 1.5}
		if rss {
			st.RSSBytes = 2 * h
		}
		return st
	}
	s := &results.Summary{Schema: results.SchemaVersion, Experiment: capacityExperiment, ControlPlane: cp, StartedAt: t0, FinishedAt: &t1,
		Params: map[string]string{"proxies": fmt.Sprint(proxies), "endpoints": "10"}, Verdict: results.VerdictError, Error: "synthetic",
		Scale: &results.Scale{Baseline: at(0), Steps: []results.ScaleStep{at(5000), at(10000), at(25000)}}}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, results.Write(dir, s))
}

func TestCapacityReportRebuildsFromRunDirectories(t *testing.T) {
	root := t.TempDir()
	writeScaleRun(t, filepath.Join(root, "istiod@2026-08", "proxies-100"), "istiod@2026-08", 100, true)
	writeScaleRun(t, filepath.Join(root, "istiod@2026-08", "proxies-1000"), "istiod@2026-08", 1000, true)
	code, msg := run(t, "capacity", "report", root, "--memory-budget", "1Gi")
	require.Equal(t, 0, code, msg)
	assert.Contains(t, msg, "| istiod@2026-08 | RSS | 60.0 MiB | 2000 B | 100.0 KiB | — | 1.000 |")
	assert.FileExists(t, filepath.Join(root, capacity.MarkdownFile))
	b, err := os.ReadFile(filepath.Join(root, capacity.MarkdownFile))
	require.NoError(t, err)
	assert.Contains(t, string(b), "## Projection")

	// A run whose RSS was not read: reported, and the exit says so.
	writeScaleRun(t, filepath.Join(root, "reference", "proxies-100"), "reference", 100, false)
	out := t.TempDir()
	code, msg = run(t, "capacity", "report", root, "--out", out)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "RSS not measured")
	assert.FileExists(t, filepath.Join(out, capacity.JSONFile), "the report is written all the same")

	code, msg = run(t, "capacity", "report", t.TempDir())
	assert.Equal(t, 2, code)
	assert.Contains(t, msg, "no serviceentry-scale run below")
}
