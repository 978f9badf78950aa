// Package gate is the sync gate (incident 1's fix): closed until the control plane's informers
// have synced and every event present at sync time has been processed into the model and pushed
// into the caches; while closed, /ready answers 503 and xDS streams are refused.
package gate

import (
	"sync"
	"time"
)

// Gate opens once and stays open.
type Gate struct {
	mu       sync.Mutex
	open     bool
	forced   bool
	reason   string
	openedAt time.Time
	done     chan struct{}
}

// New returns a closed gate.
func New() *Gate { return &Gate{done: make(chan struct{})} }

// Open opens the gate; forced says it was the max wait, not sync. It reports whether this call
// opened it (false if it was open already).
func (g *Gate) Open(reason string, forced bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open {
		return false
	}
	g.open, g.forced, g.reason, g.openedAt = true, forced, reason, time.Now()
	close(g.done)
	return true
}

// IsOpen reports whether the gate is open.
func (g *Gate) IsOpen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// Done is closed when the gate opens.
func (g *Gate) Done() <-chan struct{} { return g.done }

// State describes the gate for logs and /ready.
func (g *Gate) State() (open, forced bool, reason string, openedAt time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.forced, g.reason, g.openedAt
}
