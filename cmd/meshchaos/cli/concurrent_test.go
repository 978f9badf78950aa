package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/results"
)

// TestTwoRunsAtOnce: two runs on one machine under distinct names do not disturb each other
// (each passes, each OOM-kills and restarts only its own control plane, each timeline names only
// its own cluster), and a third under a name in use is refused at once, before anything starts.
func TestTwoRunsAtOnce(t *testing.T) {
	bin, home, env := integrationCLI(t)
	prefix := fmt.Sprintf("rlbc%d-", os.Getpid()%10000)
	names := []string{prefix + "a", prefix + "b"}
	outs := make([]string, len(names))
	runs := make([]*runProc, len(names))
	for i, n := range names {
		outs[i] = filepath.Join(t.TempDir(), "run")
		runs[i] = startRun(t, bin, env, append(slices.Clone(smallRun), "--name", n, "--out", outs[i]))
	}
	t.Cleanup(func() { cli(t, bin, env, "cluster", "down", "--all", "--prefix", prefix) })

	up := make(chan struct{})
	runs[0].on("cluster.up", func() { close(up) })
	select {
	case <-up:
	case <-runs[0].done:
		t.Fatalf("the first run ended before its cluster was up: %s", runs[0].tail())
	}
	third := filepath.Join(t.TempDir(), "run")
	start := time.Now()
	code, out := cli(t, bin, env, append(slices.Clone(smallRun), "--name", names[0], "--out", third)...)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, fmt.Sprintf("--name: cluster name in use: cluster %q is running", names[0]))
	assert.Contains(t, out, "choose another name")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line: %s", out)
	assert.Less(t, time.Since(start), 30*time.Second, "refused before anything starts")
	assert.NoDirExists(t, third, "no run directory for a refused run")

	for i, n := range names {
		code := runs[i].wait()
		s, err := results.Read(outs[i])
		require.NoError(t, err, runs[i].tail())
		assert.Equal(t, 0, code, "%s: verdict %s %s\n%s", n, s.Verdict, s.Error, runs[i].tail())
		assert.Equal(t, results.VerdictPass, s.Verdict, s.Error)
		other := names[1-i]
		for _, e := range s.Events {
			assert.NotContains(t, e.Object+" "+e.Detail, other, "%s's timeline names %s: %+v", n, other, e)
			if e.Kind == "cluster.up" {
				assert.Equal(t, n, e.Object)
			}
		}
		require.NotNil(t, s.ControlPlaneStats)
		assert.Equal(t, 1, s.ControlPlaneStats.OOMKills, "%s: its own control plane killed once, not twice", n)
		assert.Equal(t, 1, s.ControlPlaneStats.Restarts, n)
		assert.Empty(t, local.Leftovers(home, n))
	}
}
