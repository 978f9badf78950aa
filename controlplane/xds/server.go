package xds

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	deltav3 "github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	restv3 "github.com/envoyproxy/go-control-plane/pkg/server/rest/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"golang.org/x/time/rate"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshchaos/meshchaos/controlplane/metrics"
	"github.com/meshchaos/meshchaos/controlplane/xds/sotwserver"
)

// Limits keep one misbehaving client from hurting the others. The zero value of each field
// means its default (DefaultLimits); a negative duration or count disables that limit.
type Limits struct {
	// PushThrottle bounds the responses sent at once (istiod's PILOT_PUSH_THROTTLE).
	PushThrottle int
	// SlotHold is how long a blocked send keeps its throttle slot; SendTimeout how long a
	// proxy may read nothing (a send blocked, see throttle) or leave a response unanswered
	// (see closeUnanswered) before its connection is closed.
	SlotHold, SendTimeout time.Duration
	// MaxStalledSends bounds the sends blocked past SlotHold at once (see throttle).
	MaxStalledSends int
	// MaxStreams bounds the open xDS streams, over all connections; MaxStreamsPerConn the
	// streams of one HTTP/2 connection (Envoy and grpc-go open one ADS stream per connection).
	MaxStreams        int
	MaxStreamsPerConn uint32
	// MaxRecvMsgSize bounds one request. The largest legitimate one is an EDS subscription
	// naming every cluster: ~40 bytes a name, 4 MB for 100 000 clusters.
	MaxRecvMsgSize int
	// RequestsPerSecond and RequestBurst bound each stream's requests (a token bucket). A proxy
	// sends a few per push (an ACK and a subscription per type); a stream beyond the bucket is
	// closed with ResourceExhausted.
	RequestsPerSecond float64
	RequestBurst      int
	// MaxScopes bounds the proxy scopes (namespaces with their own generated config).
	MaxScopes int
	// NameSlack bounds the names one subscription may hold: twice the most clusters this
	// server has served, plus NameSlack. A proxy names only resources it learned from the
	// control plane (clusters from CDS, then their EDS; listener and route names), so twice the
	// most ever served covers a whole config replaced in one push, and the slack a proxy still
	// naming an old config's resources. The caches index a subscription by name under a lock
	// every stream shares: a subscription to 100 000 names that do not exist holds it for
	// O(names) when indexed and again when dropped, and clients that gave up and asked again
	// would queue ever more of them in front of the good proxies' watches. Names are not bounded before
	// Synced: a proxy reconnecting to a restarted control plane names its whole config before
	// the caches hold it.
	NameSlack int
	// NewStreamsPerSecond and NewStreamBurst bound how fast streams are accepted (istiod's
	// PILOT_MAX_REQUESTS_PER_SECOND): every new stream costs a full initial fetch, so clients
	// reconnecting in a loop could take the CPU the pushes need. A stream waits up to a second
	// for its turn, then is refused with ResourceExhausted (the proxy backs off and retries).
	// The defaults are istiod's: RequestLimit(GOMAXPROCS) a second, a burst of RequestBurst.
	NewStreamsPerSecond float64
	NewStreamBurst      int
}

// DefaultLimits are the limits a zero Limits field takes.
var DefaultLimits = Limits{PushThrottle: DefaultPushThrottle, SlotHold: 200 * time.Millisecond,
	SendTimeout: 30 * time.Second, MaxStalledSends: 100, MaxStreams: 100000, MaxStreamsPerConn: 100, MaxRecvMsgSize: 16 << 20,
	RequestsPerSecond: 100, RequestBurst: 1000, MaxScopes: 1000, NameSlack: 1024,
	NewStreamsPerSecond: RequestLimit(runtime.GOMAXPROCS(0)), NewStreamBurst: RequestBurst}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	pick(&l.PushThrottle, d.PushThrottle)
	pick(&l.MaxStreams, d.MaxStreams)
	pick(&l.MaxRecvMsgSize, d.MaxRecvMsgSize)
	pick(&l.RequestBurst, d.RequestBurst)
	pick(&l.MaxScopes, d.MaxScopes)
	pick(&l.MaxStalledSends, d.MaxStalledSends)
	pick(&l.NameSlack, d.NameSlack)
	pick(&l.NewStreamBurst, d.NewStreamBurst)
	if l.NewStreamsPerSecond == 0 {
		l.NewStreamsPerSecond = d.NewStreamsPerSecond
	}
	if l.SlotHold == 0 {
		l.SlotHold = d.SlotHold
	}
	if l.SendTimeout == 0 {
		l.SendTimeout = d.SendTimeout
	}
	if l.MaxStreamsPerConn == 0 {
		l.MaxStreamsPerConn = d.MaxStreamsPerConn
	}
	if l.RequestsPerSecond == 0 {
		l.RequestsPerSecond = d.RequestsPerSecond
	}
	return l
}

// Gate is what the server asks before accepting a stream.
type Gate interface{ IsOpen() bool }

// Server is the ADS server (SotW and Delta) with per-proxy tracking: NACKs, convergence, and
// what each proxy asked for and acknowledged (for the config dump).
type Server struct {
	caches *Caches
	pusher *Pusher
	gate   Gate
	log    *slog.Logger
	m      *metrics.Metrics
	grpc   *grpc.Server
	xs     serverv3.Server
	secure *secure // the TLS port (EnableSecure), nil without
	sends  *throttle
	conns  *conns
	limits Limits
	accept *rate.Limiter // new streams (nil: no bound)
	active atomic.Int64  // streams past the gate, counted against MaxStreams
	synced atomic.Bool   // the caches hold the complete config (Synced): names are bounded

	mu      sync.Mutex
	streams map[int64]*streamState
}

type streamState struct {
	ctx context.Context // the stream's: names its connection (conns)
	id  int64
	// identity is the service account the secure port authenticated (nil: plaintext port).
	identity *Identity
	delta    bool
	node     *core.Node
	scope    string // the key held for the stream (Caches.Acquire), once held
	held     bool
	opened   time.Time
	types    map[string]*typeState
	// requests bounds the stream's request rate (nil: no bound).
	requests *rate.Limiter
	// clock times the stream's responses (pilot_xds_push_time; nil: a stream that did not
	// come through the server's interceptor).
	clock *responseClock
	// pending: pushes that sent this proxy some but not yet all of their types (by seq), with
	// the types sent so far.
	pending map[uint64]*pendingPush
}

type pendingPush struct {
	rec  *pushRecord
	sent map[string]bool
}

// maxPending bounds a stream's pending pushes (a push whose responses were merged into a later
// one completes with it).
const maxPending = 16

type typeState struct {
	names []string
	// subscribed is a Delta stream's subscription as a set (names is derived from it): a
	// subscription is changed by name, and a huge one must not cost O(n²) under the lock every
	// stream shares.
	subscribed  map[string]struct{}
	nackedNonce string // the latest nonce NACKed: repeats are neither counted nor logged
	sentVersion string
	sentNonce   string
	// unanswered: since when a response of this type has had no ACK or NACK (zero: none
	// waits). See unansweredTimeout.
	unanswered   time.Time
	ackedNonce   string
	ackedVersion string
	sentSeq      uint64 // the latest push whose response of this type was sent
	nacks        int
}

// NewServer wires a go-control-plane server over the caches into a gRPC server.
//
// At most DefaultPushThrottle responses are sent at once; NewServerThrottled sets another limit.
func NewServer(ctx context.Context, caches *Caches, pusher *Pusher, gate Gate, m *metrics.Metrics, log *slog.Logger) *Server {
	return NewServerThrottled(ctx, caches, pusher, gate, m, log, DefaultPushThrottle)
}

// NewServerThrottled is NewServer with at most throttle responses being sent at once (istiod's
// PILOT_PUSH_THROTTLE; 0: the default).
func NewServerThrottled(ctx context.Context, caches *Caches, pusher *Pusher, gate Gate, m *metrics.Metrics, log *slog.Logger, throttle int) *Server {
	return NewServerLimited(ctx, caches, pusher, gate, m, log, Limits{PushThrottle: throttle})
}

// NewServerLimited is NewServer with the given limits (zero fields: DefaultLimits).
func NewServerLimited(ctx context.Context, caches *Caches, pusher *Pusher, gate Gate, m *metrics.Metrics, log *slog.Logger, limits Limits) *Server {
	if log == nil {
		log = slog.Default()
	}
	limits = limits.withDefaults()
	s := &Server{caches: caches, pusher: pusher, gate: gate, log: log, m: m, streams: map[int64]*streamState{},
		conns: newConns(), limits: limits}
	if pusher != nil {
		pusher.countProxies(s.connected)
	}
	s.sends = newThrottle(limits.PushThrottle, limits.SlotHold, limits.SendTimeout, limits.MaxStalledSends, s.conns, m)
	if limits.NewStreamsPerSecond > 0 && limits.NewStreamBurst > 0 {
		s.accept = rate.NewLimiter(rate.Limit(limits.NewStreamsPerSecond), limits.NewStreamBurst)
	}
	if limits.MaxScopes > 0 {
		caches.MaxScopes = limits.MaxScopes
	}
	caches.OnScopeLimit = func() { m.XDSLimited.WithLabelValues("scopes").Inc() }
	if limits.SendTimeout > 0 {
		go s.closeUnanswered(ctx, limits.SendTimeout)
	}
	// go-control-plane's server, but for SotW streams: sotwserver keeps a subscription that a
	// request repeats instead of building it again for every ACK.
	cb := s.callbacks()
	sotw := sotwserver.New(ctx, caches, cb)
	if pusher != nil && pusher.opts.Generation == PerProxy {
		sotw.SetRender(s.renderForProxy)
	}
	s.xs = serverv3.NewServerAdvanced(restv3.NewServer(caches, cb), sotw, deltav3.NewServer(ctx, caches, cb))
	s.grpc = grpc.NewServer(append(s.serverOptions(), grpc.StreamInterceptor(s.refuseUntilReady))...)
	s.registerADS(s.grpc)
	return s
}

// serverOptions are the gRPC options both ports share (limits, codec, keepalive).
func (s *Server) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(s.limits.MaxStreamsPerConn),
		grpc.MaxRecvMsgSize(s.limits.MaxRecvMsgSize),
		grpc.ForceServerCodecV2(newCodec()),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
}

// registerADS serves the one ADS server (caches, callbacks, stream state) on g: both ports
// share it, so a proxy is the same to the pusher whichever port it came in on.
func (s *Server) registerADS(g *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, s.xs)
}

// Serve serves on l until Stop.
func (s *Server) Serve(l net.Listener) error { return s.grpc.Serve(s.conns.listener(l)) }

// Stop closes every stream and the listeners.
func (s *Server) Stop() {
	if s.secure != nil {
		s.secure.grpc.Stop()
	}
	s.grpc.Stop()
}

// refuseUntilReady is the sync gate on the xDS side: until it opens, every stream is refused
// with Unavailable, so a proxy keeps its last config and retries instead of taking an
// incomplete one. Past the gate, streams beyond MaxStreams are refused with ResourceExhausted.
func (s *Server) refuseUntilReady(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.gate != nil && !s.gate.IsOpen() {
		s.m.StreamsRefused.Inc()
		return status.Error(codes.Unavailable, "control plane not ready: informers have not synced yet; retry")
	}
	if s.accept != nil {
		wctx, cancel := context.WithTimeout(ss.Context(), time.Second)
		err := s.accept.Wait(wctx) // fails at once when the wait would be longer
		cancel()
		if err != nil {
			s.m.XDSLimited.WithLabelValues("new-streams").Inc()
			return status.Errorf(codes.ResourceExhausted, "more than %g new xDS streams a second: back off and retry", s.limits.NewStreamsPerSecond)
		}
	}
	n := s.active.Add(1)
	defer s.active.Add(-1)
	if s.limits.MaxStreams > 0 && n > int64(s.limits.MaxStreams) {
		s.m.XDSLimited.WithLabelValues("streams").Inc()
		return status.Errorf(codes.ResourceExhausted, "too many xDS streams (at most %d): retry later", s.limits.MaxStreams)
	}
	clock := &responseClock{m: s.m}
	return handler(srv, throttledStream{ServerStream: ss, ctx: withClock(ss.Context(), clock), t: s.sends, clock: clock})
}

func (s *Server) callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, id int64, _ string) error {
			s.open(ctx, id, false)
			return nil
		},
		StreamClosedFunc: func(id int64, _ *core.Node) { s.close(id) },
		// The SotW and the Delta server number their streams from 1 each: a Delta stream is
		// keyed by its negated id (deltaKey), so that a SotW and a Delta stream of the same
		// number do not share, overwrite and release each other's state.
		DeltaStreamOpenFunc: func(ctx context.Context, id int64, _ string) error {
			s.open(ctx, deltaKey(id), true)
			return nil
		},
		DeltaStreamClosedFunc: func(id int64, _ *core.Node) { s.close(deltaKey(id)) },
		StreamRequestFunc: func(id int64, r *discovery.DiscoveryRequest) error {
			if err := s.checkIdentity(id, r.GetNode()); err != nil {
				return err
			}
			if err := s.allow(id); err != nil {
				return err
			}
			if err := s.checkNames(id, r.GetTypeUrl(), len(r.GetResourceNames()), false); err != nil {
				return err
			}
			rejected := s.request(id, r.GetNode(), r.GetTypeUrl(), r.GetResponseNonce(), r.GetVersionInfo(), r.GetErrorDetail(), r.GetResourceNames(), nil, false)
			if rejected != "" && r.GetVersionInfo() == "" {
				// A NACK of the first response carries no accepted version. To the cache an
				// empty version means "I have nothing": it would resend the rejected config at
				// once, and the proxy would reject it again, in a loop. As istiod, a NACK gets
				// no answer: the next push carries the next change.
				r.VersionInfo = rejected
			}
			return nil
		},
		StreamResponseFunc: func(ctx context.Context, id int64, _ *discovery.DiscoveryRequest, r *discovery.DiscoveryResponse) {
			taken, ok := sotwserver.ResponseStart(ctx)
			if !ok {
				taken = time.Now()
			}
			s.response(id, r.GetTypeUrl(), r.GetVersionInfo(), r.GetNonce(), proto.Size(r), taken)
		},
		StreamDeltaRequestFunc: func(id int64, r *discovery.DeltaDiscoveryRequest) error {
			id = deltaKey(id)
			if err := s.checkIdentity(id, r.GetNode()); err != nil {
				return err
			}
			if err := s.allow(id); err != nil {
				return err
			}
			if err := s.checkNames(id, r.GetTypeUrl(), len(r.GetResourceNamesSubscribe()), true); err != nil {
				return err
			}
			s.request(id, r.GetNode(), r.GetTypeUrl(), r.GetResponseNonce(), "", r.GetErrorDetail(),
				r.GetResourceNamesSubscribe(), r.GetResourceNamesUnsubscribe(), true)
			return nil
		},
		StreamDeltaResponseFunc: func(id int64, _ *discovery.DeltaDiscoveryRequest, r *discovery.DeltaDiscoveryResponse) {
			id = deltaKey(id)
			// go-control-plane's Delta server calls this once the response is encoded (the
			// cache shares the encoded resources between streams), and does not say whether
			// it answers a request: a Delta response's time starts here.
			s.response(id, r.GetTypeUrl(), r.GetSystemVersionInfo(), r.GetNonce(), proto.Size(r), time.Now())
		},
	}
}

// deltaKey is the key of Delta stream id in Server.streams: SotW streams keep their ids (1, 2,
// …), Delta streams take the negative ones.
func deltaKey(id int64) int64 { return -id }

// open records a stream under key (its id, or deltaKey of it).
func (s *Server) open(ctx context.Context, key int64, delta bool) {
	id := key
	if delta {
		id = -key // the library's id, as /debug shows it
	}
	st := &streamState{ctx: ctx, id: id, delta: delta, opened: time.Now(), types: map[string]*typeState{}, clock: clockOf(ctx),
		pending: map[uint64]*pendingPush{}, identity: identityOf(ctx)}
	if s.limits.RequestsPerSecond > 0 && s.limits.RequestBurst > 0 {
		st.requests = rate.NewLimiter(rate.Limit(s.limits.RequestsPerSecond), s.limits.RequestBurst)
	}
	s.mu.Lock()
	s.streams[key] = st
	s.mu.Unlock()
	s.m.ConnectedProxies.Inc()
}

// connected is how many proxies have a stream open.
func (s *Server) connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

func (s *Server) close(id int64) {
	s.mu.Lock()
	st := s.streams[id]
	delete(s.streams, id)
	s.mu.Unlock()
	if st != nil && st.held {
		s.caches.Release(st.scope)
	}
	s.m.ConnectedProxies.Dec()
}

// allow takes one request from the stream's bucket; a stream out of tokens is closed.
func (s *Server) allow(id int64) error {
	s.mu.Lock()
	st := s.streams[id]
	s.mu.Unlock()
	if st == nil || st.requests == nil || st.requests.Allow() {
		return nil
	}
	s.m.XDSLimited.WithLabelValues("requests").Inc()
	return status.Errorf(codes.ResourceExhausted, "more than %g requests a second on one xDS stream: closing it", s.limits.RequestsPerSecond)
}

// closeUnanswered ends, every quarter of timeout, the connections of streams with a response
// neither ACKed nor NACKed for timeout. A proxy that reads nothing is caught by the send timeout
// only once a send blocks, and a send blocks only once gRPC's 64 KiB write quota is spent: until
// the next push, what was sent before (up to a response past the quota) stays queued for a
// proxy that may never read it. Every proxy answers each response (Envoy and gRPC ACK or NACK
// it once applied), so one that answers none for timeout is not reading.
func (s *Server) closeUnanswered(ctx context.Context, timeout time.Duration) {
	tick := time.NewTicker(max(timeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			var late []context.Context
			s.mu.Lock()
			for _, st := range s.streams {
				for _, ts := range st.types {
					if !ts.unanswered.IsZero() && now.Sub(ts.unanswered) > timeout {
						late = append(late, st.ctx)
						break
					}
				}
			}
			s.mu.Unlock()
			for _, c := range late {
				if s.conns.closeOf(c) {
					s.m.XDSLimited.WithLabelValues("unanswered").Inc()
				}
			}
		}
	}
}

// Synced tells the server that the caches hold the complete config (the initial full push is
// done): from now on a subscription's names are measured against what was served (NameSlack).
func (s *Server) Synced() { s.synced.Store(true) }

// checkNames refuses a subscription of more names than NameSlack allows (see Limits), before
// any watch is made: n names in a SotW request, or n more for a Delta subscription.
func (s *Server) checkNames(id int64, typeURL string, n int, delta bool) error {
	if s.limits.NameSlack < 0 || n == 0 || !s.synced.Load() {
		return nil
	}
	if delta {
		s.mu.Lock()
		if st := s.streams[id]; st != nil {
			if ts := st.types[typeURL]; ts != nil {
				n += len(ts.subscribed)
			}
		}
		s.mu.Unlock()
	}
	most := 2*s.caches.MostServed() + s.limits.NameSlack
	if n <= most {
		return nil
	}
	s.m.XDSLimited.WithLabelValues("names").Inc()
	return status.Errorf(codes.ResourceExhausted, "subscription to %d names: at most %d (twice the most clusters served, plus %d): subscribe to what CDS gave you", n, most, s.limits.NameSlack)
}

func (st *streamState) typ(t string) *typeState {
	ts := st.types[t]
	if ts == nil {
		ts = &typeState{}
		st.types[t] = ts
	}
	return ts
}

// request records a request; for a NACK of the latest response it returns the rejected version.
func (s *Server) request(id int64, node *core.Node, typeURL, nonce, version string, errDetail *rpcstatus.Status, names, unsub []string, delta bool) (rejected string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st == nil {
		return ""
	}
	if node != nil {
		// The namespace's scopes are held from the stream's first node on (before its first
		// watch) until it closes; a node that changes namespace mid-stream moves its hold.
		if key := HoldKey(node); !st.held || key != st.scope {
			if st.held {
				s.caches.Release(st.scope)
			}
			st.scope, st.held = s.caches.Acquire(node), true
		}
	}
	if node != nil && node.GetId() != "" {
		st.node = node
	}
	if !knownType(typeURL) {
		return "" // the cache refuses it and the stream ends: nothing to keep
	}
	ts := st.typ(typeURL)
	if delta {
		if len(names) > 0 || len(unsub) > 0 {
			if ts.subscribed == nil {
				ts.subscribed = map[string]struct{}{}
			}
			for _, n := range names {
				ts.subscribed[n] = struct{}{}
			}
			for _, n := range unsub {
				delete(ts.subscribed, n)
			}
			ts.names = slices.Sorted(maps.Keys(ts.subscribed))
		}
	} else {
		ts.names = names
	}
	switch {
	case nonce != "" && nonce == ts.sentNonce:
		ts.unanswered = time.Time{} // the latest response answered
	case nonce != "" && !ts.unanswered.IsZero():
		ts.unanswered = time.Now() // an earlier one answered: the proxy reads, the latest waits from now
	}
	if nonce == "" || nonce != ts.sentNonce {
		return ""
	}
	if errDetail != nil {
		// A NACK: count and log it; the proxy keeps its previous config (the version it
		// sends) and the next push carries on. Never retried in a loop. A NACK of the nonce
		// already NACKed is the same rejection again: not counted, not logged (a client
		// repeating it must not flood the log).
		if ts.nackedNonce == nonce {
			return ts.sentVersion
		}
		ts.nackedNonce = nonce
		ts.nacks++
		s.m.Rejects.WithLabelValues(ShortType(typeURL)).Inc()
		s.log.Warn("proxy rejected config (NACK)", "proxy", st.node.GetId(), "type", ShortType(typeURL),
			"nonce", nonce, "rejected", ts.sentVersion, "kept", version, "error", errDetail.GetMessage())
		return ts.sentVersion
	}
	if delta {
		ts.ackedVersion = ts.sentVersion
	} else {
		ts.ackedVersion = version
	}
	ts.ackedNonce = nonce
	return ""
}

// response records a response handed to a proxy's stream, which the stream took up at taken:
// istiod's per-proxy metrics (pilot_xds_pushes, pilot_xds_config_size_bytes, the start of its
// pilot_xds_push_time, observed once it is sent, and, once the proxy has been sent every type
// the push changed that it watches, pilot_proxy_convergence_time) and the reference's own
// push delivery time.
func (s *Server) response(id int64, typeURL, version, nonce string, size int, taken time.Time) {
	short := ShortType(typeURL)
	s.m.XDSPushes.WithLabelValues(short).Inc()
	s.m.ConfigSize.WithLabelValues(short).Observe(float64(size))
	var rec *pushRecord
	if s.pusher != nil {
		rec = s.pusher.lastRecord(typeURL)
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st == nil {
		return
	}
	st.clock.responding(typeURL, taken)
	ts := st.typ(typeURL)
	ts.sentVersion, ts.sentNonce = version, nonce
	if ts.unanswered.IsZero() {
		ts.unanswered = now
	}
	// Pushes only, not a proxy's initial fetch; each push once per type.
	if rec == nil || !rec.start.After(st.opened) || rec.seq <= ts.sentSeq {
		return
	}
	ts.sentSeq = rec.seq
	s.m.PushDelivery.WithLabelValues(short).Observe(now.Sub(rec.start).Seconds())
	pp := st.pending[rec.seq]
	if pp == nil {
		pp = &pendingPush{rec: rec, sent: map[string]bool{}}
		st.pending[rec.seq] = pp
		if len(st.pending) > maxPending {
			delete(st.pending, slices.Min(slices.Collect(maps.Keys(st.pending))))
		}
	}
	pp.sent[typeURL] = true
	key := s.caches.ScopeKey(st.node)
	for t, tts := range st.types {
		if !pp.sent[t] && rec.expects(t, key, tts.names) {
			return // more of this push to come
		}
	}
	// Converged on rec, and on every earlier push merged into it: one observation from the
	// earliest push's start, after its debounce, as istiod's (PushRequest.Start is set as the
	// push is queued, in StartPush, "not including time spent debouncing"; merged queued pushes
	// keep the earliest).
	start := rec.start
	for seq, p := range st.pending {
		if seq <= rec.seq {
			if p.rec.start.Before(start) {
				start = p.rec.start
			}
			delete(st.pending, seq)
		}
	}
	s.m.ProxyConvergence.Observe(now.Sub(start).Seconds())
}

// ProxyStatus is what the server knows about one connected proxy.
type ProxyStatus struct {
	StreamID  int64                 `json:"streamId"`
	ID        string                `json:"id"`
	Delta     bool                  `json:"delta"`
	Proxyless bool                  `json:"proxyless"`
	Since     time.Time             `json:"connectedSince"`
	Types     map[string]TypeStatus `json:"types"`
}

// TypeStatus is one resource type of a proxy's stream.
type TypeStatus struct {
	Subscribed   []string `json:"subscribed,omitempty"` // empty: wildcard
	SentVersion  string   `json:"sentVersion"`
	AckedVersion string   `json:"ackedVersion"`
	NACKs        int      `json:"nacks"`
	// SentPush is the push (PushStatus.Seq) the latest response of this type belonged to; 0:
	// none yet, only the proxy's initial fetch.
	SentPush uint64 `json:"sentPush,omitempty"`
}

// Proxies lists connected proxies, by stream id.
func (s *Server) Proxies() []ProxyStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ProxyStatus, 0, len(s.streams))
	for _, st := range s.streams {
		ps := ProxyStatus{StreamID: st.id, ID: st.node.GetId(), Delta: st.delta, Proxyless: IsProxyless(st.node),
			Since: st.opened, Types: map[string]TypeStatus{}}
		for t, ts := range st.types {
			ps.Types[ShortType(t)] = TypeStatus{Subscribed: ts.names, SentVersion: ts.sentVersion,
				AckedVersion: ts.ackedVersion, NACKs: ts.nacks, SentPush: ts.sentSeq}
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StreamID < out[j].StreamID })
	return out
}

// SyncStatus is one proxy in /debug/syncz, with istiod's JSON names: per type, the nonce of the
// latest response sent and the nonce the proxy last acknowledged (equal: in sync).
type SyncStatus struct {
	ProxyID       string `json:"proxy"`
	ProxyType     string `json:"proxy_type"`
	Namespace     string `json:"namespace"`
	ClusterSent   string `json:"cluster_sent,omitempty"`
	ClusterAcked  string `json:"cluster_acked,omitempty"`
	ListenerSent  string `json:"listener_sent,omitempty"`
	ListenerAcked string `json:"listener_acked,omitempty"`
	RouteSent     string `json:"route_sent,omitempty"`
	RouteAcked    string `json:"route_acked,omitempty"`
	EndpointSent  string `json:"endpoint_sent,omitempty"`
	EndpointAcked string `json:"endpoint_acked,omitempty"`
	Delta         bool   `json:"delta,omitempty"`
}

// Syncz is /debug/syncz: every connected proxy's sent and acknowledged nonces, by stream.
func (s *Server) Syncz() []SyncStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Sorted(maps.Keys(s.streams))
	out := make([]SyncStatus, 0, len(ids))
	for _, id := range ids {
		st := s.streams[id]
		ss := SyncStatus{ProxyID: st.node.GetId(), Namespace: ProxyNamespace(st.node), Delta: st.delta}
		ss.ProxyType, _, _ = strings.Cut(st.node.GetId(), "~")
		pick := func(typeURL string, sent, acked *string) {
			if ts := st.types[typeURL]; ts != nil {
				*sent, *acked = ts.sentNonce, ts.ackedNonce
			}
		}
		pick(resourcev3.ClusterType, &ss.ClusterSent, &ss.ClusterAcked)
		pick(resourcev3.ListenerType, &ss.ListenerSent, &ss.ListenerAcked)
		pick(resourcev3.RouteType, &ss.RouteSent, &ss.RouteAcked)
		pick(resourcev3.EndpointType, &ss.EndpointSent, &ss.EndpointAcked)
		out = append(out, ss)
	}
	return out
}

// MaxConcurrentSends is the most responses ever sent at once (bounded by the push throttle).
func (s *Server) MaxConcurrentSends() int { return int(s.sends.maxInFlight.Load()) }

// NodeOf returns the node of the first connected stream whose node id is id.
func (s *Server) NodeOf(id string) (*core.Node, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.streams {
		if st.node.GetId() == id {
			return st.node, true
		}
	}
	return nil, false
}
