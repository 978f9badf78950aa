package cli

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClosedStdoutDoesNotKill: with its stdout a pipe nobody reads any more (`meshchaos run … |
// head -1` once head has exited), the CLI's writes fail instead of the process dying of
// SIGPIPE, so a run gets to finish its teardown and exit by its own code.
func TestClosedStdoutDoesNotKill(t *testing.T) {
	bin := buildCLI(t)
	for _, args := range [][]string{{"list"}, {"--help"}} {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		require.NoError(t, r.Close()) // the reader is gone before the first write
		cmd := exec.Command(bin, args...)
		cmd.Stdout = w
		require.NoError(t, cmd.Start())
		require.NoError(t, w.Close())
		err = cmd.Wait()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		assert.False(t, ws.Signaled(), "meshchaos %v was killed by %v", args, ws.Signal())
		assert.True(t, ws.Exited(), "meshchaos %v: %v", args, err)
		t.Logf("meshchaos %v with a closed stdout: exit %d", args, ws.ExitStatus())
	}
}
