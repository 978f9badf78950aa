package xdsproxy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBackoffIsJitteredExponentialAndBounded(t *testing.T) {
	p := &Proxy{opts: Options{BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second}}
	c := &xdsClient{p: p}
	for attempt := range 12 {
		ceil := min(100*time.Millisecond<<attempt, time.Second)
		d := c.backoff()
		assert.GreaterOrEqual(t, d, time.Millisecond, "attempt %d", attempt)
		assert.Less(t, d, ceil+time.Millisecond, "attempt %d", attempt)
	}
	// Over many draws the ceiling is reached in practice (jitter is uniform, not stuck low).
	var maxSeen time.Duration
	for range 200 {
		maxSeen = max(maxSeen, c.backoff())
	}
	assert.Greater(t, maxSeen, 800*time.Millisecond)
}
