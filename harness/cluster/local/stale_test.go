package local

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeOwner makes a fake cluster state directory under home with the given owner record (nil:
// none).
func writeOwner(t *testing.T, home, name string, o *owner) {
	t.Helper()
	dir := layout{name: name, home: home}.dir()
	require.NoError(t, os.MkdirAll(dir, 0o700))
	if o != nil {
		b, err := json.Marshal(o)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "owner.json"), b, 0o644))
	}
}

// deadOwner returns the owner record of a process that has exited and been reaped.
func deadOwner(t *testing.T) *owner {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	o := &owner{Pid: cmd.Process.Pid, StartTime: processStartTime(cmd.Process.Pid)}
	require.NotEmpty(t, o.StartTime)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Empty(t, processStartTime(o.Pid), "the pid is gone")
	return o
}

// Stale finds exactly the clusters whose owner is gone or whose pid now belongs to another
// process; a live owner, and an owner that cannot be told, keep their cluster.
func TestStaleFindsClustersWhoseOwnerIsGone(t *testing.T) {
	home := t.TempDir()
	p := fmt.Sprintf("st%d-", os.Getpid()%100000)
	self := os.Getpid()
	writeOwner(t, home, p+"live", &owner{Pid: self, StartTime: processStartTime(self)})
	writeOwner(t, home, p+"dead", deadOwner(t))
	writeOwner(t, home, p+"reused", &owner{Pid: self, StartTime: "1"}) // our pid, another start time
	writeOwner(t, home, p+"nostart", &owner{Pid: self})                // cannot tell reuse
	writeOwner(t, home, p+"noowner", nil)                              // being claimed
	writeOwner(t, home, p+"garbled", nil)
	require.NoError(t, os.WriteFile(filepath.Join(layout{name: p + "garbled", home: home}.dir(), "owner.json"), []byte("{"), 0o644))

	stale, err := Stale(home)
	require.NoError(t, err)
	var mine []string
	for _, n := range stale {
		if strings.HasPrefix(n, p) { // the host's own clusters may be listed too
			mine = append(mine, n)
		}
	}
	assert.Equal(t, []string{p + "dead", p + "reused"}, mine)

	owners, err := Owners(home)
	require.NoError(t, err)
	why := map[string]OwnerStatus{}
	for _, o := range owners {
		why[o.Name] = o
	}
	assert.Contains(t, why[p+"live"].Why, fmt.Sprintf("pid %d, is running", self))
	assert.Contains(t, why[p+"dead"].Why, "is gone")
	assert.Contains(t, why[p+"reused"].Why, "belongs to another process")
	assert.Contains(t, why[p+"nostart"].Why, "no start time")
	assert.Contains(t, why[p+"noowner"].Why, "no owner.json")
	assert.Contains(t, why[p+"garbled"].Why, "names no owner process")
	for _, n := range []string{"live", "nostart", "noowner", "garbled"} {
		assert.False(t, why[p+n].Stale, n)
	}

	// A name with nothing behind it has no owner to be gone.
	st := CheckOwner(home, p+"absent")
	assert.False(t, st.Stale)
	assert.Contains(t, st.Why, "no owner record")

	// A home that cannot be read is an error, not a host without clusters.
	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, "clusters"), nil, 0o644))
	_, err = Stale(bad)
	assert.ErrorContains(t, err, "list local clusters")
}

// A name is stale only when every home its processes keep state under has a gone owner: Down
// takes it down under all of them, so a live owner anywhere protects it.
func TestStaleChecksEveryHomeOfTheCluster(t *testing.T) {
	name := fmt.Sprintf("sh%d", os.Getpid()%100000)
	mine, other := t.TempDir(), t.TempDir()
	self := os.Getpid()
	writeOwner(t, mine, name, deadOwner(t))
	writeOwner(t, other, name, &owner{Pid: self, StartTime: processStartTime(self)})
	// A stand-in component whose command line names the other home's state, as every
	// component's flags do.
	cmd := exec.Command("sh", "-c", "sleep 300", "--kubeconfig="+filepath.Join(layout{name: name, home: other}.dir(), "kubeconfig"))
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	st := CheckOwner(mine, name)
	assert.False(t, st.Stale, "the owner under the other home runs")
	assert.Contains(t, st.Why, "under "+other+": its owner, pid")

	// Its owner gone too: stale, and the reason names both.
	writeOwner(t, other, name, deadOwner(t))
	st = CheckOwner(mine, name)
	assert.True(t, st.Stale, st.Why)
	assert.Contains(t, st.Why, "under "+other)

	// From a home where it has no state, it is found by its processes.
	st = CheckOwner(t.TempDir(), name)
	assert.True(t, st.Stale, st.Why)
}

// CheckName's refusal says what the owner record says.
func TestCheckNameSaysWhetherTheOwnerRuns(t *testing.T) {
	home := t.TempDir()
	p := fmt.Sprintf("cn%d-", os.Getpid()%100000)
	self := os.Getpid()
	writeOwner(t, home, p+"live", &owner{Pid: self, StartTime: processStartTime(self)})
	writeOwner(t, home, p+"dead", &owner{Pid: self, StartTime: "1"})
	// An owner with no start time whose pid is gone was taken for a running one before.
	writeOwner(t, home, p+"nostart", &owner{Pid: deadOwner(t).Pid})

	err := CheckName(home, p+"live")
	require.ErrorIs(t, err, ErrNameInUse)
	assert.Contains(t, err.Error(), "is running")
	for _, n := range []string{"dead", "nostart"} {
		err = CheckName(home, p+n)
		require.ErrorIs(t, err, ErrNameInUse)
		assert.Contains(t, err.Error(), "left behind", n)
	}
}
