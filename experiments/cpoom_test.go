package experiments

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/results"
)

func TestResolveParams(t *testing.T) {
	d, ok := Lookup("cp-oom-restart")
	require.True(t, ok)
	v, err := d.Resolve([]string{"rate=10", "cpMemoryLimit=1Gi"})
	require.NoError(t, err)
	assert.Equal(t, 10, v.Int("rate"))
	assert.Equal(t, "1Gi", v["cpMemoryLimit"])
	assert.Equal(t, 60*time.Second, v.Duration("duration"))
	for _, bad := range []string{"bogus=1", "rate=fast", "rate", "duration=1", "cpMemoryLimit=lots", "kubeProxyCPU=-1"} {
		_, err := d.Resolve([]string{bad})
		assert.Error(t, err, bad)
	}
	_, err = d.Resolve([]string{"bogus=1"})
	assert.ErrorContains(t, err, "known parameters: rate")

	for _, cp := range []string{"istiod", "reference:no-such-switch"} {
		_, err := d.Build(Env{Substrate: "local", ControlPlane: cp}, v)
		assert.Error(t, err, cp)
	}
	_, err = d.Build(Env{Substrate: "kind", ControlPlane: "reference"}, v)
	assert.Error(t, err)
	gate, sw, err := controlPlaneFlags("reference:ungated,quadratic-scope")
	require.NoError(t, err)
	assert.False(t, gate)
	assert.Equal(t, []string{"ungated", "quadratic-scope"}, sw)
}

// TestCPOOMRestartBothWays is the harness's honesty test: at a small scale the experiment must
// pass against the sync-gated reference control plane and must catch the ungated one.
func TestCPOOMRestartBothWays(t *testing.T) {
	if os.Getenv("MESHCHAOS_SKIP_INTEGRATION") == "1" {
		t.Skip("MESHCHAOS_SKIP_INTEGRATION=1")
	}
	require.NoError(t, local.Preflight())
	imagesDir := os.Getenv("MESHCHAOS_IMAGES")
	require.NotEmpty(t, imagesDir, "set MESHCHAOS_IMAGES to the output of 'make images' (make test does)")
	home, err := os.MkdirTemp("", "mc")
	require.NoError(t, err)
	defer os.RemoveAll(home)
	d, _ := Lookup("cp-oom-restart")
	sets := []string{"rate=100", "duration=40s", "steady=8s", "throttleWindow=20s", "serviceEntries=" + testServiceEntries}

	run := func(cp string) results.Summary {
		v, err := d.Resolve(sets)
		require.NoError(t, err)
		exp, err := d.Build(Env{Substrate: "local", ControlPlane: cp, ImagesDir: imagesDir, Home: home}, v)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		dir := t.TempDir()
		s, err := runner.Execute(ctx, exp, runner.Options{Dir: dir, Progress: runner.NewProgress(testWriter{t})})
		require.NotEqual(t, results.VerdictError, s.Verdict, "the run could not be carried out: %v %s", err, s.Error)
		// The run directory is complete and readable by `meshchaos report`.
		back, rerr := results.Read(dir)
		require.NoError(t, rerr)
		assert.Equal(t, s.Verdict, back.Verdict)
		cluster := ""
		for _, e := range s.Events {
			if e.Kind == "cluster.up" {
				cluster = e.Object
			}
		}
		require.NotEmpty(t, cluster, "the timeline names the cluster")
		assert.Empty(t, local.Leftovers(home, cluster), "teardown left no process, namespace, mount, cgroup or state")
		return s
	}

	gated := run("reference")
	assert.Equal(t, results.VerdictPass, gated.Verdict, "the sync gate keeps the gateway serving: %+v", gated.Checks)
	assert.Zero(t, gated.Traffic.Errors)
	assert.GreaterOrEqual(t, gated.ControlPlaneStats.OOMKills, 1)

	ungated := run("reference:ungated")
	assert.Equal(t, results.VerdictFail, ungated.Verdict, "the experiment catches the ungated control plane: %+v", ungated.Checks)
	assert.GreaterOrEqual(t, ungated.ControlPlaneStats.OOMKills, 1)
	flagged := ungated.Traffic.ByFlag["NC"] + ungated.Traffic.ByFlag["NR"]
	assert.Positive(t, flagged, "errors carry NC/NR response flags: %v", ungated.Traffic.ByFlag)
}

// testServiceEntries is the default: with the default CPU limit it gives a restarted control
// plane a sync window of a couple of seconds on a 2-core machine.
const testServiceEntries = "3000"

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
