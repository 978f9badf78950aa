// Package chaos holds the fault injectors. Each injector proves that its fault took effect
// (Evidence) instead of assuming it: a throttle that never throttled, or a kill that never
// killed, would make a passing experiment meaningless.
package chaos

import (
	"context"
	"time"
)

// Injector is one fault.
type Injector interface {
	// Name identifies the fault in timelines and reports, e.g. "kube-proxy-throttle/node2".
	Name() string
	// Inject applies the fault and returns evidence that it is in force.
	Inject(ctx context.Context) (Evidence, error)
	// Clear removes the fault and returns evidence of what it did while it was in force.
	Clear(ctx context.Context) (Evidence, error)
}

// Evidence is what an injector observed, for the run's timeline and summary.
type Evidence struct {
	// At is when the observation was made.
	At time.Time `json:"at"`
	// Summary is one human sentence.
	Summary string `json:"summary"`
	// Values are the measured numbers, by name.
	Values map[string]float64 `json:"values,omitempty"`
}

// Implementer is an injector with more than one way to bring its fault about (the control
// plane's own hook, or a generic stand-in when it has none): Implementation says which one it
// uses and whether that is the generic fallback. Runs list it in summary.json (faults[]).
type Implementer interface {
	Implementation() (how string, fallback bool)
}
