package xdsproxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshchaos/meshchaos/internal/adsqueue"
)

// Request order on a new stream, as Envoy sends them: clusters before endpoints, listeners
// before routes.
var xdsTypes = []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}

// decodeResource unmarshals one resource of typeURL and returns its name.
func decodeResource(typeURL string, a *anypb.Any) (string, proto.Message, error) {
	if a.GetTypeUrl() != typeURL {
		return "", nil, fmt.Errorf("type URL mismatch: response is %s but a resource is %s", typeURL, a.GetTypeUrl())
	}
	var m proto.Message
	switch typeURL {
	case resourcev3.ClusterType:
		m = &clusterv3.Cluster{}
	case resourcev3.EndpointType:
		m = &endpointv3.ClusterLoadAssignment{}
	case resourcev3.ListenerType:
		m = &listenerv3.Listener{}
	case resourcev3.RouteType:
		m = &routev3.RouteConfiguration{}
	default:
		return "", nil, fmt.Errorf("xdsproxy does not handle type %s", typeURL)
	}
	if err := a.UnmarshalTo(m); err != nil {
		return "", nil, fmt.Errorf("decode %s: %w", typeURL, err)
	}
	switch r := m.(type) {
	case *clusterv3.Cluster:
		return r.GetName(), m, nil
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName(), m, nil
	case *listenerv3.Listener:
		return r.GetName(), m, nil
	case *routev3.RouteConfiguration:
		return r.GetName(), m, nil
	}
	return "", nil, fmt.Errorf("unreachable type %T", m)
}

// xdsClient is the proxy's ADS client. Its state outlives streams: on reconnect it sends the
// versions it last accepted (SotW) or the resource versions it holds (delta), and the proxy
// keeps serving its last configuration meanwhile.
type xdsClient struct {
	p    *Proxy
	node *corev3.Node

	versions       map[string]string // SotW: last accepted version_info per type
	ldsTimerArmed  bool
	backoffAttempt int
}

func (c *xdsClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		gotResponse, err := c.attempt(ctx)
		c.p.stats.connected.Store(0)
		if ctx.Err() != nil {
			return
		}
		if gotResponse {
			c.backoffAttempt = 0 // Envoy resets its backoff once a stream delivered a response
		}
		d := c.backoff()
		c.p.log.Warn("xds stream closed; reconnecting", "err", err, "backoff", d)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// attempt runs one ADS stream on a connection of its own; it returns when the stream ends.
func (c *xdsClient) attempt(ctx context.Context) (gotResponse bool, err error) {
	conn, err := c.p.dialXDS()
	if err != nil {
		return false, fmt.Errorf("dial xDS server: %w", err)
	}
	defer conn.Close()
	if c.p.opts.Delta {
		return c.deltaSession(ctx, conn)
	}
	return c.sotwSession(ctx, conn)
}

// backoff is Envoy's jittered exponential backoff: uniform in [0, min(base·2^n, max)), at least 1ms.
func (c *xdsClient) backoff() time.Duration {
	ceil := c.p.opts.BackoffBase << min(c.backoffAttempt, 30)
	if ceil > c.p.opts.BackoffMax || ceil <= 0 {
		ceil = c.p.opts.BackoffMax
	}
	c.backoffAttempt++
	return max(time.Millisecond, time.Duration(rand.Int64N(int64(ceil))))
}

func (c *xdsClient) armLDSTimer() {
	if c.ldsTimerArmed || c.p.opts.InitialFetchTimeout <= 0 {
		return
	}
	c.ldsTimerArmed = true
	time.AfterFunc(c.p.opts.InitialFetchTimeout, func() { c.p.state.markTimedOut(resourcev3.ListenerType) })
}

type sotwSub struct {
	sent  bool
	nonce string
	names []string
}

type recvResult[T any] struct {
	resp T
	err  error
}

// pumpRecv moves a stream's Recv results onto a channel, so a session can select on them
// together with its context; it stops after the first error or when ctx ends.
func pumpRecv[T any](ctx context.Context, recv func() (T, error)) <-chan recvResult[T] {
	ch := make(chan recvResult[T], 1)
	go func() {
		for {
			resp, err := recv()
			select {
			case ch <- recvResult[T]{resp, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

func (c *xdsClient) sotwSession(ctx context.Context, conn grpc.ClientConnInterface) (gotResponse bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		return false, fmt.Errorf("open ADS stream: %w", err)
	}
	c.p.stats.streams.Add(1)
	recv := pumpRecv(sctx, stream.Recv)
	subs := map[string]*sotwSub{}
	for _, t := range xdsTypes {
		subs[t] = &sotwSub{}
	}
	// Requests go out from their own goroutine, as Envoy's do: sent from this loop, a large EDS
	// subscription and a control plane writing a large push wait on each other for good (see
	// adsqueue).
	out := adsqueue.Start(sctx, stream.Send, cancel)
	first := true
	send := func(typeURL string, errDetail error) {
		st := subs[typeURL]
		req := &discoveryv3.DiscoveryRequest{
			VersionInfo:   c.versions[typeURL],
			ResponseNonce: st.nonce,
			ResourceNames: st.names,
			TypeUrl:       typeURL,
		}
		if first {
			req.Node = c.node // Envoy sends the node on the first request of a stream only
			first = false
		}
		if errDetail != nil {
			req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: errDetail.Error()}
		}
		st.sent = true
		if req.Node != nil {
			out.Put("", req) // the one request with the node is never replaced
			return
		}
		out.Put(typeURL, req)
	}
	// syncSubs sends a request for every type whose subscription is new or changed.
	syncSubs := func() {
		eds, rds, lds := c.p.state.subscriptions()
		want := map[string][]string{resourcev3.EndpointType: eds, resourcev3.RouteType: rds}
		for _, t := range xdsTypes {
			st := subs[t]
			switch t {
			case resourcev3.ClusterType:
				if !st.sent {
					send(t, nil)
				}
			case resourcev3.ListenerType:
				if lds && !st.sent {
					c.armLDSTimer()
					send(t, nil)
				}
			default:
				names := want[t]
				if (!st.sent && len(names) > 0) || (st.sent && !slices.Equal(names, st.names)) {
					st.names = names
					send(t, nil)
				}
			}
		}
	}
	syncSubs()
	c.p.stats.connected.Store(1) // the stream is up and carries our requests
	for {
		select {
		case <-ctx.Done():
			return gotResponse, ctx.Err()
		case <-c.p.state.changed:
			syncSubs()
		case r := <-recv:
			if r.err != nil {
				if serr := out.Err(); serr != nil {
					return gotResponse, fmt.Errorf("send: %w", serr)
				}
				return gotResponse, fmt.Errorf("receive: %w", r.err)
			}
			gotResponse = true
			resp := r.resp
			st := subs[resp.GetTypeUrl()]
			if st == nil {
				c.p.log.Warn("ignoring response of unrequested type", "type", resp.GetTypeUrl())
				continue
			}
			st.nonce = resp.GetNonce()
			applyErr := c.applySotw(resp)
			c.p.stats.xdsUpdate(resp.GetTypeUrl(), applyErr)
			if applyErr == nil {
				c.versions[resp.GetTypeUrl()] = resp.GetVersionInfo()
			} else {
				c.p.log.Warn("rejecting xds response", "type", resp.GetTypeUrl(), "version", resp.GetVersionInfo(), "err", applyErr)
			}
			send(resp.GetTypeUrl(), applyErr)
			syncSubs()
		}
	}
}

func (c *xdsClient) applySotw(resp *discoveryv3.DiscoveryResponse) error {
	t := resp.GetTypeUrl()
	u := update{typeURL: t, version: resp.GetVersionInfo(), full: t == resourcev3.ClusterType || t == resourcev3.ListenerType}
	seen := map[string]bool{}
	for _, a := range resp.GetResources() {
		name, m, err := decodeResource(t, a)
		if err == nil && seen[name] {
			err = fmt.Errorf("duplicate resource name %q in %s response", name, t)
		}
		if err != nil {
			// A response that cannot be decoded is rejected whole; nothing changes.
			c.p.state.reject(t, err)
			return err
		}
		seen[name] = true
		u.resources = append(u.resources, namedResource{name: name, version: resp.GetVersionInfo(), msg: m})
	}
	return c.p.state.apply(u)
}

type deltaSub struct {
	sent  bool
	names []string
}

func (c *xdsClient) deltaSession(ctx context.Context, conn grpc.ClientConnInterface) (gotResponse bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(sctx)
	if err != nil {
		return false, fmt.Errorf("open delta ADS stream: %w", err)
	}
	c.p.stats.streams.Add(1)
	recv := pumpRecv(sctx, stream.Recv)
	subs := map[string]*deltaSub{}
	for _, t := range xdsTypes {
		subs[t] = &deltaSub{}
	}
	// Delta requests add up (subscribe, unsubscribe, each ACK), so none replaces another.
	out := adsqueue.Start(sctx, stream.Send, cancel)
	first := true
	send := func(req *discoveryv3.DeltaDiscoveryRequest) {
		if first {
			req.Node = c.node
			first = false
		}
		out.Put("", req)
	}
	syncSubs := func() {
		eds, rds, lds := c.p.state.subscriptions()
		want := map[string][]string{resourcev3.EndpointType: eds, resourcev3.RouteType: rds}
		for _, t := range xdsTypes {
			st := subs[t]
			wildcard := t == resourcev3.ClusterType || t == resourcev3.ListenerType
			if wildcard {
				if st.sent || (t == resourcev3.ListenerType && !lds) {
					continue
				}
				if t == resourcev3.ListenerType {
					c.armLDSTimer()
				}
				st.sent = true
				// An initial request with no names subscribes to everything (wildcard); the
				// versions we hold let the server skip what has not changed.
				send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, InitialResourceVersions: c.p.knownVersions(t)})
				continue
			}
			names := want[t]
			if !st.sent {
				if len(names) == 0 {
					continue
				}
				st.sent, st.names = true, names
				send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesSubscribe: names, InitialResourceVersions: c.p.knownVersions(t)})
				continue
			}
			var add, drop []string
			for _, n := range names {
				if !slices.Contains(st.names, n) {
					add = append(add, n)
				}
			}
			for _, n := range st.names {
				if !slices.Contains(names, n) {
					drop = append(drop, n)
				}
			}
			if len(add)+len(drop) == 0 {
				continue
			}
			st.names = names
			send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesSubscribe: add, ResourceNamesUnsubscribe: drop})
		}
	}
	syncSubs()
	c.p.stats.connected.Store(1) // the stream is up and carries our requests
	for {
		select {
		case <-ctx.Done():
			return gotResponse, ctx.Err()
		case <-c.p.state.changed:
			syncSubs()
		case r := <-recv:
			if r.err != nil {
				if serr := out.Err(); serr != nil {
					return gotResponse, fmt.Errorf("send: %w", serr)
				}
				return gotResponse, fmt.Errorf("receive: %w", r.err)
			}
			gotResponse = true
			resp := r.resp
			t := resp.GetTypeUrl()
			if subs[t] == nil {
				c.p.log.Warn("ignoring delta response of unrequested type", "type", t)
				continue
			}
			applyErr := c.applyDelta(resp)
			c.p.stats.xdsUpdate(t, applyErr)
			ack := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()}
			if applyErr != nil {
				c.p.log.Warn("rejecting delta xds response", "type", t, "nonce", resp.GetNonce(), "err", applyErr)
				ack.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: applyErr.Error()}
			}
			send(ack)
			syncSubs()
		}
	}
}

func (c *xdsClient) applyDelta(resp *discoveryv3.DeltaDiscoveryResponse) error {
	t := resp.GetTypeUrl()
	u := update{typeURL: t, version: resp.GetSystemVersionInfo(), removed: resp.GetRemovedResources()}
	seen := map[string]bool{}
	for _, r := range resp.GetResources() {
		if r.GetResource() == nil {
			continue
		}
		name, m, err := decodeResource(t, r.GetResource())
		if err == nil && seen[name] {
			err = fmt.Errorf("duplicate resource name %q in %s response", name, t)
		}
		if err != nil {
			c.p.state.reject(t, err)
			return err
		}
		seen[name] = true
		u.resources = append(u.resources, namedResource{name: name, version: r.GetVersion(), msg: m})
	}
	return c.p.state.apply(u)
}
