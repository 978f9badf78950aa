package experiments

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/experiment"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
)

// localRunner runs experiments on the local substrate for integration tests; it skips the test
// under MESHCHAOS_SKIP_INTEGRATION=1.
func localRunner(t *testing.T) func(name, cp string, sets []string) results.Summary {
	t.Helper()
	if os.Getenv("MESHCHAOS_SKIP_INTEGRATION") == "1" {
		t.Skip("MESHCHAOS_SKIP_INTEGRATION=1")
	}
	require.NoError(t, local.Preflight())
	imagesDir, err := bins.ImagesDir("")
	require.NoError(t, err)
	home, err := os.MkdirTemp("", "mc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })

	// run carries one run out against cp: the run directory reads back and teardown left nothing.
	return func(name, cp string, sets []string) results.Summary {
		d, ok := Lookup(name)
		require.True(t, ok, name)
		v, err := d.Resolve(sets)
		require.NoError(t, err)
		sut, err := subject.Parse(cp)
		require.NoError(t, err)
		exp, err := d.Build(experiment.Env{Substrate: local.Substrate{Home: home, ImagesDir: imagesDir}, ControlPlane: sut}, v)
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
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
