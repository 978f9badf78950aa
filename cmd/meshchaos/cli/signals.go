package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/meshchaos/meshchaos/harness/runner"
)

// interruptible returns a context cancelled by the first SIGINT or SIGTERM, with a
// runner.Interrupt naming the signal as its cause (the run's summary records it). Later signals
// do not cut the teardown short — a half-removed cluster is worse than a slow exit — but say so
// on w. stop releases the signals.
func interruptible(parent context.Context, w io.Writer, what string) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
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
