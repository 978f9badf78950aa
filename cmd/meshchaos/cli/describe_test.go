package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
)

// TestDescribeEveryExperiment: describe works for every experiment of the catalog, in text and
// JSON, with every parameter at its default and a cluster to create.
func TestDescribeEveryExperiment(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, d := range experiments.List() {
		code, out, errOut := runSplit(t, "describe", d.Name)
		require.Equal(t, 0, code, "%s: %s", d.Name, errOut)
		for _, part := range []string{"parameters:", "creates:", "faults:", "time:", "(estimate)", "needs:", "root (sudo)"} {
			assert.Contains(t, out, part, d.Name)
		}

		code, out, errOut = runSplit(t, "describe", d.Name, "-o", "json")
		require.Equal(t, 0, code, "%s: %s", d.Name, errOut)
		var p plan
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&p), out)
		assert.Equal(t, d.Name, p.Experiment)
		require.Len(t, p.Params, len(d.Params))
		for i, prm := range p.Params {
			assert.Equal(t, d.Params[i].Default, prm.Value, "%s.%s", d.Name, prm.Name)
			assert.True(t, prm.Default, "%s.%s", d.Name, prm.Name)
		}
		assert.Positive(t, p.Nodes, d.Name)
		assert.NotEmpty(t, p.Workloads, d.Name)
		assert.Positive(t, p.Time.SetupEstimateSeconds, d.Name)
		assert.Contains(t, p.Time.Note, "estimate", d.Name)
		assert.False(t, p.DryRun)
	}
	left, err := os.ReadDir(".")
	require.NoError(t, err)
	assert.Empty(t, left, "describe creates nothing")
}

func TestDescribeSetsAndSubstrate(t *testing.T) {
	code, out, errOut := runSplit(t, "describe", "cp-oom-restart", "--set", "rate=20", "--set", "nodes=3", "--substrate", "existing", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var p plan
	require.NoError(t, json.Unmarshal([]byte(out), &p))
	byName := map[string]planParam{}
	for _, prm := range p.Params {
		byName[prm.Name] = prm
	}
	assert.Equal(t, planParam{Name: "rate", Value: "20", Unit: "rps"}, byName["rate"])
	assert.Equal(t, "3", byName["nodes"].Value)
	assert.True(t, byName["duration"].Default)
	assert.Equal(t, 3, p.Nodes)
	assert.Equal(t, float64(60), p.Time.TrafficSeconds)
	assert.NotEmpty(t, p.NodeAccess)
	assert.Contains(t, strings.Join(p.Needs, "\n"), "--allow-node-chaos")
	assert.NotContains(t, strings.Join(p.Needs, "\n"), "root")

	code, out, errOut = runSplit(t, "describe", "endpoint-flap", "--substrate", "kind")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Docker")
	assert.NotContains(t, out, "--allow-node-chaos")
}

func TestDescribeBadInputExitsTwo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"describe"}, "give one experiment"},
		{[]string{"describe", "nope"}, `unknown experiment "nope"`},
		{[]string{"describe", "cp-oom-restart", "--set", "rate=0"}, "rate"},
		{[]string{"describe", "cp-oom-restart", "--set", "nope=1"}, "nope: unknown parameter"},
		{[]string{"describe", "cp-oom-restart", "--cp", "reference:nope"}, `unknown regression switch "nope"`},
		{[]string{"describe", "cp-oom-restart", "--substrate", "moon"}, "--substrate moon"},
		{[]string{"describe", "cp-oom-restart", "-o", "yaml"}, "want text or json"},
	} {
		code, out, errOut := runSplit(t, tc.args...)
		assert.Equal(t, 2, code, "%v", tc.args)
		assert.Empty(t, out, "%v", tc.args)
		assert.Contains(t, errOut, tc.want, "%v", tc.args)
	}
}

// TestRunDryRun: run --dry-run checks what a run checks, prints the plan, exits 0 and creates
// nothing (no run directory, no cluster state); a bad --set exits 2 as in a real run.
func TestRunDryRun(t *testing.T) {
	cwd, home := t.TempDir(), t.TempDir()
	t.Chdir(cwd)
	t.Setenv("MESHCHAOS_HOME", home)

	code, out, errOut := runSplit(t, "run", "cp-oom-restart", "--dry-run", "--set", "rate=0")
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, "rate")
	assert.Empty(t, out)

	done := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(done, results.SummaryFile), []byte("{}\n"), 0o644))
	// Placeholder binaries: a dry run finds them as the run does, and starts none.
	binDir := t.TempDir()
	for _, b := range []string{bins.Etcd, bins.KubeAPIServer, bins.KubeControllerManager, bins.KubeScheduler, bins.Kubelet, bins.KubeProxy} {
		require.NoError(t, os.WriteFile(filepath.Join(binDir, b), []byte("#!/bin/sh\nexit 1\n"), 0o755))
	}
	t.Setenv(bins.BinDirEnv, binDir)
	if err := local.Preflight(); err != nil {
		prereq.Missing(t, "a dry run on the local substrate checks its preflight, which fails here: %v", err)
	}
	images := imagesDir(t)
	code, out, errOut = runSplit(t, "run", "cp-oom-restart", "--dry-run", "--images", images, "--set", "rate=20", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var p plan
	require.NoError(t, json.Unmarshal([]byte(out), &p), out)
	assert.True(t, p.DryRun)
	assert.Equal(t, "cp-oom-restart", p.Experiment)
	assert.Empty(t, p.KeepCluster, "the default tears the cluster down")

	code, out, errOut = runSplit(t, "run", "cp-oom-restart", "--dry-run", "--images", images, "--keep-cluster=on-failure")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "keeps the cluster at the end: on-failure")
	code, _, errOut = runSplit(t, "run", "cp-oom-restart", "--dry-run", "--images", images, "--keep-cluster=sometimes")
	assert.Equal(t, 2, code, "a bad --keep-cluster is refused by a dry run as by a run")
	assert.Contains(t, errOut, "--keep-cluster")

	code, out, errOut = runSplit(t, "run", "cp-oom-restart", "--dry-run", "--images", images, "--out", filepath.Join(cwd, "mine"))
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "dry run: every input checked")

	code, _, errOut = runSplit(t, "run", "cp-oom-restart", "--dry-run", "--images", images, "--out", done)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "already holds a run")

	left, err := os.ReadDir(cwd)
	require.NoError(t, err)
	assert.Empty(t, left, "a dry run creates no run directory")
	assertNothingStarted(t, home, true)
}
