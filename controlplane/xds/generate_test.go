package xds

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/results/respflags"
)

var update = flag.Bool("update", false, "rewrite golden files")

func quietModel() *model.Model {
	return model.New(model.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func addSE(t testing.TB, m *model.Model, name string, spec *v1alpha3.ServiceEntry) {
	t.Helper()
	conv, _, err := model.ConvertServiceEntry("ns", name, spec)
	require.NoError(t, err)
	m.SetServiceEntry("ns", name, time.Unix(0, 0), conv)
}

// goldenModel has one of each: a Kubernetes Service (HTTP + gRPC ports) with an EndpointSlice,
// STATIC, DNS and NONE ServiceEntries, and a TCP port.
func goldenModel(t testing.TB) *model.Model {
	m := quietModel()
	m.SetKubeService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "app"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}, {Name: "grpc", Port: 7070}}}})
	m.SetEndpointSlice(&discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "echo-1", Namespace: "app", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		Ports:      []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}, {Name: ptr.To("grpc"), Port: ptr.To[int32](7070)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}},
			{Addresses: []string{"10.244.0.6"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}},
	})
	addSE(t, m, "static", &v1alpha3.ServiceEntry{Hosts: []string{"static.test"}, Resolution: v1alpha3.ServiceEntry_STATIC,
		Ports: []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080},
			{Number: 5432, Name: "tcp", Protocol: "TCP"}},
		Endpoints: []*v1alpha3.WorkloadEntry{{Address: "10.1.0.1"}, {Address: "10.1.0.2", Ports: map[string]uint32{"http": 9090}, Weight: 3}}})
	addSE(t, m, "dns", &v1alpha3.ServiceEntry{Hosts: []string{"dns.test"}, Resolution: v1alpha3.ServiceEntry_DNS,
		Ports: []*v1alpha3.ServicePort{{Number: 443, Name: "http2", Protocol: "HTTP2"}}})
	addSE(t, m, "none", &v1alpha3.ServiceEntry{Hosts: []string{"none.test"}, Resolution: v1alpha3.ServiceEntry_NONE,
		Ports: []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}})
	return m
}

func dump(t testing.TB, r *Resources) []byte {
	out := map[string]map[string]json.RawMessage{}
	for typ, rs := range map[string]map[string]typesResource{"clusters": r.Clusters, "endpoints": r.Endpoints,
		"listeners": r.Listeners, "routes": r.Routes, "apiListeners": r.APIListeners} {
		out[typ] = map[string]json.RawMessage{}
		for name, res := range rs {
			b, err := protojson.Marshal(res)
			require.NoError(t, err)
			var buf bytes.Buffer
			require.NoError(t, json.Compact(&buf, b)) // protojson randomizes whitespace
			out[typ][name] = buf.Bytes()
		}
	}
	b, err := json.MarshalIndent(out, "", "  ") // map keys sorted
	require.NoError(t, err)
	return append(b, '\n')
}

func TestGenerateGolden(t *testing.T) {
	r, bad := Generate(goldenModel(t).Entries(), GenOptions{Namespace: "app"})
	require.Empty(t, bad)
	got := dump(t, r)
	path := filepath.Join("testdata", "golden.json")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./controlplane/xds -run Golden -update to create it")
	require.Equal(t, string(want), string(got), "generated resources changed; review and rerun with -update")
}

func TestGenerateContract(t *testing.T) {
	r, bad := Generate(goldenModel(t).Entries(), GenOptions{Namespace: "app"})
	require.Empty(t, bad)
	// Names the proxies rely on.
	for _, n := range []string{"outbound|80||echo.app.svc.cluster.local", "outbound|7070||echo.app.svc.cluster.local",
		"outbound|80||static.test", "outbound|5432||static.test", "outbound|443||dns.test", "outbound|80||none.test"} {
		require.Contains(t, r.Clusters, n)
	}

	require.Equal(t, cluster.Cluster_EDS, r.Clusters["outbound|80||static.test"].(*cluster.Cluster).GetType())
	require.Equal(t, cluster.Cluster_STRICT_DNS, r.Clusters["outbound|443||dns.test"].(*cluster.Cluster).GetType())
	require.Equal(t, cluster.Cluster_ORIGINAL_DST, r.Clusters["outbound|80||none.test"].(*cluster.Cluster).GetType())
	require.NotContains(t, r.Endpoints, "outbound|443||dns.test", "DNS clusters carry their endpoints inline")
	require.ElementsMatch(t, []string{"0.0.0.0_80", "0.0.0.0_443", "0.0.0.0_7070"}, keys(r.Listeners), "no HTTP listener for TCP 5432")
	require.ElementsMatch(t, []string{"80", "443", "7070"}, keys(r.Routes))
	require.Contains(t, r.APIListeners, "echo.app.svc.cluster.local:7070")
	require.Contains(t, r.APIListeners, "echo.app:7070")
	require.Contains(t, r.APIListeners, "static.test:80")
	require.NotContains(t, r.APIListeners, "dns.test:443", "grpc-go cannot use a STRICT_DNS cluster")
	require.NotContains(t, r.APIListeners, "none.test:80", "grpc-go cannot use an ORIGINAL_DST cluster")

	// The listener's HCM uses RDS "80" and stamps %RESPONSE_FLAGS% on local replies.
	var m hcm.HttpConnectionManager
	l := r.Listeners["0.0.0.0_80"].(*listener.Listener)
	require.NoError(t, l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&m))
	require.Equal(t, "80", m.GetRds().GetRouteConfigName())
	mapper := m.GetLocalReplyConfig().GetMappers()[0]
	require.NotNil(t, mapper.GetFilter().GetResponseFlagFilter())
	require.Equal(t, respflags.Header, mapper.GetHeadersToAdd()[0].GetHeader().GetKey())
	require.Equal(t, "%RESPONSE_FLAGS%", mapper.GetHeadersToAdd()[0].GetHeader().GetValue())

	// Every host form routes to the right cluster, and no domain appears twice.
	rc := r.Routes["80"].(*route.RouteConfiguration)
	domains := map[string]string{}
	for _, vh := range rc.GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			require.NotContains(t, domains, d, "duplicate domain %s", d)
			domains[d] = vh.GetRoutes()[0].GetRoute().GetCluster()
		}
	}
	for _, d := range []string{"echo", "echo:80", "echo.app", "echo.app.svc", "echo.app.svc.cluster.local:80", "10.96.0.10", "10.96.0.10:80"} {
		require.Equal(t, "outbound|80||echo.app.svc.cluster.local", domains[d], d)
	}
	require.Equal(t, "outbound|80||static.test", domains["static.test:80"])

	// Endpoint ports: the endpoint's own port, else targetPort; unready endpoints left out.
	require.Equal(t, []uint32{8080, 9090}, claPorts(t, r, "outbound|80||static.test"))
	require.Equal(t, []uint32{8080}, claPorts(t, r, "outbound|80||echo.app.svc.cluster.local"))
}

type typesResource = types.Resource

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestShortNamesResolveInTheProxysNamespace: as istiod, the bare name of a Kubernetes Service
// is a domain only for proxies of its namespace; name.ns and name.ns.svc are for everyone.
func TestShortNamesResolveInTheProxysNamespace(t *testing.T) {
	m := quietModel()
	for _, ns := range []string{"a", "b"} {
		m.SetKubeService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}})
	}
	domains := func(proxyNS string) map[string]string {
		r, bad := Generate(m.Entries(), GenOptions{Namespace: proxyNS})
		require.Empty(t, bad)
		rc := r.Routes["80"].(*route.RouteConfiguration)
		require.NoError(t, rc.Validate())
		out := map[string]string{}
		for _, vh := range rc.GetVirtualHosts() {
			for _, d := range vh.GetDomains() {
				require.NotContains(t, out, d, "duplicate domain %s", d)
				out[d] = vh.GetRoutes()[0].GetRoute().GetCluster()
			}
		}
		return out
	}
	b := domains("b")
	assert.Equal(t, "outbound|80||web.b.svc.cluster.local", b["web"], "proxy in b: web is web.b")
	assert.Equal(t, "outbound|80||web.b.svc.cluster.local", b["web:80"])
	assert.Equal(t, "outbound|80||web.a.svc.cluster.local", b["web.a"])
	assert.Equal(t, "outbound|80||web.a.svc.cluster.local", b["web.a.svc:80"])
	assert.Equal(t, "outbound|80||web.a.svc.cluster.local", domains("a")["web"], "proxy in a: web is web.a")
	for _, ns := range []string{"c", ""} {
		d := domains(ns)
		assert.NotContains(t, d, "web", "proxy in %q: no bare name of another namespace's service", ns)
		assert.Equal(t, "outbound|80||web.b.svc.cluster.local", d["web.b"])
	}
}

// FuzzGenerate: whatever the conversion accepts generates resources that pass Validate().
func FuzzGenerate(f *testing.F) {
	f.Add("a.test", uint32(80), "http", "HTTP", uint32(0), "10.0.0.1", uint32(9000), int32(1))
	f.Add("b.test", uint32(443), "grpc", "GRPC", uint32(8443), "backend.example.com", uint32(1), int32(2))
	f.Add("c.test", uint32(65535), "", "tcp", uint32(65535), "::1", uint32(65535), int32(0))
	f.Fuzz(func(t *testing.T, host string, port uint32, name, proto string, target uint32, addr string, epPort uint32, res int32) {
		spec := &v1alpha3.ServiceEntry{Hosts: []string{host}, Resolution: v1alpha3.ServiceEntry_Resolution(res),
			Ports:     []*v1alpha3.ServicePort{{Number: port, Name: name, Protocol: proto, TargetPort: target}},
			Endpoints: []*v1alpha3.WorkloadEntry{{Address: addr, Ports: map[string]uint32{name: epPort}}}}
		conv, _, err := model.ConvertServiceEntry("ns", "fuzz", spec)
		if err != nil {
			return
		}
		m := quietModel()
		m.SetServiceEntry("ns", "fuzz", time.Unix(0, 0), conv)
		_, bad := Generate(m.Entries(), GenOptions{})
		require.Empty(t, bad)
	})
}

func claPorts(t testing.TB, r *Resources, name string) []uint32 {
	t.Helper()
	cla := r.Endpoints[name].(*endpoint.ClusterLoadAssignment)
	var out []uint32
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
		}
	}
	return out
}

// Envoy's default initial_fetch_timeout (15 s) would let a cluster or listener warm with no
// endpoints or routes; istiod sets 0 (wait) on both config sources.
func TestConfigSourcesWaitForFirstFetch(t *testing.T) {
	r, bad := Generate(goldenModel(t).Entries(), GenOptions{Namespace: "app"})
	require.Empty(t, bad)
	eds := r.Clusters["outbound|80||static.test"].(*cluster.Cluster).GetEdsClusterConfig().GetEdsConfig()
	require.NotNil(t, eds.GetInitialFetchTimeout(), "EDS config source without initial_fetch_timeout")
	require.Zero(t, eds.GetInitialFetchTimeout().AsDuration())
	var m hcm.HttpConnectionManager
	l := r.Listeners["0.0.0.0_80"].(*listener.Listener)
	require.NoError(t, l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&m))
	rds := m.GetRds().GetConfigSource()
	require.NotNil(t, rds.GetInitialFetchTimeout(), "RDS config source without initial_fetch_timeout")
	require.Zero(t, rds.GetInitialFetchTimeout().AsDuration())
}

// Routes carry istiod's defaults (no VirtualService): DefaultRetryPolicy and timeout 0, on
// Envoy's RDS routes and on proxyless gRPC's inline routes; NoRouteDefaults leaves both out.
func TestRouteDefaultsAsIstiod(t *testing.T) {
	routesOf := func(opts GenOptions) []*route.Route {
		r, bad := Generate(goldenModel(t).Entries(), opts)
		require.Empty(t, bad)
		var out []*route.Route
		for _, vh := range r.Routes["80"].(*route.RouteConfiguration).GetVirtualHosts() {
			out = append(out, vh.GetRoutes()...)
		}
		var m hcm.HttpConnectionManager
		require.NoError(t, r.APIListeners["echo.app:7070"].(*listener.Listener).GetApiListener().GetApiListener().UnmarshalTo(&m))
		return append(out, m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()...)
	}
	for _, rt := range routesOf(GenOptions{}) {
		a := rt.GetRoute()
		require.NotNil(t, a.GetTimeout(), "route to %s without timeout", a.GetCluster())
		require.Zero(t, a.GetTimeout().AsDuration())
		rp := a.GetRetryPolicy()
		require.NotNil(t, rp, "route to %s without retry policy", a.GetCluster())
		require.Equal(t, "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes", rp.GetRetryOn())
		require.EqualValues(t, 2, rp.GetNumRetries().GetValue())
		require.Equal(t, []uint32{503}, rp.GetRetriableStatusCodes())
		require.Equal(t, "envoy.retry_host_predicates.previous_hosts", rp.GetRetryHostPredicate()[0].GetName())
	}
	for _, rt := range routesOf(GenOptions{NoRouteDefaults: true}) {
		require.Nil(t, rt.GetRoute().GetTimeout())
		require.Nil(t, rt.GetRoute().GetRetryPolicy())
	}
}

// A service on a port the proxy binds itself (the gateway Service exposes admin 15000) gets its
// clusters but no Envoy listener or route: the proxy could not bind it and would reject LDS.
func TestNoListenerOnProxyPorts(t *testing.T) {
	m := goldenModel(t)
	var ports []*v1alpha3.ServicePort
	for _, p := range []uint32{15000, 15001, 15006, 15021, 15090} {
		ports = append(ports, &v1alpha3.ServicePort{Number: p, Name: "http-" + RouteName(p), Protocol: "HTTP"})
	}
	addSE(t, m, "proxy", &v1alpha3.ServiceEntry{Hosts: []string{"proxy.test"}, Resolution: v1alpha3.ServiceEntry_STATIC,
		Ports: ports, Endpoints: []*v1alpha3.WorkloadEntry{{Address: "10.2.0.1"}}})
	r, bad := Generate(m.Entries(), GenOptions{})
	require.Empty(t, bad)
	for _, p := range ports {
		require.NotContains(t, r.Listeners, ListenerName(p.Number))
		require.NotContains(t, r.Routes, RouteName(p.Number))
		require.Contains(t, r.Clusters, model.ClusterName("proxy.test", p.Number))
		require.Contains(t, r.APIListeners, APIListenerName("proxy.test", p.Number), "proxyless gRPC binds nothing")
	}
	require.Contains(t, r.Listeners, "0.0.0.0_80")
}

// A generation large enough to build clusters and routes side by side gives what one goroutine
// gives (run with -race: the two halves share only the read-only entries).
func TestParallelGenerationMatchesSequential(t *testing.T) {
	m := goldenModel(t)
	for i := range parallelFrom + 50 {
		res := v1alpha3.ServiceEntry_STATIC
		if i%7 == 0 {
			res = v1alpha3.ServiceEntry_DNS
		}
		addSE(t, m, fmt.Sprintf("se-%d", i), &v1alpha3.ServiceEntry{Hosts: []string{fmt.Sprintf("se-%d.test", i)}, Resolution: res,
			Ports:     []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}, {Number: 9000 + uint32(i%3), Name: "grpc", Protocol: "GRPC"}},
			Endpoints: []*v1alpha3.WorkloadEntry{{Address: fmt.Sprintf("10.2.%d.%d", i/256, i%256)}}})
	}
	entries := m.Entries()
	require.GreaterOrEqual(t, len(entries), parallelFrom)
	got, gotBad := generate(entries, GenOptions{Namespace: "app"}, true, true)

	want := &Resources{Clusters: map[string]typesResource{}, Endpoints: map[string]typesResource{},
		Listeners: map[string]typesResource{}, Routes: map[string]typesResource{},
		APIListeners: map[string]typesResource{}, claSources: map[string][]model.Endpoint{}}
	wantBad := append(generateClusters(want, entries, true), generateRoutes(want, entries, GenOptions{Namespace: "app"})...)
	wantBad = append(wantBad, generateAPIListeners(want, entries, GenOptions{Namespace: "app"})...)
	assert.Equal(t, string(dump(t, want)), string(dump(t, got)))
	assert.Equal(t, wantBad, gotBad)
	ports := 0
	for _, e := range entries {
		ports += len(e.Service.Ports)
	}
	assert.Len(t, got.Clusters, ports, "a cluster per service port")
	assert.Equal(t, len(want.claSources), len(got.claSources))
}
