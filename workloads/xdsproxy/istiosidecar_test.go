package xdsproxy_test

import (
	"net"
	"strconv"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshchaos/meshchaos/workloads/xdsproxy"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// tcpListener is a listener with a tcp_proxy filter (Istio's virtualOutbound, its TCP
// services' listeners).
func tcpListener(t *testing.T, name, addr string) *listenerv3.Listener {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	tc, err := anypb.New(&tcpv3.TcpProxy{StatPrefix: name, ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: "PassthroughCluster"}})
	require.NoError(t, err)
	return &listenerv3.Listener{Name: name, Address: xdstest.SocketAddress(host, p),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: tc}}}}}}
}

func unbound(l *listenerv3.Listener) *listenerv3.Listener {
	l.BindToPort = wrapperspb.Bool(false)
	return l
}

// An istiod sidecar's listeners: virtualOutbound (tcp_proxy, bound), a TCP service's listener
// on its ClusterIP and the HTTP outbound listener 0.0.0.0_PORT, both with bind_to_port false
// (iptables reaches them in Istio). xdsproxy takes them all (an ACK, as Envoy's), serves the
// HTTP one on loopback where the app calls its sidecar, and holds the others.
func TestIstioSidecarListeners(t *testing.T) {
	xds := xdstest.Start(t)
	b1 := backend(t, "b1")
	_, port, _ := net.SplitHostPort(xdstest.FreeAddr(t))
	outbound := xdstest.InlineHTTPListener("0.0.0.0_"+port, "0.0.0.0:"+port,
		xdstest.RouteConfig("r", xdstest.VirtualHost("all", []string{"*"}, xdstest.PrefixRoute("/", "b"))))
	voAddr := xdstest.FreeAddr(t)
	virtualOutbound := tcpListener(t, "virtualOutbound", voAddr)
	// The proxy's own admin port, taken: Istio's outbound listener for a Service's port 15000
	// (istiod makes one for the gateway's admin port) cannot be served there, and is held.
	admin := xdstest.FreeAddr(t)
	_, adminPort, _ := net.SplitHostPort(admin)
	onAdmin := xdstest.InlineHTTPListener("0.0.0.0_"+adminPort, "0.0.0.0:"+adminPort,
		xdstest.RouteConfig("r2", xdstest.VirtualHost("all", []string{"*"}, xdstest.PrefixRoute("/", "b"))))
	xds.Set(t, "1", xdstest.EDSCluster("b", "b"), xdstest.CLA("b", b1), unbound(outbound), virtualOutbound,
		unbound(tcpListener(t, "10.96.0.1_443", "10.96.0.1:443")), unbound(onAdmin))
	p := startProxyWith(t, xdsproxy.Options{XDSAddress: xds.Addr, AdminAddress: admin})
	eventually(t, "ready with every listener taken", p.Ready)
	assert.Equal(t, "b1", get(t, "127.0.0.1:"+port, "x", "/").backend, "the outbound HTTP listener is served on loopback")
	for _, r := range xds.Requests() {
		assert.Nil(t, r.GetErrorDetail(), "no NACK: %v", r.GetErrorDetail())
	}
	if conn, err := net.Dial("tcp", voAddr); err == nil {
		conn.Close()
		t.Errorf("virtualOutbound (tcp_proxy) is served on %s; xdsproxy serves HTTP only and must hold it", voAddr)
	}
	_, dump := adminGet(t, p, "/config_dump")
	code, _ := adminGet(t, p, "/ready")
	assert.Equal(t, 200, code, "the admin port is the proxy's, not the held listener's")
	for _, name := range []string{"virtualOutbound", "10.96.0.1_443", "0.0.0.0_" + port, "0.0.0.0_" + adminPort} {
		assert.Contains(t, dump, name, "config_dump shows the listener as Envoy's would")
	}
}
