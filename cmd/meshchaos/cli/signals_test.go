package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestInterruptSignals: run, suite and upgrade-check stop and tear down on a closed terminal
// (SIGHUP) and on Ctrl-\ (SIGQUIT) as on Ctrl-C and SIGTERM.
func TestInterruptSignals(t *testing.T) {
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		assert.Contains(t, interruptSignals, sig)
	}
}

// TestInterruptibleCatchesEverySignal sends each of interruptSignals to a child test process
// waiting in interruptible (never to this process): the context ends with a runner.Interrupt
// naming the signal, and a second signal is reported, not fatal.
func TestInterruptibleCatchesEverySignal(t *testing.T) {
	if os.Getenv("MESHCHAOS_TEST_INTERRUPTIBLE") == "child" {
		said := make(chan string, 1)
		ctx, stop := interruptible(context.Background(), chanWriter(said), newActivity("child"))
		defer stop()
		fmt.Println("ready")
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
			fmt.Println("not interrupted")
			os.Exit(1)
		}
		fmt.Println("cause:", context.Cause(ctx))
		fmt.Println("second?") // the parent sends another signal on this line
		select {
		case line := <-said:
			fmt.Print(line)
		case <-time.After(time.Minute):
		}
		fmt.Println("done")
		return
	}
	for _, sig := range interruptSignals {
		cmd := exec.Command(os.Args[0], "-test.run=^TestInterruptibleCatchesEverySignal$", "-test.count=1")
		cmd.Env = append(os.Environ(), "MESHCHAOS_TEST_INTERRUPTIBLE=child")
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		lines := bufio.NewScanner(stdout)
		var out []string
		for lines.Scan() {
			out = append(out, lines.Text())
			switch lines.Text() {
			case "ready", "second?":
				require.NoError(t, cmd.Process.Signal(sig))
			}
		}
		err = cmd.Wait()
		assert.NoError(t, err, "%v: %s", sig, strings.Join(out, "\n"))
		text := strings.Join(out, "\n")
		assert.Contains(t, text, "cause: interrupted by "+sig.String(), sig)
		assert.Contains(t, text, "still tearing down after "+sig.String(), sig)
		assert.Contains(t, text, "done", sig)
	}
}

// chanWriter hands each write to a channel.
type chanWriter chan<- string

func (c chanWriter) Write(p []byte) (int, error) {
	c <- string(p)
	return len(p), nil
}

// TestActivityNamesWhatIsGoingOn: the line a second signal prints names what the command does
// when it comes, and a command without one still has a name.
func TestActivityNamesWhatIsGoingOn(t *testing.T) {
	a := newActivity("suite mine")
	assert.Equal(t, "suite mine", a.String())
	a.set("suite mine run 2/3 quick [reference]")
	assert.Equal(t, "suite mine run 2/3 quick [reference]", a.String())
	var none *activity
	none.set("ignored")
	assert.Equal(t, "meshchaos", none.String())
}
