package xds

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/meshchaos/meshchaos/controlplane/metrics"
)

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

	mu      sync.Mutex
	streams map[int64]*streamState
}

type streamState struct {
	id     int64
	delta  bool
	node   *core.Node
	opened time.Time
	types  map[string]*typeState
}

type typeState struct {
	names        []string
	sentVersion  string
	sentNonce    string
	ackedVersion string
	pushStart    time.Time // start of the push the in-flight response carries; zero if none
	nacks        int
}

// NewServer wires a go-control-plane server over the caches into a gRPC server.
func NewServer(ctx context.Context, caches *Caches, pusher *Pusher, gate Gate, m *metrics.Metrics, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{caches: caches, pusher: pusher, gate: gate, log: log, m: m, streams: map[int64]*streamState{}}
	xs := serverv3.NewServer(ctx, caches.Mux, s.callbacks())
	s.grpc = grpc.NewServer(
		grpc.StreamInterceptor(s.refuseUntilReady),
		grpc.MaxConcurrentStreams(1<<20),
		grpc.MaxRecvMsgSize(64<<20),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	discovery.RegisterAggregatedDiscoveryServiceServer(s.grpc, xs)
	return s
}

// Serve serves on l until Stop.
func (s *Server) Serve(l net.Listener) error { return s.grpc.Serve(l) }

// Stop closes every stream and the listener.
func (s *Server) Stop() { s.grpc.Stop() }

// refuseUntilReady is the sync gate on the xDS side: until it opens, every stream is refused
// with Unavailable, so a proxy keeps its last config and retries instead of taking an
// incomplete one.
func (s *Server) refuseUntilReady(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.gate != nil && !s.gate.IsOpen() {
		s.m.StreamsRefused.Inc()
		return status.Error(codes.Unavailable, "control plane not ready: informers have not synced yet; retry")
	}
	return handler(srv, ss)
}

func (s *Server) callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, _ string) error {
			s.open(id, false)
			return nil
		},
		StreamClosedFunc: func(id int64, _ *core.Node) { s.close(id) },
		DeltaStreamOpenFunc: func(_ context.Context, id int64, _ string) error {
			s.open(id, true)
			return nil
		},
		DeltaStreamClosedFunc: func(id int64, _ *core.Node) { s.close(id) },
		StreamRequestFunc: func(id int64, r *discovery.DiscoveryRequest) error {
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
		StreamResponseFunc: func(_ context.Context, id int64, _ *discovery.DiscoveryRequest, r *discovery.DiscoveryResponse) {
			s.response(id, r.GetTypeUrl(), r.GetVersionInfo(), r.GetNonce())
		},
		StreamDeltaRequestFunc: func(id int64, r *discovery.DeltaDiscoveryRequest) error {
			s.request(id, r.GetNode(), r.GetTypeUrl(), r.GetResponseNonce(), "", r.GetErrorDetail(),
				r.GetResourceNamesSubscribe(), r.GetResourceNamesUnsubscribe(), true)
			return nil
		},
		StreamDeltaResponseFunc: func(id int64, _ *discovery.DeltaDiscoveryRequest, r *discovery.DeltaDiscoveryResponse) {
			s.response(id, r.GetTypeUrl(), r.GetSystemVersionInfo(), r.GetNonce())
		},
	}
}

func (s *Server) open(id int64, delta bool) {
	s.mu.Lock()
	s.streams[id] = &streamState{id: id, delta: delta, opened: time.Now(), types: map[string]*typeState{}}
	s.mu.Unlock()
	s.m.ConnectedProxies.Inc()
}

func (s *Server) close(id int64) {
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
	s.m.ConnectedProxies.Dec()
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
	if node != nil && node.GetId() != "" {
		st.node = node
	}
	ts := st.typ(typeURL)
	if delta {
		for _, n := range names {
			if !slices.Contains(ts.names, n) {
				ts.names = append(ts.names, n)
			}
		}
		ts.names = slices.DeleteFunc(ts.names, func(n string) bool { return slices.Contains(unsub, n) })
	} else {
		ts.names = names
	}
	if nonce == "" || nonce != ts.sentNonce {
		return ""
	}
	if errDetail != nil {
		// A NACK: count and log it; the proxy keeps its previous config (the version it
		// sends) and the next push carries on. Never retried in a loop.
		ts.nacks++
		s.m.Rejects.WithLabelValues(ShortType(typeURL)).Inc()
		s.log.Warn("proxy rejected config (NACK)", "proxy", st.node.GetId(), "type", ShortType(typeURL),
			"nonce", nonce, "rejected", ts.sentVersion, "kept", version, "error", errDetail.GetMessage())
		ts.pushStart = time.Time{}
		return ts.sentVersion
	}
	if delta {
		ts.ackedVersion = ts.sentVersion
	} else {
		ts.ackedVersion = version
	}
	if !ts.pushStart.IsZero() {
		s.m.ProxyConvergence.Observe(time.Since(ts.pushStart).Seconds())
		ts.pushStart = time.Time{}
	}
	return ""
}

func (s *Server) response(id int64, typeURL, version, nonce string) {
	s.m.XDSPushes.WithLabelValues(ShortType(typeURL)).Inc()
	var last time.Time
	if s.pusher != nil {
		last = s.pusher.LastPush(typeURL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st == nil {
		return
	}
	ts := st.typ(typeURL)
	ts.sentVersion, ts.sentNonce = version, nonce
	// Convergence is measured for pushes, not for a proxy's initial fetch.
	if last.After(st.opened) {
		ts.pushStart = last
	} else {
		ts.pushStart = time.Time{}
	}
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
				AckedVersion: ts.ackedVersion, NACKs: ts.nacks}
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StreamID < out[j].StreamID })
	return out
}

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
