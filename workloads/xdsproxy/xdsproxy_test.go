package xdsproxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results/respflags"
	"github.com/meshchaos/meshchaos/workloads/xdsproxy"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

const wait = 5 * time.Second

// backend is an HTTP server on loopback that answers with its name.
func backend(t *testing.T, name string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		fmt.Fprintf(w, "%s %s %s", name, r.Host, r.URL.Path)
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string { return xdstest.FreeAddr(t) }

func startProxy(t *testing.T, xds *xdstest.Server, delta bool) *xdsproxy.Proxy {
	t.Helper()
	return startProxyWith(t, xdsproxy.Options{XDSAddress: xds.Addr, Delta: delta})
}

// startProxyWith starts a proxy with opts, filling in a node, an admin listener and a short
// backoff where opts leaves them unset.
func startProxyWith(t *testing.T, opts xdsproxy.Options) *xdsproxy.Proxy {
	t.Helper()
	if opts.NodeID == "" {
		opts.NodeID, opts.Cluster = "sidecar~127.0.0.1~app-0.default~default.svc.cluster.local", "app"
	}
	if opts.AdminAddress == "" {
		opts.AdminAddress = "127.0.0.1:0"
	}
	if opts.BackoffBase == 0 {
		opts.BackoffBase, opts.BackoffMax = 20*time.Millisecond, 200*time.Millisecond
	}
	p, err := xdsproxy.New(opts)
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(p.Close)
	return p
}

type reply struct {
	code    int
	flag    string
	backend string
	body    string
	closes  bool // the response says Connection: close
}

var client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}}

func get(t *testing.T, addr, host, path string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	require.NoError(t, err)
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return reply{code: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, flag: resp.Header.Get(respflags.Header), backend: resp.Header.Get("X-Backend"), body: string(b)}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, wait, 10*time.Millisecond, what)
}

func adminGet(t *testing.T, p *xdsproxy.Proxy, path string) (int, string) {
	t.Helper()
	resp, err := client.Get("http://" + p.AdminAddr() + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// world is a typical configuration: listener L on addr, routes by host to clusters a and b.
func world(addr string, aAddrs []string, bAddrs []string) []types.Resource {
	_, port, _ := net.SplitHostPort(addr)
	return []types.Resource{
		xdstest.EDSCluster("outbound|80||a.test", "a"),
		xdstest.EDSCluster("outbound|80||b.test", "b"),
		xdstest.CLA("a", aAddrs...),
		xdstest.CLA("b", bAddrs...),
		xdstest.HTTPListener("L", addr, "routes"),
		xdstest.RouteConfig("routes",
			xdstest.VirtualHost("a", []string{"a.test", "a.test:" + port}, xdstest.PrefixRoute("/", "outbound|80||a.test")),
			xdstest.VirtualHost("b", []string{"b.test", "b.test:" + port},
				xdstest.PrefixRoute("/missing", "outbound|80||nowhere.test"),
				xdstest.PrefixRoute("/", "outbound|80||b.test")),
		),
	}
}

func TestSotwRoutesByHostAndRoundRobin(t *testing.T) {
	xds := xdstest.Start(t)
	a1, a2, b1 := backend(t, "a1"), backend(t, "a2"), backend(t, "b1")
	addr := xdstest.FreeAddr(t)
	xds.Set(t, "v1", world(addr, []string{a1, a2}, []string{b1})...)
	p := startProxy(t, xds, false)
	eventually(t, "proxy ready", p.Ready)

	_, port, _ := net.SplitHostPort(addr)
	seen := map[string]int{}
	for range 6 {
		r := get(t, addr, "a.test", "/x")
		require.Equal(t, 200, r.code, r.body)
		seen[r.backend]++
	}
	assert.Equal(t, map[string]int{"a1": 3, "a2": 3}, seen, "round robin over both healthy endpoints")
	r := get(t, addr, "b.test:"+port, "/hello")
	assert.Equal(t, "b1", r.backend, "host:port form matches its own domain")
	assert.Equal(t, "b1 b.test:"+port+" /hello", r.body, "Host and path pass through")
	r = get(t, addr, "B.TEST", "/hello")
	assert.Equal(t, "b1", r.backend, "domains match case-insensitively")

	// ACKs carry the accepted version and the response nonce, per type.
	acked := map[string]bool{}
	for _, req := range xds.Requests() {
		if req.GetVersionInfo() == "v1" && req.GetResponseNonce() != "" && req.GetErrorDetail() == nil {
			acked[req.GetTypeUrl()] = true
		}
	}
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType} {
		assert.True(t, acked[typ], "ACK for %s", typ)
	}
	// EDS was requested by the clusters' service names only.
	var edsNames []string
	for _, req := range xds.Requests() {
		if req.GetTypeUrl() == resourcev3.EndpointType {
			edsNames = req.GetResourceNames()
		}
	}
	assert.Equal(t, []string{"a", "b"}, edsNames)

	code, dump := adminGet(t, p, "/config_dump")
	require.Equal(t, 200, code)
	assert.Contains(t, dump, "outbound|80||a.test")
	assert.Contains(t, dump, "dynamic_active_clusters")
	var parsed map[string]any
	require.NoError(t, json.Unmarshal([]byte(dump), &parsed), "config_dump is JSON")
}

func TestResponseFlags(t *testing.T) {
	xds := xdstest.Start(t)
	b1 := backend(t, "b1")
	addr := xdstest.FreeAddr(t)
	// a has no endpoints (UH); b's route /missing names a cluster that does not exist (NC);
	// c's only endpoint refuses connections (UF); unknown hosts and paths have no route (NR).
	res := world(addr, nil, []string{b1})
	res = append(res, xdstest.EDSCluster("c", "c"), xdstest.CLA("c", closedAddr(t)))
	res[len(res)-3] = xdstest.RouteConfig("routes",
		xdstest.VirtualHost("a", []string{"a.test"}, xdstest.PrefixRoute("/", "outbound|80||a.test")),
		xdstest.VirtualHost("b", []string{"b.test"}, xdstest.PrefixRoute("/missing", "outbound|80||nowhere.test"), xdstest.PrefixRoute("/ok", "outbound|80||b.test")),
		xdstest.VirtualHost("c", []string{"c.test"}, xdstest.PrefixRoute("/", "c")),
	)
	xds.Set(t, "v1", res...)
	p := startProxy(t, xds, false)
	eventually(t, "proxy ready", p.Ready)

	cases := []struct {
		host, path string
		code       int
		flag, body string
	}{
		{"nobody.test", "/", 404, respflags.NoRouteFound, ""},
		{"b.test", "/elsewhere", 404, respflags.NoRouteFound, ""},
		{"b.test", "/missing", 503, respflags.NoClusterFound, ""},
		{"a.test", "/", 503, respflags.NoHealthyUpstream, "no healthy upstream"},
		{"c.test", "/", 503, respflags.UpstreamConnectionFailure, "upstream connect error or disconnect/reset before headers. reset reason: connection failure"},
	}
	for _, c := range cases {
		r := get(t, addr, c.host, c.path)
		assert.Equal(t, c.code, r.code, "%s%s", c.host, c.path)
		assert.Equal(t, c.flag, r.flag, "%s%s", c.host, c.path)
		assert.Equal(t, c.body, r.body, "%s%s", c.host, c.path)
	}
	ok := get(t, addr, "b.test", "/ok")
	assert.Equal(t, 200, ok.code)
	assert.Empty(t, ok.flag, "upstream replies carry no flag")

	st := p.Stats()
	assert.EqualValues(t, 2, st["http.response_flags.NR"])
	assert.EqualValues(t, 1, st["http.response_flags.NC"])
	assert.EqualValues(t, 1, st["http.response_flags.UH"])
	assert.EqualValues(t, 1, st["http.response_flags.UF"])
	assert.EqualValues(t, 6, st["http.downstream_rq_total"])
	assert.EqualValues(t, 3, st["http.downstream_rq_5xx"])
	_, text := adminGet(t, p, "/stats")
	assert.Contains(t, text, "http.response_flags.UF: 1\n")
	assert.Contains(t, text, "control_plane.connected_state: 1\n")
}

func TestRetryOnConnectFailureUsesNextEndpoint(t *testing.T) {
	xds := xdstest.Start(t)
	good := backend(t, "good")
	addr := xdstest.FreeAddr(t)
	xds.Set(t, "v1",
		xdstest.EDSCluster("a", "a"), xdstest.CLA("a", closedAddr(t), good),
		xdstest.InlineHTTPListener("L", addr, xdstest.RouteConfig("inline",
			xdstest.VirtualHost("all", []string{"*"}, xdstest.WithRetry(xdstest.PrefixRoute("/", "a"), "connect-failure", 2)))),
	)
	p := startProxy(t, xds, false)
	eventually(t, "proxy ready", p.Ready)
	for range 4 {
		r := get(t, addr, "anything", "/")
		assert.Equal(t, 200, r.code, r.body)
	}
	assert.Positive(t, p.Stats()["cluster_manager.upstream_cx_connect_fail"], "some attempts hit the dead endpoint")
}

// TestRetriesExhaustedAddURX: when every attempt the route's retry policy allows failed to
// connect, the local reply carries URX beside UF, as Envoy's response flags; without a retry
// policy it is UF alone. The proxy's flag counters count each flag.
func TestRetriesExhaustedAddURX(t *testing.T) {
	xds := xdstest.Start(t)
	withRetry, without := xdstest.FreeAddr(t), xdstest.FreeAddr(t)
	xds.Set(t, "v1",
		xdstest.EDSCluster("dead", "dead"), xdstest.CLA("dead", closedAddr(t)),
		xdstest.InlineHTTPListener("R", withRetry, xdstest.RouteConfig("r",
			xdstest.VirtualHost("all", []string{"*"}, xdstest.WithRetry(xdstest.PrefixRoute("/", "dead"), "connect-failure", 2)))),
		xdstest.InlineHTTPListener("N", without, xdstest.RouteConfig("n",
			xdstest.VirtualHost("all", []string{"*"}, xdstest.PrefixRoute("/", "dead")))),
	)
	p := startProxy(t, xds, false)
	eventually(t, "proxy ready", p.Ready)
	r := get(t, withRetry, "x", "/")
	assert.Equal(t, 503, r.code, r.body)
	assert.Equal(t, "UF,URX", r.flag)
	r = get(t, without, "x", "/")
	assert.Equal(t, 503, r.code, r.body)
	assert.Equal(t, "UF", r.flag)
	assert.Equal(t, 3+1, int(p.Stats()["cluster_manager.upstream_cx_connect_fail"]), "three attempts, then one")
}

func TestReadyOnlyAfterClustersWarmAndListeners(t *testing.T) {
	xds := xdstest.Start(t)
	a1 := backend(t, "a1")
	addr := xdstest.FreeAddr(t)
	p := startProxy(t, xds, false)

	// No configuration at all: not ready, and Wait times out with a non-nil error.
	code, body := adminGet(t, p, "/ready")
	assert.Equal(t, 503, code)
	assert.Contains(t, body, "PRE_INITIALIZING")
	err := xdsproxy.Wait(context.Background(), p.AdminAddr(), 200*time.Millisecond, 20*time.Millisecond)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not ready")

	// Clusters whose endpoints have not arrived keep initialization waiting, and LDS is not
	// requested before the initial clusters are warm (Envoy's order).
	res := world(addr, []string{a1}, []string{a1})
	withoutB := []types.Resource{res[0], res[1], res[2], res[4], res[5]}
	xds.Set(t, "v1", withoutB...)
	eventually(t, "cluster a warm, b warming", func() bool {
		return p.Stats()["cluster_manager.warming_clusters"] == 1 && p.Stats()["cluster_manager.active_clusters"] == 1
	})
	// The proxy has processed everything it was sent for v1 once it ACKed the endpoints.
	eventually(t, "EDS v1 ACKed", func() bool { return acked(xds, resourcev3.EndpointType, "v1") })
	assert.False(t, p.Ready())
	for _, req := range xds.Requests() {
		assert.NotEqual(t, resourcev3.ListenerType, req.GetTypeUrl(), "LDS requested before initial clusters warmed")
	}

	xds.Set(t, "v2", res...)
	require.NoError(t, xdsproxy.Wait(context.Background(), p.AdminAddr(), wait, 10*time.Millisecond))
	code, body = adminGet(t, p, "/ready")
	assert.Equal(t, 200, code)
	assert.Equal(t, "LIVE\n", body)
	assert.Equal(t, 200, get(t, addr, "a.test", "/").code)
}

func TestUpdatedClusterServesOldVersionUntilWarm(t *testing.T) {
	xds := xdstest.Start(t)
	v1, v2 := backend(t, "v1"), backend(t, "v2")
	addr := xdstest.FreeAddr(t)
	base := xdstest.InlineHTTPListener("L", addr, xdstest.RouteConfig("inline",
		xdstest.VirtualHost("all", []string{"*"}, xdstest.PrefixRoute("/new", "new"), xdstest.PrefixRoute("/", "a"))))
	xds.Set(t, "1", xdstest.EDSCluster("a", "a-v1"), xdstest.CLA("a-v1", v1), base)
	p := startProxy(t, xds, false)
	eventually(t, "proxy ready", p.Ready)
	require.Equal(t, "v1", get(t, addr, "x", "/").backend)

	// Cluster a now reads assignment a-v2, which the server does not have yet; cluster "new" is
	// added without endpoints either. Both warm: a keeps serving v1, "new" is not there yet.
	xds.Set(t, "2", xdstest.EDSCluster("a", "a-v2"), xdstest.EDSCluster("new", "new"), xdstest.CLA("a-v1", v1), base)
	eventually(t, "two clusters warming", func() bool { return p.Stats()["cluster_manager.warming_clusters"] == 2 })
	for range 3 {
		assert.Equal(t, "v1", get(t, addr, "x", "/").backend, "old version serves while the update warms")
	}
	r := get(t, addr, "x", "/new")
	assert.Equal(t, 503, r.code)
	assert.Equal(t, respflags.NoClusterFound, r.flag, "a warming new cluster is not routable yet")
	_, dump := adminGet(t, p, "/config_dump")
	assert.Contains(t, dump, "dynamic_warming_clusters")

	xds.Set(t, "3", xdstest.EDSCluster("a", "a-v2"), xdstest.EDSCluster("new", "new"), xdstest.CLA("a-v2", v2), xdstest.CLA("new", v1), base)
	eventually(t, "a serves v2", func() bool { return get(t, addr, "x", "/").backend == "v2" })
	assert.Equal(t, 200, get(t, addr, "x", "/new").code)
	assert.EqualValues(t, 0, p.Stats()["cluster_manager.warming_clusters"])
}

func TestSotwOmissionDeletesClustersAndListeners(t *testing.T) {
	xds := xdstest.Start(t)
	b1 := backend(t, "b1")
	addr, addr2 := xdstest.FreeAddr(t), xdstest.FreeAddr(t)
	res := world(addr, []string{b1}, []string{b1})
	second := xdstest.InlineHTTPListener("L2", addr2, xdstest.RouteConfig("r2", xdstest.VirtualHost("all", []string{"*"}, xdstest.PrefixRoute("/", "outbound|80||b.test"))))
	xds.Set(t, "1", append(res, second)...)
	p := startProxy(t, xds, false)
	eventually(t, "proxy ready", p.Ready)
	require.Equal(t, 200, get(t, addr, "b.test", "/").code)
	require.Equal(t, 200, get(t, addr2, "b.test", "/").code)

	// Version 2 omits cluster b and listener L2.
	xds.Set(t, "2", res[0], res[2], res[4], res[5])
	eventually(t, "b deleted", func() bool { return get(t, addr, "b.test", "/").flag == respflags.NoClusterFound })
	eventually(t, "L2 closed", func() bool {
		c, err := net.DialTimeout("tcp", addr2, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	assert.Equal(t, 200, get(t, addr, "a.test", "/").code, "what stayed keeps working")
}

func TestKeepsLastConfigWhileServerIsDownAndResyncs(t *testing.T) {
	xds := xdstest.Start(t)
	v1, v2 := backend(t, "v1"), backend(t, "v2")
	addr := xdstest.FreeAddr(t)
	xds.Set(t, "1", world(addr, []string{v1}, []string{v1})...)
	path := startRelay(t, xds.Addr) // counts the proxy's connection attempts
	p := startProxyWith(t, xdsproxy.Options{XDSAddress: path.Addr})
	eventually(t, "proxy ready", p.Ready)

	stopped := time.Now()
	xds.Stop()
	eventually(t, "disconnected", func() bool { return p.Stats()["control_plane.connected_state"] == 0 })
	for range 5 {
		r := get(t, addr, "a.test", "/")
		assert.Equal(t, 200, r.code, "last config serves while the control plane is down")
		assert.Equal(t, "v1", r.backend)
	}
	eventually(t, "several failed reconnects", func() bool { return len(path.acceptsSince(stopped)) >= 3 })
	assert.True(t, p.Ready(), "/ready stays 200 once initialized")

	// A restarted server (empty cache, as after an OOM kill) first receives the versions the
	// proxy holds; once it has a snapshot the proxy converges to it.
	xds.Cache.ClearSnapshot(xdstest.Group)
	before := len(xds.Requests())
	xds.Restart(t)
	eventually(t, "reconnected", func() bool { return len(xds.Requests()) > before })
	var resent *discoveryv3.DiscoveryRequest
	for _, r := range xds.Requests()[before:] {
		if r.GetTypeUrl() == resourcev3.ClusterType {
			resent = r
			break
		}
	}
	require.NotNil(t, resent)
	assert.Equal(t, "1", resent.GetVersionInfo(), "reconnect sends the last accepted version")
	assert.Empty(t, resent.GetResponseNonce(), "a new stream starts without a nonce")
	assert.Equal(t, 200, get(t, addr, "a.test", "/").code, "still serving before the new server answers")

	xds.Set(t, "2", world(addr, []string{v2}, []string{v2})...)
	eventually(t, "converged to v2", func() bool { return get(t, addr, "a.test", "/").backend == "v2" })
	assert.EqualValues(t, 1, p.Stats()["control_plane.connected_state"])
	assert.GreaterOrEqual(t, p.Stats()["control_plane.streams_total"], int64(2))
}

func TestNackInvalidResourceKeepsOldConfig(t *testing.T) {
	xds := xdstest.Start(t)
	v1, v2 := backend(t, "v1"), backend(t, "v2")
	addr := xdstest.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	xds.Set(t, "1", world(addr, []string{v1}, []string{v1})...)
	p := startProxy(t, xds, false)
	eventually(t, "proxy ready", p.Ready)

	// Version 2: the route config repeats a domain (Envoy rejects it) and an endpoint address
	// is not an IP (Envoy: malformed IP address); the CLA for b is valid and applies.
	res := world(addr, []string{"not-an-ip:80"}, []string{v2})
	res[5] = xdstest.RouteConfig("routes",
		xdstest.VirtualHost("a", []string{"a.test", "dup.test"}, xdstest.PrefixRoute("/", "outbound|80||a.test")),
		xdstest.VirtualHost("b", []string{"b.test", "dup.test", "b.test:" + port}, xdstest.PrefixRoute("/", "outbound|80||b.test")),
	)
	xds.Set(t, "2", res...)
	nacked := func(typeURL, msg, version string) bool {
		for _, r := range xds.Requests() {
			if r.GetTypeUrl() == typeURL && r.GetErrorDetail() != nil && strings.Contains(r.GetErrorDetail().GetMessage(), msg) {
				return r.GetVersionInfo() == version // a NACK carries the last accepted version
			}
		}
		return false
	}
	eventually(t, "RDS NACK", func() bool { return nacked(resourcev3.RouteType, "only unique values for domains", "1") })
	eventually(t, "EDS NACK", func() bool { return nacked(resourcev3.EndpointType, "malformed IP address: not-an-ip", "1") })
	eventually(t, "valid CLA b applied", func() bool { return get(t, addr, "b.test", "/").backend == "v2" })
	assert.Equal(t, "v1", get(t, addr, "a.test", "/").backend, "rejected CLA a leaves the old endpoints")
	assert.Equal(t, 404, get(t, addr, "dup.test", "/").code, "rejected route config leaves the old routes")
	assert.Positive(t, p.Stats()["http.rds.update_rejected"])
	assert.Positive(t, p.Stats()["cluster_manager.eds.update_rejected"])
	_, dump := adminGet(t, p, "/config_dump")
	assert.Contains(t, dump, "only unique values for domains")

	// A listener that is not HTTP is rejected too; the other listener stays.
	bad := xdstest.HTTPListener("L", addr, "routes")
	bad.FilterChains[0].Filters[0].ConfigType = nil
	res = world(addr, []string{v1}, []string{v1})
	res[4] = bad
	xds.Set(t, "3", res...)
	eventually(t, "LDS NACK", func() bool { return nacked(resourcev3.ListenerType, "listener \"L\"", "2") })

	assert.Equal(t, 200, get(t, addr, "a.test", "/").code, "old listener keeps serving")
	assert.True(t, p.Ready())
}

func TestDeltaUpdates(t *testing.T) {
	xds := xdstest.Start(t)
	v1, v2 := backend(t, "v1"), backend(t, "v2")
	addr := xdstest.FreeAddr(t)
	xds.Set(t, "1", world(addr, []string{v1}, []string{v1})...)
	p := startProxy(t, xds, true)
	eventually(t, "proxy ready", p.Ready)
	require.Equal(t, "v1", get(t, addr, "a.test", "/").backend)

	// Endpoint change arrives as a delta update of one assignment.
	res := world(addr, []string{v2}, []string{v1})
	xds.Set(t, "2", res...)
	eventually(t, "a moved to v2", func() bool { return get(t, addr, "a.test", "/").backend == "v2" })
	assert.Equal(t, "v1", get(t, addr, "b.test", "/").backend)

	// Removing cluster b arrives as removed_resources.
	xds.Set(t, "3", res[0], res[2], res[4], res[5])
	eventually(t, "b removed", func() bool { return get(t, addr, "b.test", "/").flag == respflags.NoClusterFound })

	// The proxy serves the new config before its ACK and unsubscription reach the server: wait
	// for those requests, then hold them to what they must say.
	var acks, subscribes int
	var unsubscribed []string
	count := func() {
		acks, subscribes, unsubscribed = 0, 0, nil
		for _, r := range xds.DeltaRequests() {
			if r.GetResponseNonce() != "" && r.GetErrorDetail() == nil {
				acks++
			}
			if r.GetTypeUrl() == resourcev3.EndpointType && len(r.GetResourceNamesSubscribe()) > 0 {
				subscribes++
			}
			unsubscribed = append(unsubscribed, r.GetResourceNamesUnsubscribe()...)
		}
	}
	eventually(t, "the removal ACKed and b's assignment unsubscribed", func() bool {
		count()
		return acks >= 5 && slices.Contains(unsubscribed, "b")
	})
	assert.GreaterOrEqual(t, acks, 5, "delta responses are ACKed by nonce")
	assert.Positive(t, subscribes, "EDS names are subscribed explicitly")
	assert.Contains(t, unsubscribed, "b", "the removed cluster's assignment is unsubscribed")

	// A malformed assignment is NACKed by nonce with the error; the old endpoints stay.
	bad := world(addr, []string{"not-an-ip:80"}, []string{v1})
	xds.Set(t, "3b", bad[0], bad[2], bad[4], bad[5])
	eventually(t, "delta NACK", func() bool {
		for _, r := range xds.DeltaRequests() {
			if r.GetTypeUrl() == resourcev3.EndpointType && r.GetResponseNonce() != "" && strings.Contains(r.GetErrorDetail().GetMessage(), "malformed IP address") {
				return true
			}
		}
		return false
	})
	assert.Equal(t, "v2", get(t, addr, "a.test", "/").backend, "old endpoints stay after a NACK")

	// Delta keeps config across a server restart, too.
	xds.Stop()
	assert.Equal(t, 200, get(t, addr, "a.test", "/").code)
	xds.Restart(t)
	xds.Set(t, "4", world(addr, []string{v1}, []string{v2})...)
	eventually(t, "b back after reconnect", func() bool { return get(t, addr, "b.test", "/").backend == "v2" })
}

func TestMalformedHTTPIs400AndProxyLives(t *testing.T) {
	xds := xdstest.Start(t)
	b1 := backend(t, "b1")
	addr := xdstest.FreeAddr(t)
	xds.Set(t, "1", world(addr, []string{b1}, []string{b1})...)
	p := startProxy(t, xds, false)
	eventually(t, "proxy ready", p.Ready)

	for _, raw := range []string{
		"NOT HTTP AT ALL\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: -5\r\n\r\n",
		"GET / HTTP/1.1\r\nHo st: a.test\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n", // HTTP/1.1 without Host
	} {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		require.NoError(t, err)
		c.SetDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Write([]byte(raw))
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "%q", raw)
		assert.Equal(t, 400, resp.StatusCode, "%q", raw)
		c.Close()
	}
	assert.Equal(t, 200, get(t, addr, "a.test", "/").code, "proxy still serves")
}

func TestListenerIPOverride(t *testing.T) {
	xds := xdstest.Start(t)
	b1 := backend(t, "b1")
	_, port, _ := net.SplitHostPort(xdstest.FreeAddr(t))
	// The control plane's listener is on an address this host does not have.
	xds.Set(t, "1", xdstest.EDSCluster("b", "b"), xdstest.CLA("b", b1),
		xdstest.InlineHTTPListener("0.0.0.0_"+port, "10.255.255.1:"+port, xdstest.RouteConfig("r", xdstest.VirtualHost("all", []string{"*"}, xdstest.PrefixRoute("/", "b")))))
	p, err := xdsproxy.New(xdsproxy.Options{XDSAddress: xds.Addr, NodeID: "n", ListenerIP: "127.0.0.1", BackoffBase: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	defer p.Close()
	eventually(t, "ready", p.Ready)
	assert.Equal(t, "b1", get(t, "127.0.0.1:"+port, "x", "/").backend)

	_, err = xdsproxy.New(xdsproxy.Options{XDSAddress: xds.Addr, NodeID: "n", ListenerIP: "not-an-ip"})
	assert.Error(t, err)
}

func TestListenerWarmsUntilItsRoutesArrive(t *testing.T) {
	xds := xdstest.Start(t)
	a1 := backend(t, "a1")
	addr := xdstest.FreeAddr(t)
	res := world(addr, []string{a1}, []string{a1})
	// Everything but the route config the listener reads over RDS.
	xds.Set(t, "1", res[:5]...)
	p := startProxy(t, xds, false)
	eventually(t, "listener warming", func() bool { return p.Stats()["listener_manager.total_listeners_warming"] == 1 })
	assert.False(t, p.Ready(), "not ready while a listener warms")
	// A warming listener does not serve: the request gets no answer.
	c := &http.Client{Timeout: 200 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	req.Host = "a.test"
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("warming listener answered %d", resp.StatusCode)
	}

	xds.Set(t, "2", res...)
	eventually(t, "ready", p.Ready)
	assert.Equal(t, "a1", get(t, addr, "a.test", "/").backend)
	assert.EqualValues(t, 1, p.Stats()["listener_manager.total_listeners_active"])
}

func TestOnlyHealthyEndpointsGetTraffic(t *testing.T) {
	xds := xdstest.Start(t)
	good, sick := backend(t, "good"), backend(t, "sick")
	addr := xdstest.FreeAddr(t)
	cla := xdstest.CLA("a", good, sick)
	cla.Endpoints[0].LbEndpoints[1].HealthStatus = corev3.HealthStatus_UNHEALTHY
	listener := xdstest.InlineHTTPListener("L", addr, xdstest.RouteConfig("r", xdstest.VirtualHost("all", []string{"*"}, xdstest.PrefixRoute("/", "a"))))
	xds.Set(t, "1", xdstest.EDSCluster("a", "a"), cla, listener)
	p := startProxy(t, xds, false)
	eventually(t, "ready", p.Ready)
	for range 6 {
		assert.Equal(t, "good", get(t, addr, "x", "/").backend, "unhealthy endpoints get no traffic (50 % healthy is not panic)")
	}

	// Draining endpoints get no traffic and do not count towards the panic threshold.
	cla = xdstest.CLA("a", good, sick)
	cla.Endpoints[0].LbEndpoints[1].HealthStatus = corev3.HealthStatus_DRAINING
	xds.Set(t, "2", xdstest.EDSCluster("a", "a"), cla, listener)
	eventually(t, "v2 applied", func() bool { return acked(xds, resourcev3.EndpointType, "2") })
	for range 6 {
		assert.Equal(t, "good", get(t, addr, "x", "/").backend, "draining endpoints get no traffic")
	}
}

// TestPanicThresholdSpreadsLoadOverAllEndpoints: below Envoy's default healthy_panic_threshold
// (50 %) of healthy endpoints, load goes to all endpoints, healthy or not; a cluster that sets
// the threshold to 0 turns panic off, and then no healthy endpoint means 503 UH.
func TestPanicThresholdSpreadsLoadOverAllEndpoints(t *testing.T) {
	xds := xdstest.Start(t)
	addr := xdstest.FreeAddr(t)
	endpoints := []string{backend(t, "a"), backend(t, "b"), backend(t, "c")}
	listener := xdstest.InlineHTTPListener("L", addr, xdstest.RouteConfig("r", xdstest.VirtualHost("all", []string{"*"}, xdstest.PrefixRoute("/", "svc"))))
	withUnhealthy := func(unhealthy ...int) *endpointv3.ClusterLoadAssignment {
		cla := xdstest.CLA("svc", endpoints...)
		for _, i := range unhealthy {
			cla.Endpoints[0].LbEndpoints[i].HealthStatus = corev3.HealthStatus_UNHEALTHY
		}
		return cla
	}
	plain := xdstest.EDSCluster("svc", "svc")
	noPanic := xdstest.EDSCluster("svc", "svc")
	noPanic.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}}
	// spread sends 9 requests and counts them by backend, or by flag for local replies.
	spread := func() map[string]int {
		seen := map[string]int{}
		for range 9 {
			r := get(t, addr, "x", "/")
			if r.flag != "" {
				seen[r.flag]++
			} else {
				seen[r.backend]++
			}
		}
		return seen
	}
	xds.Set(t, "1", plain, withUnhealthy(1, 2), listener)
	p := startProxy(t, xds, false)
	eventually(t, "ready", p.Ready)
	apply := func(version string, c *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) {
		t.Helper()
		xds.Set(t, version, c, cla, listener)
		eventually(t, "version "+version+" applied", func() bool {
			return acked(xds, resourcev3.ClusterType, version) && acked(xds, resourcev3.EndpointType, version)
		})
	}

	assert.Equal(t, map[string]int{"a": 3, "b": 3, "c": 3}, spread(), "1 of 3 healthy (33 %): panic, all endpoints")
	apply("2", plain, withUnhealthy(2))
	got := spread()
	assert.Zero(t, got["c"], "2 of 3 healthy (67 %): only healthy endpoints")
	assert.Equal(t, 9, got["a"]+got["b"])
	apply("3", plain, withUnhealthy(0, 1, 2))
	assert.Equal(t, map[string]int{"a": 3, "b": 3, "c": 3}, spread(), "none healthy: all endpoints (total panic), not UH")

	apply("4", noPanic, withUnhealthy(1, 2))
	assert.Equal(t, map[string]int{"a": 9}, spread(), "panic off: only the healthy endpoint")
	apply("5", noPanic, withUnhealthy(0, 1, 2))
	assert.Equal(t, map[string]int{respflags.NoHealthyUpstream: 9}, spread(), "panic off, none healthy: 503 UH")
}

// acked reports whether the proxy has ACKed version of typeURL over SotW.
func acked(xds *xdstest.Server, typeURL, version string) bool {
	for _, req := range xds.Requests() {
		if req.GetTypeUrl() == typeURL && req.GetVersionInfo() == version && req.GetResponseNonce() != "" && req.GetErrorDetail() == nil {
			return true
		}
	}
	return false
}
