package observe

import (
	"context"
	"fmt"
	"sync"

	"github.com/meshchaos/meshchaos/harness/traffic"
	"github.com/meshchaos/meshchaos/results"
)

// Attack is a second Vegeta attack run as a measurement, next to the run's own traffic and
// measured separately: its totals, codes, response flags and per-second series go to the
// summary's attacks under its name (e.g. endpoint-flap's traffic to the flapping service, whose
// errors are expected inside the service's unready windows and must not mix with the other
// services' zero-error budget).
type Attack struct {
	// Options configure the attack; Options.Name names it in the summary.
	Options traffic.Options
	// As is the role of what it targets (e.g. "flap").
	As Role

	mu     sync.Mutex
	a      *traffic.Attack
	runErr error
}

// Name implements Measurement.
func (a *Attack) Name() string { return "attack/" + a.Options.Name }

// Role implements Measurement.
func (a *Attack) Role() Role { return a.As }

// Start implements Measurement: the attack runs in the background until its duration or the
// run's end.
func (a *Attack) Start(ctx context.Context, sink Sink) error {
	atk, err := traffic.New(a.Options)
	if err != nil {
		return fmt.Errorf("attack %s: %w", a.Options.Name, err)
	}
	a.mu.Lock()
	a.a = atk
	a.mu.Unlock()
	sink.Background(func(ctx context.Context) {
		agg, err := atk.Run(ctx)
		if agg != nil {
			sink.Logf("attack %s: %d requests, %d errors", a.Options.Name, agg.Requests(), agg.Errors())
		}
		a.mu.Lock()
		a.runErr = err
		a.mu.Unlock()
	})
	return nil
}

// Gather implements Measurement.
func (a *Attack) Gather(s *results.Summary) {
	st := results.Measurement{Name: a.Name(), Role: string(a.As)}
	a.mu.Lock()
	atk, runErr := a.a, a.runErr
	a.mu.Unlock()
	if atk == nil {
		st.Error = "never started"
		status(s, st)
		return
	}
	if runErr != nil {
		st.Error = runErr.Error()
	}
	agg := atk.Aggregator()
	st.Samples = int(agg.Requests())
	st.OK = st.Samples > 0
	status(s, st)
	if agg.Start().IsZero() {
		return
	}
	t := agg.Summary(nil)
	if s.Attacks == nil {
		s.Attacks = map[string]*results.Traffic{}
	}
	s.Attacks[a.Options.Name] = &t
}
