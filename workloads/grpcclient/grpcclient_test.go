package grpcclient

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshchaos/meshchaos/workloads/echo"
	"github.com/meshchaos/meshchaos/workloads/xdscred"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// proxyless is what a control plane serves a proxyless client for target host:80: an API
// listener with its route inline, an EDS cluster and its endpoints at backend.
func proxyless(t *testing.T, host, backend string) []types.Resource {
	t.Helper()
	const cluster = "outbound|80||echo"
	router, err := anypb.New(&routerv3.Router{})
	require.NoError(t, err)
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			VirtualHosts: []*routev3.VirtualHost{{Name: host, Domains: []string{"*"}, Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
			}}}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{Name: "router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	require.NoError(t, err)
	ip, port, err := net.SplitHostPort(backend)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: cluster, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		// grpc-go ignores a locality without a weight.
		Locality:            &corev3.Locality{Zone: "z"},
		LoadBalancingWeight: wrapperspb.UInt32(1),
		LbEndpoints: []*endpointv3.LbEndpoint{{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: xdstest.SocketAddress(ip, p)}},
			HealthStatus:   corev3.HealthStatus_HEALTHY,
		}},
	}}}
	return []types.Resource{
		&listenerv3.Listener{Name: host + ":80", ApiListener: &listenerv3.ApiListener{ApiListener: hcm}},
		xdstest.EDSCluster(cluster, cluster), cla,
	}
}

// startEcho runs the echo workload on loopback and returns its address.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- echo.Serve(ctx, echo.Options{Addr: addr, PodName: "echo-1"}) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "echo listens")
	return addr
}

// A listener withdrawn by the control plane fails every channel's RPCs (UNAVAILABLE) until it
// comes back; the clients count the failures by code and each channel's time without config,
// and speak to the control plane as istiod's proxyless gRPC (GENERATOR=grpc).
func TestClientsCountFailuresAndTimeWithoutConfig(t *testing.T) {
	backend := startEcho(t)
	xds := xdstest.Start(t)
	full := proxyless(t, "echo.test", backend)
	xds.Set(t, "1", full...)

	c, err := New(Options{XDSAddress: xds.Addr, Targets: []string{"echo.test:80"}, Clients: 2, Rate: 200,
		Metadata: map[string]any{"NAMESPACE": "ns"}})
	require.NoError(t, err)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	ready := func() int {
		resp, err := http.Get(srv.URL + "/ready")
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusServiceUnavailable, ready(), "no RPC has succeeded yet")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return c.Stats().Ready == 2 }, 20*time.Second, 20*time.Millisecond, "both channels served")
	assert.Equal(t, http.StatusOK, ready())

	withdrawn := time.Now()
	xds.Set(t, "2", full[1:]...) // the cluster and endpoints, no listener
	require.Eventually(t, func() bool { return len(c.Stats().NoConfig) == 2 }, 20*time.Second, 20*time.Millisecond, "both channels lost their config")
	xds.Set(t, "3", full...)
	require.Eventually(t, func() bool {
		st := c.Stats()
		closed := 0
		for _, sp := range st.NoConfig {
			if !sp.End.IsZero() {
				closed++
			}
		}
		return closed == 2
	}, 20*time.Second, 20*time.Millisecond, "both channels served again")

	st := c.Stats()
	failed := map[string]int64{}
	var ok int64
	for _, s := range st.Seconds {
		ok += s.OK
		for code, n := range s.Failed {
			failed[code] += n
		}
	}
	assert.Positive(t, ok)
	assert.Positive(t, failed["Unavailable"], "a channel without its listener fails its RPCs UNAVAILABLE: %v", failed)
	for _, sp := range st.NoConfig {
		assert.False(t, sp.Start.Before(withdrawn), "the span begins after the listener was withdrawn")
		assert.True(t, sp.End.After(sp.Start))
	}

	var generator any
	nodes := map[string]bool{}
	for _, r := range xds.Requests() {
		if n := r.GetNode(); n != nil {
			nodes[n.GetId()] = true
			generator = n.GetMetadata().AsMap()["GENERATOR"]
		}
	}
	assert.Equal(t, "grpc", generator, "istiod serves proxyless gRPC to GENERATOR=grpc")
	assert.Len(t, nodes, 2, "each client is its own xDS node: %v", nodes)
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	for name, o := range map[string]Options{
		"no xds":     {Targets: []string{"a:80"}, Rate: 1},
		"no target":  {XDSAddress: "x:1", Rate: 1},
		"bad target": {XDSAddress: "x:1", Targets: []string{"a"}, Rate: 1},
		"no rate":    {XDSAddress: "x:1", Targets: []string{"a:80"}},
	} {
		_, err := New(o)
		assert.Error(t, err, name)
	}
}

// On a secure port the clients speak TLS against the control plane's root alone, under its
// server name, with the pod's token on the stream (xdscred, as the sidecars), through the
// channel credentials they register for grpc-go's bootstrap.
func TestClientsReachASecurePort(t *testing.T) {
	backend := startEcho(t)
	ca := xdstest.NewCA(t)
	xds := xdstest.StartSecure(t, xdstest.Auth{Cert: ca.ServerCert(t, "cp.ns.svc"), Tokens: []string{"tok"}})
	xds.Set(t, "1", proxyless(t, "echo.test", backend)...)
	c, err := New(Options{XDSAddress: xds.Addr, Targets: []string{"echo.test:80"}, Rate: 50,
		Credentials: xdscred.Options{RootCertFile: ca.WriteRoot(t), TokenFile: xdstest.WriteFile(t, "token", "tok"), ServerName: "cp.ns.svc"}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return c.Stats().Ready == 1 }, 20*time.Second, 20*time.Millisecond, "served over TLS with the token")
	assert.Contains(t, xds.Presented(), "tok")
}
