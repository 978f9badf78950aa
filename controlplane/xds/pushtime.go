package xds

import (
	"context"
	"sync"
	"time"

	"github.com/meshchaos/meshchaos/controlplane/metrics"
)

// responseClock times each response of one stream as istiod's pilot_xds_push_time does
// (pilot/pkg/xds/xdsgen.go pushXds: t0 before the response is generated, recorded once it is
// sent): that response's own generation and send, per type, for a proxy's initial fetches and
// for pushes alike. What comes before the response's own work, a push's debounce, its shared
// generation per scope and its turn behind other proxies, is not in it (istiod counts the queue
// apart, in pilot_proxy_queue_time, as the throttle here does); neither is the wait for a push
// throttle slot.
//
// A SotW response starts when the request it answers arrived, if the cache answered that
// request at once (a type's first request on the stream, or new names; a scope the stream is the
// first to need is generated on the way), else (a push) when the stream took the response up
// from its cache, before encoding it (sotwserver.ResponseStart). A Delta response starts at its
// response callback, once encoded (go-control-plane's Delta server tells no more).
//
// The stream's response callbacks and sends run on its one goroutine (go-control-plane's and
// sotwserver's stream loops); the mutex keeps a misuse from being a data race.
type responseClock struct {
	m *metrics.Metrics

	mu    sync.Mutex
	start time.Time // the response about to be sent (zero: none)
	typ   string    // its short type
}

type clockKey struct{}

// withClock is ctx carrying a stream's clock: the stream callbacks find it in the stream's
// context (open), the throttled stream records with it.
func withClock(ctx context.Context, c *responseClock) context.Context {
	return context.WithValue(ctx, clockKey{}, c)
}

// clockOf is the clock ctx carries (nil: none, a stream that did not come through the
// server's interceptor, as in tests of the callbacks alone).
func clockOf(ctx context.Context) *responseClock {
	c, _ := ctx.Value(clockKey{}).(*responseClock)
	return c
}

// responding records that a response of typeURL, whose own time began at start, is about to
// be sent.
func (c *responseClock) responding(typeURL string, start time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start, c.typ = start, ShortType(typeURL)
}

// sent observes the response about to be sent, now that its send returned (sent or failed, as
// istiod records either), less queued, its wait for a throttle slot.
func (c *responseClock) sent(now time.Time, queued time.Duration) {
	if c == nil {
		return
	}
	c.mu.Lock()
	start, typ := c.start, c.typ
	c.start = time.Time{}
	c.mu.Unlock()
	if start.IsZero() {
		return
	}
	c.m.PushTime.WithLabelValues(typ).Observe(max(now.Sub(start)-queued, 0).Seconds())
}
