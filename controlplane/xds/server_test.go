package xds

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"istio.io/api/networking/v1alpha3"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshchaos/meshchaos/controlplane/gate"
	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/internal/heapstat"
	"github.com/meshchaos/meshchaos/controlplane/metrics"
	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/controlplane/regress"
)

// rig is an in-process control plane without informers: tests drive the model directly.
type rig struct {
	m      *model.Model
	caches *Caches
	pusher *Pusher
	server *Server
	gate   *gate.Gate
	met    *metrics.Metrics
	addr   string
}

func newRig(t testing.TB, quiet, max time.Duration, sw ...regress.Switch) *rig {
	t.Helper()
	return newRigWith(t, DefaultPushThrottle, quiet, max, sw...)
}

// newRigWith is newRig with a push throttle.
func newRigWith(t testing.TB, throttle int, quiet, max time.Duration, sw ...regress.Switch) *rig {
	t.Helper()
	return newRigLimited(t, Limits{PushThrottle: throttle}, quiet, max, sw...)
}

// newRigLimited is newRig with the server's limits.
func newRigLimited(t testing.TB, limits Limits, quiet, max time.Duration, sw ...regress.Switch) *rig {
	t.Helper()
	return newRigGeneration(t, limits, PerScope, quiet, max, sw...)
}

// newRigGeneration is newRigLimited with a generation mode.
func newRigGeneration(t testing.TB, limits Limits, gen Generation, quiet, max time.Duration, sw ...regress.Switch) *rig {
	t.Helper()
	set := regress.Set{}
	for _, s := range sw {
		set[s] = true
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &rig{m: model.New(model.Options{Regress: set, Logger: log}), caches: NewCaches("t-"), gate: gate.New(), met: metrics.New()}
	r.pusher = NewPusher(r.m, r.caches, PushOptions{Quiet: quiet, Max: max, Regress: set, Generation: gen, Logger: log, Metrics: r.met})
	ctx, cancel := context.WithCancel(context.Background())
	r.server = NewServerLimited(ctx, r.caches, r.pusher, r.gate, r.met, log, limits)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r.addr = l.Addr().String()
	done := make(chan struct{}, 2)
	go func() { _ = r.server.Serve(l); done <- struct{}{} }()
	go func() { r.pusher.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		r.server.Stop()
		<-done
		<-done
	})
	return r
}

// apply converts and applies a ServiceEntry "name" with host name.test and the given endpoint
// addresses, and hands the change to the pusher.
func (r *rig) apply(t testing.TB, name string, addrs ...string) {
	t.Helper()
	spec := &v1alpha3.ServiceEntry{Hosts: []string{name + ".test"}, Resolution: v1alpha3.ServiceEntry_STATIC,
		Ports: []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}}
	for _, a := range addrs {
		spec.Endpoints = append(spec.Endpoints, &v1alpha3.WorkloadEntry{Address: a})
	}
	conv, _, err := model.ConvertServiceEntry("ns", name, spec)
	require.NoError(t, err)
	r.pusher.Enqueue(r.m.SetServiceEntry("ns", name, time.Unix(0, 0), conv))
}

func (r *rig) start(t testing.TB) {
	r.pusher.Push(model.Change{Full: true, Reasons: []string{"initial"}})
	r.server.Synced()
	r.gate.Open("test", false)
}

func (r *rig) client(t testing.TB, id string, edsNames ...string) *adsclient.Client {
	t.Helper()
	c, err := adsclient.Dial(context.Background(), r.addr, id)
	require.NoError(t, err)
	require.NoError(t, c.SetNames(resourcev3.ClusterType, nil))
	if len(edsNames) > 0 {
		require.NoError(t, c.SetNames(resourcev3.EndpointType, edsNames))
	}
	go c.Run()
	t.Cleanup(c.Close)
	return c
}

func count(c *adsclient.Client, typeURL string) int {
	n := 0
	for _, r := range c.Received() {
		if r.TypeURL == typeURL {
			n++
		}
	}
	return n
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func endpointsOf(t testing.TB, c *adsclient.Client, name string) int {
	a, ok := c.Resources(resourcev3.EndpointType)[name]
	if !ok {
		return -1
	}
	var cla endpoint.ClusterLoadAssignment
	require.NoError(t, a.UnmarshalTo(&cla))
	n := 0
	for _, l := range cla.GetEndpoints() {
		n += len(l.GetLbEndpoints())
	}
	return n
}

func TestGateRefusesStreamsUntilOpen(t *testing.T) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	c, err := adsclient.Dial(context.Background(), r.addr, "sidecar~a")
	require.NoError(t, err)
	_ = c.Subscribe(resourcev3.ClusterType) // may fail with EOF: the server refused the stream
	err = c.Run()
	require.Equal(t, codes.Unavailable, grpcstatus.Code(err), "%v", err)
	c.CloseNoRun()
	require.Equal(t, 1.0, testutil.ToFloat64(r.met.StreamsRefused))

	r.apply(t, "a", "10.0.0.1")
	r.start(t)
	c2 := r.client(t, "sidecar~b")
	eventually(t, "CDS", func() bool { return len(c2.Resources(resourcev3.ClusterType)) == 1 })
}

func TestDebouncedEndpointChangesAreOneEDSPush(t *testing.T) {
	r := newRig(t, 50*time.Millisecond, 10*time.Second)
	r.apply(t, "a", "10.0.0.1")
	r.apply(t, "b", "10.0.0.2")
	r.start(t)
	ca, cb := model.ClusterName("a.test", 80), model.ClusterName("b.test", 80)
	c := r.client(t, "sidecar~a", ca, cb)
	eventually(t, "initial EDS", func() bool { return endpointsOf(t, c, ca) == 1 && endpointsOf(t, c, cb) == 1 })
	cds, eds := count(c, resourcev3.ClusterType), count(c, resourcev3.EndpointType)

	// Five endpoint changes of "a" inside the quiet period: one EDS push, for "a" only.
	for i := 2; i <= 6; i++ {
		addrs := []string{}
		for j := 1; j <= i; j++ {
			addrs = append(addrs, fmt.Sprintf("10.0.0.%d", j))
		}
		r.apply(t, "a", addrs...)
	}
	eventually(t, "EDS update", func() bool { return endpointsOf(t, c, ca) == 6 })
	// A marker: one change of "b" after a's push. Pushes reach the client in order, so once the
	// marker has arrived, every push made before it has been counted.
	r.apply(t, "b", "10.0.0.2", "10.0.0.3")
	eventually(t, "the marker's EDS", func() bool { return endpointsOf(t, c, cb) == 2 })
	require.Equal(t, 2.0, testutil.ToFloat64(r.met.Pushes.WithLabelValues("eds")), "a's five changes merged into one push, then the marker's")
	require.Equal(t, 1.0, testutil.ToFloat64(r.met.Pushes.WithLabelValues("full")), "only the initial full push")
	require.Equal(t, cds, count(c, resourcev3.ClusterType), "no CDS on an endpoint change")
	require.Equal(t, eds+2, count(c, resourcev3.EndpointType), "one EDS response for a's changes, one for the marker")
	received := c.Received()
	for _, resp := range received[len(received)-2:] {
		require.Len(t, resp.Resources, 1, "an EDS response carries only the changed cluster")
	}
	require.Equal(t, 1, testutil.CollectAndCount(r.met.DebounceTime))

	// A new service is a full push: CDS is resent.
	r.apply(t, "c", "10.0.0.9")
	eventually(t, "CDS with c", func() bool { return len(c.Resources(resourcev3.ClusterType)) == 3 })
	require.Equal(t, 2.0, testutil.ToFloat64(r.met.Pushes.WithLabelValues("full")))
	// Convergence (push → ACK) was observed for the pushes.
	eventually(t, "convergence samples", func() bool { return histCount(t, r.met) >= 2 })
}

func histCount(t testing.TB, m *metrics.Metrics) uint64 {
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "pilot_proxy_convergence_time" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func TestDebounceMaxBoundsTheWait(t *testing.T) {
	r := newRig(t, 100*time.Millisecond, 300*time.Millisecond)
	r.apply(t, "a", "10.0.0.1")
	r.start(t)
	// Keep changing endpoints every 20 ms for 1 s: the quiet period never elapses, the max does.
	stop := time.Now().Add(time.Second)
	for i := 2; time.Now().Before(stop); i++ {
		r.apply(t, "a", fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))
		time.Sleep(20 * time.Millisecond)
	}
	pushes := testutil.ToFloat64(r.met.Pushes.WithLabelValues("eds"))
	require.GreaterOrEqual(t, pushes, 2.0, "max debounce must force pushes during a storm")
	require.LessOrEqual(t, pushes, 6.0, "but merge events")
}

// nackRig is a started rig with service "a" and a raw ADS stream to it (for NACKs, which
// adsclient never sends).
func nackRig(t *testing.T) (*rig, discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	r.apply(t, "a", "10.0.0.1")
	r.start(t)
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // Recv fails, not hangs
	t.Cleanup(cancel)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	return r, stream
}

func TestNACKIsCountedAndPushesGoOn(t *testing.T) {
	r, stream := nackRig(t)
	node := &core.Node{Id: "sidecar~nack"}
	require.NoError(t, stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	require.NoError(t, stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType,
		ResponseNonce: resp.GetNonce(), ErrorDetail: &status.Status{Code: 3, Message: "rejected for the test"}}))
	eventually(t, "NACK counted", func() bool { return testutil.ToFloat64(r.met.Rejects.WithLabelValues("cds")) == 1 })
	// The next change is still pushed.
	r.apply(t, "b", "10.0.0.2")
	for {
		resp, err = stream.Recv()
		require.NoError(t, err)
		if len(resp.GetResources()) == 2 {
			break
		}
		require.NoError(t, stream.Send(&discovery.DiscoveryRequest{TypeUrl: resourcev3.ClusterType,
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}))
	}
	st := r.server.Proxies()
	require.Len(t, st, 1)
	require.Equal(t, 1, st[0].Types["cds"].NACKs)
}

// A NACK gets no answer: the rejected config is not resent (a proxy would reject it again, in a
// loop), neither for a NACK of the first response (Envoy sends no version: it accepted none) nor
// for a later one (Envoy sends the last accepted version); the next response is the next change.
func TestNACKedConfigIsNotResent(t *testing.T) {
	r, stream := nackRig(t)
	send := func(version, nonce string, nack bool) {
		req := &discovery.DiscoveryRequest{Node: &core.Node{Id: "sidecar~nack-loop"}, TypeUrl: resourcev3.ClusterType,
			VersionInfo: version, ResponseNonce: nonce}
		if nack {
			req.ErrorDetail = &status.Status{Code: 3, Message: "rejected for the test"}
		}
		require.NoError(t, stream.Send(req))
	}
	recv := func() *discovery.DiscoveryResponse {
		resp, err := stream.Recv()
		require.NoError(t, err)
		return resp
	}
	send("", "", false)
	first := recv()
	require.Len(t, first.GetResources(), 1)
	send("", first.GetNonce(), true) // NACK of the first response: no accepted version
	r.apply(t, "b", "10.0.0.2")
	second := recv()
	require.Len(t, second.GetResources(), 2, "the first response after a NACK is the next change, not the rejected config again")
	send(second.GetVersionInfo(), second.GetNonce(), false)
	r.apply(t, "c", "10.0.0.3")
	third := recv()
	require.Len(t, third.GetResources(), 3)
	send(second.GetVersionInfo(), third.GetNonce(), true) // NACK with the last accepted version
	r.apply(t, "d", "10.0.0.4")
	require.Len(t, recv().GetResources(), 4, "the first response after a NACK is the next change")

	st := r.server.Proxies()
	require.Len(t, st, 1)
	require.Equal(t, 2, st[0].Types["cds"].NACKs)
	require.Equal(t, 2.0, testutil.ToFloat64(r.met.Rejects.WithLabelValues("cds")))
}

// A DNS ServiceEntry's endpoints are inline in its STRICT_DNS cluster: an endpoint-only change
// must reach the proxies through CDS (istiod does a full push), not an EDS push nobody watches.
func TestDNSServiceEntryEndpointChangeReachesProxies(t *testing.T) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	apply := func(addr string) model.Change {
		conv, _, err := model.ConvertServiceEntry("ns", "dns", &v1alpha3.ServiceEntry{Hosts: []string{"dns.test"},
			Resolution: v1alpha3.ServiceEntry_DNS, Ports: []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
			Endpoints: []*v1alpha3.WorkloadEntry{{Address: addr}}})
		require.NoError(t, err)
		ch := r.m.SetServiceEntry("ns", "dns", time.Unix(0, 0), conv)
		r.pusher.Enqueue(ch)
		return ch
	}
	apply("dns-a.test")
	r.start(t)
	c := r.client(t, "sidecar~dns")
	inline := func() string {
		a, ok := c.Resources(resourcev3.ClusterType)["outbound|80||dns.test"]
		if !ok {
			return ""
		}
		var cl cluster.Cluster
		require.NoError(t, a.UnmarshalTo(&cl))
		return cl.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
	}
	eventually(t, "the DNS cluster", func() bool { return inline() == "dns-a.test" })
	require.False(t, apply("dns-b.test").Full, "the model reports an endpoint-only change")
	eventually(t, "the DNS cluster with the new endpoint", func() bool { return inline() == "dns-b.test" })
}

func TestDeltaADS(t *testing.T) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	r.apply(t, "a", "10.0.0.1")
	r.apply(t, "b", "10.0.0.2")
	r.start(t)
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(context.Background())
	require.NoError(t, err)
	node := &core.Node{Id: "sidecar~delta"}
	ca, cb := model.ClusterName("a.test", 80), model.ClusterName("b.test", 80)
	require.NoError(t, stream.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, resourcev3.ClusterType, resp.GetTypeUrl())
	require.Len(t, resp.GetResources(), 2)
	require.NoError(t, stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: resp.GetNonce()}))
	require.NoError(t, stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType,
		ResourceNamesSubscribe: []string{ca, cb}}))
	resp, err = stream.Recv()
	require.NoError(t, err)
	require.Equal(t, resourcev3.EndpointType, resp.GetTypeUrl())
	require.Len(t, resp.GetResources(), 2)
	require.NoError(t, stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: resp.GetNonce()}))

	// An endpoint change of "a": one delta response with only "a"'s CLA.
	r.apply(t, "a", "10.0.0.1", "10.0.0.3")
	resp, err = stream.Recv()
	require.NoError(t, err)
	require.Equal(t, resourcev3.EndpointType, resp.GetTypeUrl())
	require.Len(t, resp.GetResources(), 1)
	require.Equal(t, ca, resp.GetResources()[0].GetName())
	require.NoError(t, stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: resp.GetNonce()}))

	// Removing a service: the delta CDS response removes it.
	r.pusher.Enqueue(r.m.DeleteServiceEntry("ns", "b"))
	resp, err = stream.Recv()
	require.NoError(t, err)
	for resp.GetTypeUrl() != resourcev3.ClusterType {
		resp, err = stream.Recv()
		require.NoError(t, err)
	}
	require.Contains(t, resp.GetRemovedResources(), cb)
}

// envoyWithListeners starts a rig serving a.test and an Envoy-like client holding its LDS.
func envoyWithListeners(t *testing.T) (*rig, *adsclient.Client) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	r.apply(t, "a", "10.0.0.1")
	r.start(t)
	envoy := r.client(t, "sidecar~envoy")
	require.NoError(t, envoy.SetNames(resourcev3.ListenerType, nil))
	eventually(t, "envoy LDS", func() bool { return len(envoy.Resources(resourcev3.ListenerType)) == 1 })
	return r, envoy
}

// grpcListeners connects a proxyless gRPC client asking for the listeners names.
func grpcListeners(t *testing.T, r *rig, names ...string) *adsclient.Client {
	g, err := adsclient.Dial(context.Background(), r.addr, "grpc~client")
	require.NoError(t, err)
	require.NoError(t, g.SetNames(resourcev3.ListenerType, names))
	go g.Run()
	t.Cleanup(g.Close)
	return g
}

func TestProxylessAndEnvoyListeners(t *testing.T) {
	r, envoy := envoyWithListeners(t)
	require.Contains(t, envoy.Resources(resourcev3.ListenerType), ListenerName(80), "Envoy gets only outbound listeners")

	g := grpcListeners(t, r, "a.test:80")
	eventually(t, "gRPC LDS", func() bool { return len(g.Resources(resourcev3.ListenerType)) == 1 })
	require.Contains(t, g.Resources(resourcev3.ListenerType), "a.test:80", "a subset request is answered")
}

// A scope's API listeners are generated once a proxyless client of the scope asks for listeners
// (Envoy never reads them), then kept up to date by every generation.
func TestAPIListenersGeneratedOnceAProxylessClientAsks(t *testing.T) {
	r, _ := envoyWithListeners(t)
	scopes := r.caches.Scopes()
	require.Len(t, scopes, 1)
	sc := scopes[0]
	assert.Zero(t, sc.APIListeners.NumResources(), "no API listeners while only Envoy is connected")
	pushes := sc.Pushes()

	g := grpcListeners(t, r, "a.test:80", "b.test:80")
	eventually(t, "gRPC LDS", func() bool { return len(g.Resources(resourcev3.ListenerType)) == 1 })
	require.Len(t, r.caches.Scopes(), 1, "the proxyless client shares the Envoy's scope")
	assert.Equal(t, pushes, sc.Pushes(), "filling the API listeners is not a generation of the scope")

	r.apply(t, "b", "10.0.0.2")
	eventually(t, "gRPC LDS after a push", func() bool { return len(g.Resources(resourcev3.ListenerType)) == 2 })
	assert.Equal(t, 2, sc.APIListeners.NumResources())
}

// TestQuadraticScopeMemory: what the switch retains after a full push is at least one 80-byte
// config key per (scope, service) pair, as Istio 1.6's per-service SidecarScopes; the plain
// build retains a small fraction of that (its generated resources only).
func TestQuadraticScopeMemory(t *testing.T) {
	const n = 400
	retained := func(sw ...regress.Switch) uint64 {
		r := newRig(t, time.Millisecond, time.Second, sw...)
		for i := 0; i < n; i++ {
			r.apply(t, fmt.Sprintf("s%d", i), "10.0.0.1")
		}
		before := heapstat.Live()
		r.pusher.Push(model.Change{Full: true})
		after := heapstat.Live()
		runtime.KeepAlive(r)
		if after < before {
			return 0
		}
		return after - before
	}
	const pairKeys = n * n * 80
	require.GreaterOrEqual(t, retained(regress.QuadraticScope), uint64(pairKeys), "quadratic-scope retains n² config keys")
	require.Less(t, retained(), uint64(pairKeys/4), "the plain build retains no per-pair state")
}

func TestQuadraticScopeIsQuadratic(t *testing.T) {
	for _, tc := range []struct {
		sw   []regress.Switch
		want func(n int) int
	}{{nil, func(int) int { return 0 }}, {[]regress.Switch{regress.QuadraticScope}, func(n int) int { return n * n }}} {
		r := newRig(t, time.Millisecond, time.Second, tc.sw...)
		for _, n := range []int{10, 40} {
			for i := 0; i < n; i++ {
				r.apply(t, fmt.Sprintf("s%d", i), "10.0.0.1")
			}
			r.pusher.Push(model.Change{Full: true})
			require.Equal(t, tc.want(n), r.pusher.ScopeSize())
		}
	}
}

// The SotW and the Delta server each number their streams from 1: a SotW and a Delta stream
// of the same number are two proxies, and the Delta one's end leaves the SotW one's state.
func TestSotWAndDeltaStreamsOfTheSameNumberAreTwoProxies(t *testing.T) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	r.apply(t, "a", "10.0.0.1")
	r.start(t)
	r.client(t, "sidecar~sotw")
	eventually(t, "the SotW proxy listed", func() bool { return len(r.server.Proxies()) == 1 })

	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "sidecar~delta"}, TypeUrl: resourcev3.ClusterType}))
	_, err = stream.Recv()
	require.NoError(t, err)
	ids := func() []string {
		var out []string
		for _, p := range r.server.Proxies() {
			out = append(out, fmt.Sprintf("%s#%d", p.ID, p.StreamID))
		}
		slices.Sort(out)
		return out
	}
	eventually(t, "both proxies listed", func() bool { return len(r.server.Proxies()) == 2 })
	assert.Equal(t, []string{"sidecar~delta#1", "sidecar~sotw#1"}, ids(), "each stream is number 1 of its server")

	cancel()
	eventually(t, "the Delta proxy gone", func() bool { return len(r.server.Proxies()) == 1 })
	assert.Equal(t, []string{"sidecar~sotw#1"}, ids(), "the SotW proxy's state outlives the Delta stream's end")
}
