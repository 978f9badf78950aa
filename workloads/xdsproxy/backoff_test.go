package xdsproxy

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestRetryBackOffIsEnvoys: retry n waits up to (2^n - 1) × 25 ms, at most 250 ms (Envoy's
// default retry_back_off), and no longer than the request lives.
func TestRetryBackOffIsEnvoys(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 25 * time.Millisecond, 2: 75 * time.Millisecond,
		3: 175 * time.Millisecond, 4: 250 * time.Millisecond, 40: 250 * time.Millisecond} {
		assert.Equal(t, want, retryBackOffCeil(n), "retry %d", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, retryBackOff(ctx, 40), context.Canceled)
}
