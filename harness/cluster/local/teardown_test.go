package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A cluster brought up under another MESHCHAOS_HOME (a test's temp dir) must still be found and
// taken down from the default home: its processes name their state directory, which leads to
// that home's pid files. Before, 'cluster down --all' said "removed" while its kubelets lived on.
func TestDownFindsAClusterUnderAnotherHome(t *testing.T) {
	name := fmt.Sprintf("td%d", os.Getpid()%100000)
	other, mine := t.TempDir(), t.TempDir()
	state := filepath.Join(other, "clusters", name)
	require.NoError(t, os.MkdirAll(state, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(state, "owner.json"), []byte(`{"pid":1}`), 0o644))
	// A stand-in for a component: its command line names a file in the state directory, as
	// every component's flags do (--kubeconfig=…, --data-dir=…).
	cmd := exec.Command("sh", "-c", "sleep 300", "--kubeconfig="+filepath.Join(state, "kubeconfig"))
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })

	assert.Equal(t, []string{other}, homesOf(name))
	assert.Contains(t, List(mine), name, "listed from any home")
	assert.NotEmpty(t, Leftovers(mine, name), "a living process of the cluster is a leftover whatever the home")

	// Same prefix, but no cluster state behind it: not a cluster.
	assert.Empty(t, homesOf(name+"z"))

	require.NoError(t, Down(context.Background(), mine, name, t.Logf))
	<-done
	done <- nil // for the cleanup
	assert.Empty(t, Leftovers(mine, name))
	assert.NoDirExists(t, state, "the state under the other home is removed")

	err := Down(context.Background(), mine, name, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no cluster named")
}
