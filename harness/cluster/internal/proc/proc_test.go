package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStopEscalatesToSIGKILL(t *testing.T) {
	dir := t.TempDir()
	// A process that ignores SIGTERM, like a component stuck in shutdown.
	p, err := Start(Spec{Name: "stubborn", Path: "sh", Args: []string{"-c", "trap '' TERM; echo started; while :; do sleep 0.05; done"}, Dir: dir})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Tail(1) == "started" }, 5*time.Second, 20*time.Millisecond)
	assert.FileExists(t, PidPath(dir, "stubborn"))
	start := time.Now()
	require.NoError(t, p.Stop(300*time.Millisecond))
	assert.Less(t, time.Since(start), 5*time.Second)
	exited, _ := p.Exited()
	assert.True(t, exited)
	assert.NoFileExists(t, PidPath(dir, "stubborn"), "pid file removed")
}

func TestExitErrorCarriesLogTail(t *testing.T) {
	p, err := Start(Spec{Name: "fails", Path: "sh", Args: []string{"-c", "echo bad config; exit 3"}, Dir: t.TempDir()})
	require.NoError(t, err)
	<-p.Done()
	e := p.ExitError()
	require.Error(t, e)
	assert.Contains(t, e.Error(), "bad config")
}

// KillRecorded must never kill a process whose pid was recycled: it checks the marker.
func TestKillRecordedChecksMarker(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "state") + "/"
	mine := exec.Command("sh", "-c", "sleep 30 # "+marker)
	require.NoError(t, mine.Start())
	other := exec.Command("sleep", "30")
	require.NoError(t, other.Start())
	defer other.Process.Kill()
	go func() { _ = mine.Wait() }()
	go func() { _ = other.Wait() }()
	require.NoError(t, os.WriteFile(PidPath(dir, "mine"), []byte(strconv.Itoa(mine.Process.Pid)), 0o644))
	require.NoError(t, os.WriteFile(PidPath(dir, "recycled"), []byte(strconv.Itoa(other.Process.Pid)), 0o644))

	killed, err := KillRecorded(dir, marker, 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, []int{mine.Process.Pid}, killed)
	assert.True(t, Mentions(other.Process.Pid, "sleep"), "the unrelated process is alive")
	assert.Empty(t, FindByMarker(marker), "nothing carrying the marker survives")
}
