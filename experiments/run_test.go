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

// localRuns runs catalog experiments on the local substrate for a both-ways test.
type localRuns struct {
	t               *testing.T
	home, imagesDir string
	timeout         time.Duration
}

// newLocalRuns skips under MESHCHAOS_SKIP_INTEGRATION=1 and checks the machine first.
func newLocalRuns(t *testing.T, timeout time.Duration) *localRuns {
	if os.Getenv("MESHCHAOS_SKIP_INTEGRATION") == "1" {
		t.Skip("MESHCHAOS_SKIP_INTEGRATION=1")
	}
	require.NoError(t, local.Preflight())
	imagesDir, err := bins.ImagesDir("")
	require.NoError(t, err)
	home, err := os.MkdirTemp("", "mc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	return &localRuns{t: t, home: home, imagesDir: imagesDir, timeout: timeout}
}

// run carries out experiment name against control plane cp and returns its summary as read back
// from the run directory, and the directory. The run must not end in error, and its teardown must
// leave nothing behind.
func (l *localRuns) run(name, cp string, sets []string) (results.Summary, string) {
	t := l.t
	d, ok := Lookup(name)
	require.True(t, ok, name)
	v, err := d.Resolve(sets)
	require.NoError(t, err)
	sut, err := subject.Parse(cp)
	require.NoError(t, err)
	exp, err := d.Build(experiment.Env{Substrate: local.Substrate{Home: l.home, ImagesDir: l.imagesDir}, ControlPlane: sut}, v)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	dir := t.TempDir()
	s, err := runner.Execute(ctx, exp, runner.Options{Dir: dir, Progress: runner.NewProgress(testWriter{t})})
	require.NotEqual(t, results.VerdictError, s.Verdict, "%s: the run could not be carried out: %v %s", cp, err, s.Error)
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
	assert.Empty(t, local.Leftovers(l.home, cluster), "teardown left no process, namespace, mount, cgroup or state")
	return *back, dir
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
