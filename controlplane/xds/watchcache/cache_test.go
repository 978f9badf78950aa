package watchcache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/config"
	deltav3 "github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	restv3 "github.com/envoyproxy/go-control-plane/pkg/server/rest/v3"
	sotw "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/stretchr/testify/require"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/meshchaos/meshchaos/controlplane/xds/sotwserver"
)

// rig serves one cache over go-control-plane's ADS server on a loopback port.
type rig struct {
	cache *Cache
	addr  string
	typ   string
}

func newRig(t *testing.T, typeURL, prefix string, initial ...string) *rig {
	t.Helper()
	return newRigOpts(t, nil, false, typeURL, prefix, initial...)
}

// newCacheRig is a rig without a server: its streams are served by the cache itself.
func newCacheRig(t *testing.T, typeURL, prefix string, initial ...string) *rig {
	t.Helper()
	r := &rig{cache: New(typeURL, prefix), typ: typeURL}
	if len(initial) > 0 {
		require.NoError(t, r.cache.UpdateResources(resources(typeURL, initial...), nil))
	}
	return r
}

// newRigOpts is newRig with the server's options; with ours, SotW streams are served as the
// control plane serves them (sotwserver), Delta ones by go-control-plane's server.
func newRigOpts(t *testing.T, opts []config.XDSOption, ours bool, typeURL, prefix string, initial ...string) *rig {
	t.Helper()
	r := &rig{cache: New(typeURL, prefix), typ: typeURL}
	if len(initial) > 0 {
		require.NoError(t, r.cache.UpdateResources(resources(typeURL, initial...), nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	srv := serverv3.NewServer(ctx, r.cache, nil, opts...)
	if ours {
		srv = serverv3.NewServerAdvanced(restv3.NewServer(r.cache, nil), sotwserver.New(ctx, r.cache, nil), deltav3.NewServer(ctx, r.cache, nil, opts...))
	}
	discovery.RegisterAggregatedDiscoveryServiceServer(g, srv)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(func() { cancel(); g.Stop() })
	r.addr = l.Addr().String()
	return r
}

func resource(typeURL, name string) types.Resource {
	switch typeURL {
	case resourcev3.ClusterType:
		return &cluster.Cluster{Name: name}
	case resourcev3.ListenerType:
		return &listener.Listener{Name: name}
	case resourcev3.RouteType:
		return &route.RouteConfiguration{Name: name}
	}
	return &endpoint.ClusterLoadAssignment{ClusterName: name}
}

func resources(typeURL string, names ...string) map[string]types.Resource {
	out := map[string]types.Resource{}
	for _, n := range names {
		out[n] = resource(typeURL, n)
	}
	return out
}

func names(any []*discovery.Resource) []string {
	out := []string{}
	for _, r := range any {
		out = append(out, r.GetName())
	}
	sort.Strings(out)
	return out
}

func conn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

func streamCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // Recv fails, not hangs
	t.Cleanup(cancel)
	return ctx
}

// sotwStream is a SotW stream: over go-control-plane's server, or to the cache itself.
type sotwStream interface {
	Send(*discovery.DiscoveryRequest) error
	Recv() (*discovery.DiscoveryResponse, error)
}

// sotwClient is one SotW ADS stream driven step by step.
type sotwClient struct {
	t    *testing.T
	typ  string
	s    sotwStream
	last *discovery.DiscoveryResponse // the latest response received
	acc  string                       // the latest version accepted
}

func (r *rig) sotw(t *testing.T) *sotwClient {
	if r.addr == "" {
		return &sotwClient{t: t, typ: r.typ, s: &cacheSotw{c: r.cache}}
	}
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn(t, r.addr)).StreamAggregatedResources(streamCtx(t))
	require.NoError(t, err)
	return &sotwClient{t: t, typ: r.typ, s: s}
}

// answerWait bounds the wait for an answer the cache gives directly (Recv fails, not hangs).
const answerWait = 5 * time.Second

// errUnread: a request came while an answer was still unread (the server would drop it); the
// table cases claim every answer they cause.
var errUnread = errors.New("a request came while an answer of the cache was unread")

// wire is m as a receiver reads it: through its encoding (a shared full-state answer carries its
// resources as encoded bytes).
func wire[M proto.Message](m proto.Message, into M) (M, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return into, err
	}
	return into, proto.Unmarshal(b, into)
}

// cacheSotw is a SotW stream served by the cache itself, as go-control-plane's SotW server
// serves one: a subscription kept for the stream's life, the watch cancelled before each
// request re-arms it, an answer counted as sent when it is read.
type cacheSotw struct {
	c      *Cache
	sub    *stream.Subscription
	ch     chan cachev3.Response
	cancel func()
}

func (s *cacheSotw) Send(req *discovery.DiscoveryRequest) error {
	if len(s.ch) > 0 {
		return errUnread
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.sub == nil {
		sub := stream.NewSotwSubscription(req.GetResourceNames(), true)
		s.sub = &sub
	} else {
		s.sub.SetResourceSubscription(req.GetResourceNames())
	}
	s.ch = make(chan cachev3.Response, 1)
	cancel, err := s.c.CreateWatch(req, *s.sub, s.ch)
	s.cancel = cancel
	return err
}

func (s *cacheSotw) Recv() (*discovery.DiscoveryResponse, error) {
	select {
	case r := <-s.ch:
		s.sub.SetReturnedResources(r.GetReturnedResources())
		out, err := r.GetDiscoveryResponse()
		if err != nil {
			return nil, err
		}
		return wire(out, &discovery.DiscoveryResponse{})
	case <-time.After(answerWait):
		return nil, fmt.Errorf("no answer in %s", answerWait)
	}
}

// step is one action of a table test: change the cache, send a request, or expect the next
// response. A response nobody expected fails the next expect: every case ends its "no answer"
// claims with a change the stream does see.
type step struct {
	put, del []string // change the cache (one version)
	set      []string // SetResources
	// a request: ask for names (nil: wildcard) with version ("" for the first request, "ack":
	// the latest response's, "acc": the latest accepted), nacking the latest response if nack.
	ask     bool
	names   []string
	version string
	nack    bool
	// expect: the next response carries exactly want (and, for Delta, removes gone).
	expect bool
	want   []string
	gone   []string
}

func (c *sotwClient) do(r *rig, st step) {
	c.t.Helper()
	switch {
	case r.change(c.t, st):
	case st.ask:
		req := &discovery.DiscoveryRequest{TypeUrl: c.typ, ResourceNames: st.names}
		switch st.version {
		case "ack":
			req.VersionInfo = c.last.GetVersionInfo()
			c.acc = req.VersionInfo
		case "acc":
			req.VersionInfo = c.acc
		default:
			req.VersionInfo = st.version
		}
		if c.last != nil {
			req.ResponseNonce = c.last.GetNonce()
		}
		req.ErrorDetail = st.errorDetail()
		require.NoError(c.t, c.s.Send(req))
	case st.expect:
		resp, err := c.s.Recv()
		require.NoError(c.t, err)
		var got []string
		for _, a := range resp.GetResources() {
			m, err := a.UnmarshalNew()
			require.NoError(c.t, err)
			got = append(got, cachev3.GetResourceName(m))
		}
		sort.Strings(got)
		want := append([]string{}, st.want...)
		sort.Strings(want)
		require.Equal(c.t, want, append([]string{}, got...), "response %s", resp.GetVersionInfo())
		c.last = resp
	}
}

// errorDetail is a NACK's error for a step that nacks, else nil.
func (st step) errorDetail() *rpcstatus.Status {
	if !st.nack {
		return nil
	}
	return &rpcstatus.Status{Code: 3, Message: "rejected for the test"}
}

// many names n resources.
func many(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "r" + strconv.Itoa(i)
	}
	return out
}

func put(n ...string) step                 { return step{put: n} }
func del(n ...string) step                 { return step{del: n} }
func set(n ...string) step                 { return step{set: n} }
func ask(version string, n ...string) step { return step{ask: true, version: version, names: n} }
func nack(n ...string) step                { return step{ask: true, version: "acc", names: n, nack: true} }
func want(n ...string) step                { return step{expect: true, want: append([]string{}, n...)} }
func wantGone(upd []string, gone ...string) step {
	return step{expect: true, want: append([]string{}, upd...), gone: append([]string{}, gone...)}
}

// scenario is one table case: a cache of typ holding initial, and one stream's steps.
type scenario struct {
	name    string
	typ     string
	initial []string
	steps   []step
}

// stepper is a stream driven step by step.
type stepper interface{ do(r *rig, st step) }

// run plays each scenario on a new rig with one stream opened by open: to the cache itself,
// under each of go-control-plane's server's ADS modes: a response channel per request (the
// default), and ordered ADS (one channel; other types' responses are sent between a watch's
// cancel and its re-arm); and as the control plane serves (its SotW streams by sotwserver,
// which keeps a subscription a request repeats).
func run(t *testing.T, cases []scenario, open func(t *testing.T, r *rig) stepper) {
	modes := []struct {
		name   string
		direct bool
		opts   []config.XDSOption
		ours   bool
	}{{"cache", true, nil, false}, {"default", false, nil, false}, {"ordered", false, []config.XDSOption{sotw.WithOrderedADS()}, false},
		{"controlplane", false, nil, true}}
	for _, mode := range modes {
		for _, tc := range cases {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				var r *rig
				if mode.direct {
					r = newCacheRig(t, tc.typ, "t-", tc.initial...)
				} else {
					r = newRigOpts(t, mode.opts, mode.ours, tc.typ, "t-", tc.initial...)
				}
				c := open(t, r)
				for _, st := range tc.steps {
					c.do(r, st)
				}
			})
		}
	}
}

// change applies st to the cache if it is a change.
func (r *rig) change(t *testing.T, st step) bool {
	t.Helper()
	switch {
	case st.put != nil || st.del != nil:
		require.NoError(t, r.cache.UpdateResources(resources(r.typ, st.put...), st.del))
	case st.set != nil:
		r.cache.SetResources(resources(r.typ, st.set...))
	default:
		return false
	}
	return true
}

func TestSotw(t *testing.T) {
	eds, cds := resourcev3.EndpointType, resourcev3.ClusterType
	cases := []scenario{
		{"named: only the changed subscribed resources, and one that appears later", eds, []string{"a", "x"}, []step{
			ask("", "a", "b"), want("a"),
			ask("ack", "a", "b"), // no answer: nothing changed
			put("b"), want("b"), ask("ack", "a", "b"),
			put("x"), // not subscribed: no answer
			put("a"), want("a"), ask("ack", "a", "b"),
		}},
		{"a subset of what the cache holds (proxyless gRPC)", eds, []string{"a", "b", "c"}, []step{
			ask("", "b"), want("b"), ask("ack", "b"),
			put("a", "b", "c"), want("b"),
		}},
		{"a name added to the subscription is sent, one removed and added again is sent again", eds, []string{"a", "b"}, []step{
			ask("", "a"), want("a"), ask("ack", "a", "b"), want("b"),
			ask("ack", "a"), // b dropped: no answer
			ask("acc", "a", "b"), want("b"), ask("ack", "a", "b"),
			put("a"), want("a"),
		}},
		{"a deleted resource is not answered in SotW EDS; it is sent again when it comes back", eds, []string{"a", "b"}, []step{
			ask("", "a", "b"), want("a", "b"), ask("ack", "a", "b"),
			del("b"), put("a"), want("a"), ask("ack", "a", "b"),
			put("b"), want("b"),
		}},
		{"a NACK gets no answer and the next change is sent", eds, []string{"a", "b"}, []step{
			ask("", "a", "b"), want("a", "b"), ask("ack", "a", "b"),
			put("a"), want("a"), nack("a", "b"),
			put("b"), want("b"),
		}},
		{"a NACK of the first response (no version accepted yet) is not answered with it again", cds, []string{"a"}, []step{
			ask(""), want("a"), {ask: true, nack: true},
			put("b"), want("a", "b"),
		}},
		{"the first request gets an answer even when nothing it names exists", eds, []string{"a"}, []step{
			ask("", "b"), want(), ask("ack", "b"),
			put("b"), want("b"),
		}},
		{"a version of another instance gets the whole state", eds, []string{"a", "b"}, []step{
			ask("other-7", "a", "b"), want("a", "b"),
		}},
		{"a version of this instance on a new stream: everything subscribed is sent", eds, []string{"a", "b"}, []step{
			ask("t-1", "a", "b"), want("a", "b"),
		}},
		{"wildcard CDS: every change sends the whole state, deletions included", cds, []string{"a", "b"}, []step{
			ask(""), want("a", "b"), ask("ack"),
			put("c"), want("a", "b", "c"), ask("ack"),
			del("a"), want("b", "c"), ask("ack"),
			set("b", "d"), want("b", "d"),
		}},
		{"named CDS (full state): dropping a name answers with the smaller set", cds, []string{"a", "b"}, []step{
			ask("", "a", "b"), want("a", "b"), ask("ack", "a", "b"),
			ask("ack", "a"), want("a"), ask("ack", "a"),
			put("b"), // not subscribed any more
			put("a"), want("a"),
		}},
		{"a change while the stream has not ACKed yet is sent at its ACK", eds, []string{"a", "b"}, []step{
			ask("", "a", "b"), want("a", "b"),
			put("b"), ask("ack", "a", "b"), want("b"),
		}},
	}
	run(t, cases, func(t *testing.T, r *rig) stepper { return r.sotw(t) })
}

// deltaClient is one Delta ADS stream driven step by step.
type deltaClient struct {
	t     *testing.T
	typ   string
	s     deltaStream
	last  *discovery.DeltaDiscoveryResponse
	names []string // the subscription as of the latest request
	known map[string]string
}

// deltaStream is a Delta stream: over go-control-plane's server, or to the cache itself.
type deltaStream interface {
	Send(*discovery.DeltaDiscoveryRequest) error
	Recv() (*discovery.DeltaDiscoveryResponse, error)
}

// cacheDelta is a Delta stream served by the cache itself, as go-control-plane's Delta server
// serves one (see cacheSotw).
type cacheDelta struct {
	c      *Cache
	sub    *stream.Subscription
	ch     chan cachev3.DeltaResponse
	cancel func()
}

func (s *cacheDelta) Send(req *discovery.DeltaDiscoveryRequest) error {
	if len(s.ch) > 0 {
		return errUnread
	}
	if s.sub == nil {
		sub := stream.NewDeltaSubscription(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), req.GetInitialResourceVersions(), true)
		s.sub = &sub
	} else {
		s.cancel()
		s.sub.UpdateResourceSubscriptions(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
	}
	s.ch = make(chan cachev3.DeltaResponse, 1)
	cancel, err := s.c.CreateDeltaWatch(req, *s.sub, s.ch)
	s.cancel = cancel
	return err
}

func (s *cacheDelta) Recv() (*discovery.DeltaDiscoveryResponse, error) {
	select {
	case r := <-s.ch:
		s.sub.SetReturnedResources(r.GetNextVersionMap())
		out, err := r.GetDeltaDiscoveryResponse()
		if err != nil {
			return nil, err
		}
		return wire(out, &discovery.DeltaDiscoveryResponse{})
	case <-time.After(answerWait):
		return nil, fmt.Errorf("no answer in %s", answerWait)
	}
}

func (r *rig) delta(t *testing.T) *deltaClient {
	if r.addr == "" {
		return &deltaClient{t: t, typ: r.typ, s: &cacheDelta{c: r.cache}, known: map[string]string{}}
	}
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn(t, r.addr)).DeltaAggregatedResources(streamCtx(t))
	require.NoError(t, err)
	return &deltaClient{t: t, typ: r.typ, s: s, known: map[string]string{}}
}

func (c *deltaClient) do(r *rig, st step) {
	c.t.Helper()
	switch {
	case r.change(c.t, st):
	case st.ask:
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: c.typ}
		if c.last == nil {
			req.ResourceNamesSubscribe = st.names
			if st.version != "" { // a reconnect: what the client has
				req.InitialResourceVersions = map[string]string{}
				for _, n := range st.names {
					req.InitialResourceVersions[n] = st.version
				}
			}
		} else {
			req.ResponseNonce = c.last.GetNonce()
			for _, n := range st.names {
				if !slices.Contains(c.names, n) {
					req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
				}
			}
			for _, n := range c.names {
				if !slices.Contains(st.names, n) {
					req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
				}
			}
		}
		c.names = st.names
		req.ErrorDetail = st.errorDetail()
		require.NoError(c.t, c.s.Send(req))
	case st.expect:
		resp, err := c.s.Recv()
		require.NoError(c.t, err)
		want := append([]string{}, st.want...)
		sort.Strings(want)
		gone := append([]string{}, st.gone...)
		sort.Strings(gone)
		removed := append([]string{}, resp.GetRemovedResources()...)
		sort.Strings(removed)
		require.Equal(c.t, want, names(resp.GetResources()), "resources of %s", resp.GetSystemVersionInfo())
		require.Equal(c.t, gone, removed, "removed in %s", resp.GetSystemVersionInfo())
		for _, res := range resp.GetResources() {
			require.NotEmpty(c.t, res.GetVersion())
			c.known[res.GetName()] = res.GetVersion()
		}
		c.last = resp
	}
}

func TestDelta(t *testing.T) {
	eds, cds := resourcev3.EndpointType, resourcev3.ClusterType
	cases := []scenario{
		{"named: changes, removals, resources that appear later", eds, []string{"a", "x"}, []step{
			ask("", "a", "b"), want("a"),
			ask("ack", "a", "b"), // an ACK: no answer
			put("b"), want("b"), ask("ack", "a", "b"),
			put("x"), // not subscribed
			del("a"), wantGone(nil, "a"), ask("ack", "a", "b"),
			put("a", "b"), want("a", "b"),
		}},
		{"subscribing to more names sends only those", eds, []string{"a", "b", "c"}, []step{
			ask("", "a"), want("a"), ask("ack", "a", "c"), want("c"),
			ask("ack", "c"), // unsubscribed a: nothing to send
			put("a", "c"), want("c"),
		}},
		{"a NACK gets no answer and the next change is sent", eds, []string{"a", "b"}, []step{
			ask("", "a", "b"), want("a", "b"), ask("ack", "a", "b"),
			put("a"), want("a"), nack("a", "b"),
			put("b"), want("b"),
		}},
		{"wildcard: the first request is answered even when empty; changes and removals follow", cds, nil, []step{
			ask(""), want(), ask("ack"),
			put("a", "b"), want("a", "b"), ask("ack"),
			del("a"), wantGone(nil, "a"), ask("ack"),
			set("b", "c"), want("c"), // a full push: b's content is the same, only c is new
		}},
		{"wildcard: a name unsubscribed is answered again (it is still wanted as part of the wildcard)", cds, []string{"a", "b"}, []step{
			ask(""), want("a", "b"), ask("ack", "a"), want("a"),
			ask("ack"), want("a"), ask("ack"),
			del("a"), wantGone(nil, "a"),
		}},
		{"a deletion in the update that compacts the change log still reaches the stream", eds, []string{"a"}, []step{
			ask("", "a"), want("a"), ask("ack", "a"),
			{put: many(3000)}, {put: many(4000), del: []string{"a"}}, wantGone(nil, "a"), // the log doubles in the second
		}},
		{"a reconnect with versions of another instance gets everything again", eds, []string{"a", "b"}, []step{
			ask("other-3", "a", "b"), want("a", "b"),
		}},
	}
	run(t, cases, func(t *testing.T, r *rig) stepper { return r.delta(t) })
}

// A reconnecting Delta stream that has the current versions is sent only what differs.
func TestDeltaReconnectSendsOnlyWhatDiffers(t *testing.T) {
	r := newRig(t, resourcev3.EndpointType, "t-", "a", "b")
	first := r.delta(t)
	first.do(r, ask("", "a", "b"))
	first.do(r, want("a", "b"))
	require.NoError(t, r.cache.UpdateResources(resources(r.typ, "b"), nil))
	first.do(r, ask("ack", "a", "b"))
	first.do(r, want("b"))

	second := r.delta(t)
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: r.typ, ResourceNamesSubscribe: []string{"a", "b", "c"},
		InitialResourceVersions: map[string]string{"a": first.known["a"], "b": "t-1", "c": "t-1"}}
	require.NoError(t, second.s.Send(req))
	second.names = []string{"a", "b", "c"}
	second.do(r, wantGone([]string{"b"}, "c")) // a is current; b is stale; c does not exist
}

// An ACK with an unchanged subscription re-arms the stream's watch without touching the
// reverse index: the index work is once per name subscribed, not once per name per ACK.
func TestRearmDoesNotReindex(t *testing.T) {
	all := many(200)
	r := newRig(t, resourcev3.EndpointType, "t-", all...)
	c := r.sotw(t)
	c.do(r, ask("", all...))
	c.do(r, want(all...))
	for i := range 20 {
		c.do(r, ask("ack", all...))
		c.do(r, put(all[i]))
		c.do(r, want(all[i]))
	}
	r.cache.mu.Lock()
	defer r.cache.mu.Unlock()
	require.Equal(t, len(all), r.cache.indexed, "names indexed")
	require.Len(t, r.cache.streams, 1)
	require.Len(t, r.cache.byName, len(all))
}

// Wildcard watches at the same version share one full-state answer: the resources are encoded
// once, whatever the number of streams, and each stream's response decodes to all of them.
func TestFullStateAnswerIsShared(t *testing.T) {
	c := New(resourcev3.ClusterType, "t-")
	c.SetResources(resources(c.typeURL, "a", "b", "c"))
	var outs []*discovery.DiscoveryResponse
	for range 3 {
		sub := stream.NewSotwSubscription(nil, true)
		ch := make(chan cachev3.Response, 1)
		_, err := c.CreateWatch(&cachev3.Request{TypeUrl: c.typeURL}, &sub, ch)
		require.NoError(t, err)
		out, err := (<-ch).GetDiscoveryResponse()
		require.NoError(t, err)
		outs = append(outs, out)
	}
	body := outs[0].ProtoReflect().GetUnknown()
	require.NotEmpty(t, body)
	for _, o := range outs {
		require.Same(t, &body[0], &o.ProtoReflect().GetUnknown()[0], "encoded once")
		o.Nonce = "7" // as the server does: every stream has its own response
		wire, err := proto.Marshal(o)
		require.NoError(t, err)
		var got discovery.DiscoveryResponse
		require.NoError(t, proto.Unmarshal(wire, &got))
		require.Equal(t, "7", got.GetNonce())
		require.Equal(t, "t-1", got.GetVersionInfo())
		var names []string
		for _, a := range got.GetResources() {
			var cl cluster.Cluster
			require.NoError(t, a.UnmarshalTo(&cl))
			names = append(names, cl.GetName())
		}
		require.Equal(t, []string{"a", "b", "c"}, names)
	}
	require.NotSame(t, outs[0], outs[1])
}

// A stream that ends leaves no watch behind once parkedGrace has passed.
func TestEndedStreamsAreSwept(t *testing.T) {
	c := New(resourcev3.EndpointType, "t-")
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	sub := stream.NewSotwSubscription([]string{"a", "b"}, false)
	cancel, err := c.CreateWatch(&cachev3.Request{TypeUrl: c.typeURL, ResourceNames: []string{"a", "b"}, VersionInfo: "t-0"}, &sub, make(chan cachev3.Response, 1))
	require.NoError(t, err)
	require.Equal(t, 1, c.NumWatches())
	cancel() // the stream ended
	now = now.Add(parkedGrace + time.Second)
	require.NoError(t, c.UpdateResource("a", resource(c.typeURL, "a")))
	require.Equal(t, 0, c.NumWatches())
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.byName)
}

// The server drops an answer when a request of the stream comes first (it replaces the watch's
// response channel): the stream is answered again at that request.
func TestDroppedAnswerIsSentAgain(t *testing.T) {
	c := New(resourcev3.EndpointType, "t-")
	require.NoError(t, c.UpdateResource("a", resource(c.typeURL, "a")))
	sub := stream.NewSotwSubscription([]string{"a"}, false)
	req := func(version string) (*cachev3.Request, chan cachev3.Response) {
		return &cachev3.Request{TypeUrl: c.typeURL, ResourceNames: []string{"a"}, VersionInfo: version}, make(chan cachev3.Response, 1)
	}
	sendOf := func(r cachev3.Response) string { // what the server does when it sends r
		sub.SetReturnedResources(r.GetReturnedResources())
		return r.GetResponseVersion()
	}
	r, ch := req("")
	cancel, err := c.CreateWatch(r, &sub, ch)
	require.NoError(t, err)
	v := sendOf(<-ch)
	cancel()
	r, ch = req(v)
	cancel, err = c.CreateWatch(r, &sub, ch)
	require.NoError(t, err)
	require.Empty(t, ch, "an ACK: nothing to send")

	require.NoError(t, c.UpdateResource("a", resource(c.typeURL, "a")))
	require.Len(t, ch, 1, "the change is answered")
	cancel() // a request came before the server read the answer: it is dropped
	r, ch = req(v)
	_, err = c.CreateWatch(r, &sub, ch)
	require.NoError(t, err)
	require.Len(t, ch, 1, "the dropped answer is given again")
	require.NotEqual(t, v, sendOf(<-ch))
}

// The change log and the tombstones of deleted resources do not grow with the changes: once
// every stream has been answered past a deletion, its tombstone goes.
func TestLogAndTombstonesAreCompacted(t *testing.T) {
	r := newRig(t, resourcev3.EndpointType, "t-", "keep")
	c := r.sotw(t)
	c.do(r, ask("", "keep"))
	c.do(r, want("keep"))
	c.do(r, ask("ack", "keep"))
	// The ACK re-arms the stream's watch: only then has it nothing left to learn.
	require.Eventually(t, func() bool {
		r.cache.mu.Lock()
		defer r.cache.mu.Unlock()
		for _, w := range r.cache.streams {
			return w.armed
		}
		return false
	}, 10*time.Second, time.Millisecond, "the ACK re-arms the watch")
	for _, name := range many(3000) {
		require.NoError(t, r.cache.UpdateResource(name, resource(r.typ, name)))
		require.NoError(t, r.cache.DeleteResource(name))
	}
	c.do(r, put("keep"))
	c.do(r, want("keep"))
	_, ok := r.cache.Resource("keep")
	require.True(t, ok)
	_, ok = r.cache.Resource(many(1)[0])
	require.False(t, ok, "deleted")
	r.cache.mu.Lock()
	defer r.cache.mu.Unlock()
	require.Less(t, len(r.cache.log), 2100, "log entries")
	require.Less(t, len(r.cache.entries), 1100, "entries and tombstones")
	require.Equal(t, 1, r.cache.live)
}

// deletionCases are the ways a subscribed resource can be deleted, for one type: by name and
// by wildcard, one of several and the last one, while the stream waits and while it has not
// ACKed yet, in the update that compacts the change log and before a compaction the stream
// has not ACKed. SotW full-state types (CDS, LDS) must answer each with the resources left,
// even none (an empty response is the deletion); Delta names each in removed_resources.
func deletionCases(typ string, delta bool) []scenario {
	gone := func(upd []string, g ...string) step {
		if delta {
			return wantGone(upd, g...)
		}
		return want(upd...)
	}
	return []scenario{
		{"named: one of two deleted", typ, []string{"a", "b"}, []step{
			ask("", "a", "b"), want("a", "b"), ask("ack", "a", "b"),
			del("b"), gone(pick(delta, nil, []string{"a"}), "b"), ask("ack", "a", "b"),
			put("b"), want(pick(delta, []string{"b"}, []string{"a", "b"})...),
		}},
		{"named: the last subscribed resource deleted", typ, []string{"a", "x"}, []step{
			ask("", "a"), want("a"), ask("ack", "a"),
			del("a"), gone(nil, "a"), ask("ack", "a"),
			put("a"), want("a"),
		}},
		{"named: deleted before the stream ACKed", typ, []string{"a", "b"}, []step{
			ask("", "a", "b"), want("a", "b"),
			del("a"), ask("ack", "a", "b"), gone(pick(delta, nil, []string{"b"}), "a"),
		}},
		{"named: deleted in the update that compacts the log", typ, []string{"a"}, []step{
			ask("", "a"), want("a"), ask("ack", "a"),
			{put: many(3000)}, {put: many(4000), del: []string{"a"}}, gone(nil, "a"),
		}},
		{"named: deleted, the log compacted, then the ACK", typ, []string{"a", "b"}, []step{
			ask("", "a", "b"), want("a", "b"),
			del("a"), {put: many(3000)}, {put: many(4000)},
			ask("ack", "a", "b"), gone(pick(delta, nil, []string{"b"}), "a"),
		}},
		{"named: a reconnect that names a resource deleted since", typ, []string{"a", "b"}, []step{
			del("a"), ask("t-1", "a", "b"), gone(pick(delta, nil, []string{"b"}), "a"), // Delta: b's t-1 is current
		}},
		{"wildcard: one of two deleted", typ, []string{"a", "b"}, []step{
			ask(""), want("a", "b"), ask("ack"),
			del("a"), gone(pick(delta, nil, []string{"b"}), "a"), ask("ack"),
		}},
		{"wildcard: the last resource deleted", typ, []string{"a"}, []step{
			ask(""), want("a"), ask("ack"),
			del("a"), gone(nil, "a"), ask("ack"),
			put("b"), want("b"),
		}},
		{"wildcard: deleted before the stream ACKed", typ, []string{"a", "b"}, []step{
			ask(""), want("a", "b"),
			del("a"), ask("ack"), gone(pick(delta, nil, []string{"b"}), "a"),
		}},
	}
}

// pick is a when delta, else b.
func pick[T any](delta bool, a, b T) T {
	if delta {
		return a
	}
	return b
}

// A deleted resource reaches SotW streams of the full-state types, by name and by wildcard
// (grpc-go subscribes to its listener and cluster by name and learns of a deletion only from
// a response without them).
func TestSotwDeletion(t *testing.T) {
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType} {
		t.Run(typ[strings.LastIndex(typ, ".")+1:], func(t *testing.T) {
			run(t, deletionCases(typ, false), func(t *testing.T, r *rig) stepper { return r.sotw(t) })
		})
	}
}

// A deleted resource reaches Delta streams of every type in removed_resources.
func TestDeltaDeletion(t *testing.T) {
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType, resourcev3.EndpointType, resourcev3.RouteType} {
		t.Run(typ[strings.LastIndex(typ, ".")+1:], func(t *testing.T) {
			run(t, deletionCases(typ, true), func(t *testing.T, r *rig) stepper { return r.delta(t) })
		})
	}
}

func TestSameList(t *testing.T) {
	list := []string{"a", "b"}
	require.True(t, sameList(list, list), "the same slice")
	require.True(t, sameList(list, []string{"a", "b"}), "an equal list")
	require.False(t, sameList(list, list[:1]), "a prefix of the same slice")
	require.False(t, sameList(list, []string{"a", "c"}), "another name")
	require.True(t, sameList([]string{}, nil), "both empty")
}
