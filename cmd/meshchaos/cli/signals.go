package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meshchaos/meshchaos/harness/runner"
)

// interruptSignals end a run, a suite or an upgrade-check the same way — stop, tear down, write
// what was measured: SIGINT (Ctrl-C), SIGTERM (kill, CI timeouts), SIGHUP (the terminal or SSH
// session closed) and SIGQUIT (Ctrl-\, whose default would dump goroutines and leave the
// cluster behind).
var interruptSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// activity names what a command is busy with, for the line a later signal prints: a suite or an
// upgrade-check names each run as it starts, so that the line says which run's cluster is still
// being removed. A nil activity names nothing.
type activity struct{ now atomic.Pointer[string] }

func newActivity(what string) *activity {
	a := &activity{}
	a.set(what)
	return a
}

// set names what the command does from now on.
func (a *activity) set(what string) {
	if a != nil {
		a.now.Store(&what)
	}
}

func (a *activity) String() string {
	if a == nil || a.now.Load() == nil {
		return "meshchaos"
	}
	return *a.now.Load()
}

// interruptible returns a context cancelled by the first of interruptSignals, with a
// runner.Interrupt naming the signal as its cause (the run's summary records it). Later signals
// do not cut the teardown short — a half-removed cluster is worse than a slow exit — but say on
// w what is still being torn down (what, as it is when they come). stop releases the signals.
func interruptible(parent context.Context, w io.Writer, what *activity) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, interruptSignals...)
	done := make(chan struct{})
	go func() {
		first := true
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				if first {
					first = false
					cancel(&runner.Interrupt{Signal: sig.String(), At: time.Now()})
					continue
				}
				fmt.Fprintf(w, "%s: still tearing down after %s; SIGKILL abandons it (then remove what is left with 'meshchaos cluster down --name NAME')\n", what, sig)
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// survivePipes keeps a closed stdout or stderr from killing the process. Go dies of SIGPIPE on a
// write to a broken pipe on fd 1 or 2 (`meshchaos run … | head -1` once head exits), which
// would cut a run's teardown short and leave its cluster behind; with SIGPIPE caught, such a
// write fails with EPIPE and the run carries on to its own exit code. Caught (Notify) rather
// than ignored (signal.Ignore): an ignored SIGPIPE would be inherited by every process the
// harness starts (apiservers, kubelets, shells), a caught one is reset to the default on exec.
func survivePipes() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) // never read: the write's EPIPE is what counts
}
