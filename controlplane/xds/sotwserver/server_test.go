package sotwserver

import (
	"context"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/meshchaos/meshchaos/controlplane/xds/watchcache"
)

// TestKeepIsSetResourceSubscription: for every kind of subscription (legacy wildcard, named,
// explicit wildcard, emptied after names), keeping it for a repeated list leaves it exactly as
// go-control-plane's SetResourceSubscription with that list does, its returned resources
// included (a response recorded some the set does not hold).
func TestKeepIsSetResourceSubscription(t *testing.T) {
	cases := []struct {
		name     string
		lists    [][]string // the requests before the repeat, the last one repeated
		returned map[string]string
	}{
		{"legacy wildcard", [][]string{{}}, map[string]string{"a": "1", "b": "1"}},
		{"named", [][]string{{"a", "b"}}, map[string]string{"a": "1", "c": "1"}},
		{"named after legacy wildcard", [][]string{{}, {"a"}}, map[string]string{"a": "1", "b": "1"}},
		{"explicit wildcard", [][]string{{"*", "a"}}, map[string]string{"a": "1", "z": "1"}},
		{"explicit wildcard after names", [][]string{{"a"}, {"*"}}, map[string]string{"a": "1", "z": "1"}},
		{"names after explicit wildcard", [][]string{{"*"}, {"a"}}, map[string]string{"a": "1", "z": "1"}},
		{"emptied after names", [][]string{{"a", "b"}, {}}, map[string]string{"a": "1"}},
		{"nothing returned", [][]string{{"a"}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			build := func() stream.Subscription {
				sub := stream.NewSotwSubscription(tc.lists[0], true)
				for _, l := range tc.lists[1:] {
					sub.SetResourceSubscription(l)
				}
				sub.SetReturnedResources(maps.Clone(tc.returned))
				return sub
			}
			last := tc.lists[len(tc.lists)-1]
			want, got := build(), build()
			want.SetResourceSubscription(slices.Clone(last))
			keepSubscription(&got)
			assert.True(t, reflect.DeepEqual(want, got), "kept %+v, go-control-plane made %+v", got, want)
		})
	}
}

func TestSameNames(t *testing.T) {
	list := []string{"a", "b"}
	assert.True(t, sameNames(list, list), "the same slice")
	assert.True(t, sameNames(list, []string{"a", "b"}), "an equal list")
	assert.True(t, sameNames(nil, []string{}), "both empty")
	assert.False(t, sameNames(list, []string{"b", "a"}), "another order is another request")
	assert.False(t, sameNames(list, list[:1]), "a name removed")
	assert.False(t, sameNames(nil, []string{"*"}), "wildcard after none")
}

// recorder is a cache that records the subscription of every watch it is asked for.
type recorder struct {
	*watchcache.Cache
	subs chan stream.Subscription
}

func (r *recorder) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	r.subs <- sub.(stream.Subscription)
	return r.Cache.CreateWatch(req, sub, ch)
}

// fakeStream is a SotW stream without gRPC.
type fakeStream struct {
	grpc.ServerStream
	ctx   context.Context
	reqs  chan *discovery.DiscoveryRequest
	resps chan *discovery.DiscoveryResponse
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) Recv() (*discovery.DiscoveryRequest, error) {
	select {
	case r := <-f.reqs:
		return r, nil
	case <-f.ctx.Done():
		return nil, io.EOF
	}
}

func (f *fakeStream) Send(r *discovery.DiscoveryResponse) error {
	select {
	case f.resps <- r:
		return nil
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

// open serves one stream by srv until the test ends.
func open(tb testing.TB, srv sotw.Server) *fakeStream {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeStream{ctx: ctx, reqs: make(chan *discovery.DiscoveryRequest), resps: make(chan *discovery.DiscoveryResponse, 16)}
	done := make(chan struct{})
	go func() { _ = srv.StreamHandler(f, resourcev3.AnyType); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
	return f
}

func (f *fakeStream) request(tb testing.TB, version, nonce string, names []string) {
	tb.Helper()
	select {
	case f.reqs <- &discovery.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, VersionInfo: version, ResponseNonce: nonce, ResourceNames: names}:
	case <-time.After(10 * time.Second):
		tb.Fatal("the server took no request for 10 s")
	}
}

func (f *fakeStream) response(tb testing.TB) *discovery.DiscoveryResponse {
	tb.Helper()
	select {
	case r := <-f.resps:
		return r
	case <-time.After(10 * time.Second):
		tb.Fatal("no response for 10 s")
		return nil
	}
}

func edsCache(tb testing.TB, names ...string) *watchcache.Cache {
	c := watchcache.New(resourcev3.EndpointType, "t-")
	res := map[string]types.Resource{}
	for _, n := range names {
		res[n] = &endpoint.ClusterLoadAssignment{ClusterName: n}
	}
	require.NoError(tb, c.UpdateResources(res, nil))
	return c
}

func setOf(sub stream.Subscription) uintptr {
	return reflect.ValueOf(sub.SubscribedResources()).Pointer()
}

// TestRepeatedNamesKeepTheSet: ACKs that repeat a stream's names (the same slice, or an equal
// list) are given the subscription set the names were first made into; a request that removes
// a name, or turns to wildcard, gets a new set that says so.
func TestRepeatedNamesKeepTheSet(t *testing.T) {
	rec := &recorder{Cache: edsCache(t, "a", "b", "c"), subs: make(chan stream.Subscription, 16)}
	f := open(t, New(context.Background(), rec, nil))
	names := []string{"a", "b"}
	f.request(t, "", "", names)
	first := <-rec.subs
	resp := f.response(t)
	require.Len(t, resp.GetResources(), 2)

	f.request(t, resp.GetVersionInfo(), resp.GetNonce(), names)
	f.request(t, resp.GetVersionInfo(), resp.GetNonce(), slices.Clone(names))
	for range 2 {
		acked := <-rec.subs
		assert.Equal(t, setOf(first), setOf(acked), "a repeated list keeps the set")
		assert.ElementsMatch(t, names, slices.Collect(maps.Keys(acked.SubscribedResources())))
	}

	f.request(t, resp.GetVersionInfo(), resp.GetNonce(), []string{"a"})
	removed := <-rec.subs
	assert.NotEqual(t, setOf(first), setOf(removed), "a name removed: a new set")
	assert.Equal(t, []string{"a"}, slices.Collect(maps.Keys(removed.SubscribedResources())))

	f.request(t, resp.GetVersionInfo(), resp.GetNonce(), []string{"*"})
	wild := <-rec.subs
	assert.True(t, wild.IsWildcard(), "an explicit wildcard after names")
	assert.Empty(t, wild.SubscribedResources())
	resp = f.response(t) // c is new to the stream
	assert.Len(t, resp.GetResources(), 3)
}

// TestStaleNonceIgnored: a request with a nonce other than the latest response's is ignored
// (no watch is made for it), as go-control-plane's server does.
func TestStaleNonceIgnored(t *testing.T) {
	rec := &recorder{Cache: edsCache(t, "a"), subs: make(chan stream.Subscription, 16)}
	f := open(t, New(context.Background(), rec, nil))
	f.request(t, "", "", []string{"a"})
	<-rec.subs
	resp := f.response(t)
	f.request(t, resp.GetVersionInfo(), "stale", []string{"a"})
	f.request(t, resp.GetVersionInfo(), resp.GetNonce(), []string{"a"})
	<-rec.subs // the ACK's
	assert.Empty(t, rec.subs, "the stale request made no watch")
}

// BenchmarkRepeatedACK1000: one SotW stream subscribed to 1000 CLAs ACKs again and again with
// the same names (the same slice, as the control plane's codec hands out a repeated list), as
// every proxy does after each endpoint change; by go-control-plane's server and by this one,
// both over a watchcache (the control plane's cache).
func BenchmarkRepeatedACK1000(b *testing.B) {
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|80||se-%d.bench.test", i)
	}
	servers := []struct {
		name string
		new  func(cachev3.ConfigWatcher) sotw.Server
	}{
		{"go-control-plane", func(c cachev3.ConfigWatcher) sotw.Server { return sotw.NewServer(context.Background(), c, nil) }},
		{"sotwserver", func(c cachev3.ConfigWatcher) sotw.Server { return New(context.Background(), c, nil) }},
	}
	for _, s := range servers {
		b.Run(s.name, func(b *testing.B) {
			f := open(b, s.new(edsCache(b, names...)))
			f.request(b, "", "", names)
			resp := f.response(b)
			require.Len(b, resp.GetResources(), len(names))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				f.request(b, resp.GetVersionInfo(), resp.GetNonce(), names)
			}
			// The server has taken the last ACK; one more makes sure it has handled it.
			f.request(b, resp.GetVersionInfo(), resp.GetNonce(), names)
			b.StopTimer()
			assert.Empty(b, f.resps, "an ACK of an unchanged subscription is not answered")
		})
	}
}

// entered is a cache that records when each watch's creation began.
type entered struct {
	*watchcache.Cache
	at chan time.Time
}

func (e *entered) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	e.at <- time.Now()
	return e.Cache.CreateWatch(req, sub, ch)
}

// TestResponseStart: a response the cache gives at once, in the watch's creation, starts when
// its request arrived (before the watch's creation: a scope generated on the way counts); a
// later one, a push to a watch an ACK made, starts when the stream takes it up, not when the
// ACK arrived (the idle time between is no push's).
func TestResponseStart(t *testing.T) {
	cache := &entered{Cache: edsCache(t, "a"), at: make(chan time.Time, 16)}
	starts := make(chan time.Time, 16)
	cb := serverv3.CallbackFuncs{StreamResponseFunc: func(ctx context.Context, _ int64, _ *discovery.DiscoveryRequest, _ *discovery.DiscoveryResponse) {
		start, ok := ResponseStart(ctx)
		assert.True(t, ok, "the callback's context carries the start")
		starts <- start
	}}
	f := open(t, New(context.Background(), cache, cb))
	f.request(t, "", "", []string{"a"})
	created := <-cache.at
	resp := f.response(t)
	assert.False(t, (<-starts).After(created), "the initial fetch starts at its request")

	f.request(t, resp.GetVersionInfo(), resp.GetNonce(), []string{"a"})
	<-cache.at // the ACK's watch: nothing to answer yet
	pushed := time.Now()
	require.NoError(t, cache.UpdateResource("a", &endpoint.ClusterLoadAssignment{ClusterName: "a",
		Endpoints: []*endpoint.LocalityLbEndpoints{{}}}))
	f.response(t)
	assert.False(t, (<-starts).Before(pushed), "the push starts when the stream takes it up")
}
