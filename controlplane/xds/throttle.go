package xds

import (
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/meshchaos/meshchaos/controlplane/metrics"
)

// DefaultPushThrottle is istiod's PILOT_PUSH_THROTTLE default: at most this many pushes in
// progress at once.
const DefaultPushThrottle = 100

// throttle bounds how many responses are being encoded and written at once, across every
// stream (istiod's PILOT_PUSH_THROTTLE). istiod's unit is one proxy's push (all its types,
// generated and sent); here generation is shared per scope, so what is left per proxy, and
// bounded, is the send: each response waits for a slot (pilot_proxy_queue_time) before gRPC
// encodes and writes it.
type throttle struct {
	slots       chan struct{}
	m           *metrics.Metrics
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
}

func newThrottle(n int, m *metrics.Metrics) *throttle {
	if n <= 0 {
		n = DefaultPushThrottle
	}
	return &throttle{slots: make(chan struct{}, n), m: m}
}

// throttledStream is a server stream whose sends go through the throttle.
type throttledStream struct {
	grpc.ServerStream
	t *throttle
}

func (s throttledStream) SendMsg(msg any) error {
	queued := time.Now()
	s.t.slots <- struct{}{}
	s.t.m.ProxyQueueTime.Observe(time.Since(queued).Seconds())
	n := s.t.inFlight.Add(1)
	for {
		cur := s.t.maxInFlight.Load()
		if n <= cur || s.t.maxInFlight.CompareAndSwap(cur, n) {
			break
		}
	}
	defer func() {
		s.t.inFlight.Add(-1)
		<-s.t.slots
	}()
	return s.ServerStream.SendMsg(msg)
}
