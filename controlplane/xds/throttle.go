package xds

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshchaos/meshchaos/controlplane/metrics"
)

// DefaultPushThrottle is istiod's PILOT_PUSH_THROTTLE default: at most this many pushes in
// progress at once.
const DefaultPushThrottle = 100

// throttle bounds how many responses are being encoded and written at once, across every
// stream (istiod's PILOT_PUSH_THROTTLE). istiod's unit is one proxy's push (all its types,
// generated and sent); here generation is shared per scope, so what is left per proxy, and
// bounded, is the send: each response waits for a slot (pilot_proxy_queue_time) before gRPC
// encodes and writes it. In the PerProxy generation mode a response's generation holds a slot
// too (acquire/release), before its send waits for one.
//
// A proxy that does not read (a slow consumer) blocks its send in gRPC's flow control once its
// window is full. Holding a slot for that would let as many slow consumers as there are slots
// stop every other proxy's pushes; so a send still blocked after hold gives its slot back (the
// encoding, the part worth bounding, is done by then), and one blocked for timeout ends its
// stream (DeadlineExceeded, as istiod's PILOT_XDS_SEND_TIMEOUT): a proxy that reads nothing for
// that long holds at most one encoded response, and for no longer than that.
//
// A blocked send keeps its encoded response (gRPC queues one whole response past the flow
// control window and blocks on the next: two per stream, each in a pooled buffer rounded up to
// 1 MiB for responses over 32 KiB). So at most maxStalled sends may be stalled at once; when
// one more stalls, the send stalled longest ends its stream (ResourceExhausted): it is the
// likeliest to be a proxy that does not read, where the newest may be a good proxy slowed for a
// moment. A stream given up on (stalled or timed out) ends its connection too (see conns):
// otherwise gRPC would keep its queued responses until the proxy reads or leaves. So the memory
// slow consumers can pin is maxStalled × 2 × the largest response, however many of them connect.
type throttle struct {
	slots       chan struct{}
	hold        time.Duration
	timeout     time.Duration
	maxStalled  int
	conns       *conns // where a stream given up on ends its connection (nil: not tracked)
	stallMu     sync.Mutex
	stalled     *list.List // of chan struct{}: the stalled sends' abort channels, oldest first
	m           *metrics.Metrics
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
}

func newThrottle(n int, hold, timeout time.Duration, maxStalled int, conns *conns, m *metrics.Metrics) *throttle {
	if n <= 0 {
		n = DefaultPushThrottle
	}
	return &throttle{slots: make(chan struct{}, n), hold: hold, timeout: timeout, maxStalled: maxStalled, conns: conns, stalled: list.New(), m: m}
}

// acquire waits for a slot (ctx ending: its error); the per-proxy generation mode holds one
// while it builds a proxy's response, as istiod's throttle bounds whole per-proxy pushes.
func (t *throttle) acquire(ctx context.Context) error {
	select {
	case t.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives back a slot of acquire.
func (t *throttle) release() { <-t.slots }

// throttledStream is a server stream whose sends go through the throttle, and are timed by its
// clock (pilot_xds_push_time: each response's own time, less its wait for a slot).
type throttledStream struct {
	grpc.ServerStream
	ctx   context.Context // the stream's, carrying clock
	t     *throttle
	clock *responseClock
}

// Context is the stream's context, which carries its clock to the stream callbacks.
func (s throttledStream) Context() context.Context { return s.ctx }

func (s throttledStream) SendMsg(msg any) error {
	queued := time.Now()
	s.t.slots <- struct{}{}
	wait := time.Since(queued)
	s.t.m.ProxyQueueTime.Observe(wait.Seconds())
	defer func() { s.clock.sent(time.Now(), wait) }()
	n := s.t.inFlight.Add(1)
	for {
		cur := s.t.maxInFlight.Load()
		if n <= cur || s.t.maxInFlight.CompareAndSwap(cur, n) {
			break
		}
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			s.t.inFlight.Add(-1)
			<-s.t.slots
		})
	}
	defer release()
	if s.t.hold <= 0 && s.t.timeout <= 0 {
		return s.ServerStream.SendMsg(msg)
	}
	// The send runs apart so the stream can be given up while gRPC still blocks in it: once the
	// handler returns with the error, gRPC resets the stream and the blocked send returns.
	done := make(chan error, 1)
	go func() { done <- s.ServerStream.SendMsg(msg) }()
	var holdC, timeoutC <-chan time.Time
	var abort chan struct{}
	if s.t.hold > 0 {
		hold := time.NewTimer(s.t.hold)
		defer hold.Stop()
		holdC = hold.C
	}
	if s.t.timeout > 0 {
		timeout := time.NewTimer(s.t.timeout)
		defer timeout.Stop()
		timeoutC = timeout.C
	}
	for {
		select {
		case err := <-done:
			return err
		case <-holdC:
			holdC = nil
			release()
			if s.t.maxStalled > 0 {
				abort = make(chan struct{})
				defer s.t.unstall(s.t.stall(abort))
			}
		case <-abort:
			s.t.m.XDSLimited.WithLabelValues("stalled").Inc()
			s.t.drop(s)
			return status.Errorf(codes.ResourceExhausted, "proxy reads too slowly and %d others stall too: closing its stream (reconnect and read)", s.t.maxStalled)
		case <-timeoutC:
			s.t.m.XDSLimited.WithLabelValues("send-timeout").Inc()
			s.t.drop(s)
			return status.Errorf(codes.DeadlineExceeded, "proxy read nothing for %s: closing its stream (reconnect and read)", s.t.timeout)
		}
	}
}

// drop ends the connection of a stream given up on. The status the handler returns cannot
// reach the proxy anyway: it would be queued behind the data the proxy does not read.
func (t *throttle) drop(s throttledStream) {
	if t.conns != nil {
		t.conns.closeOf(s.Context())
	}
}

// stall registers a stalled send; beyond maxStalled, the oldest is aborted.
func (t *throttle) stall(abort chan struct{}) *list.Element {
	t.stallMu.Lock()
	defer t.stallMu.Unlock()
	e := t.stalled.PushBack(abort)
	if t.stalled.Len() > t.maxStalled {
		close(t.stalled.Remove(t.stalled.Front()).(chan struct{}))
	}
	return e
}

// unstall forgets a stalled send that ended (a no-op for one aborted, already removed).
func (t *throttle) unstall(e *list.Element) {
	t.stallMu.Lock()
	defer t.stallMu.Unlock()
	t.stalled.Remove(e) // list.Remove ignores an element no longer in the list
}
