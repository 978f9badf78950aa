// Package xdstest runs a plain go-control-plane xDS server on loopback and builds standard Envoy
// v3 resources, so the data plane is tested against a conforming server that is not meshchaos's
// own control plane.
package xdstest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Group is the snapshot group every node is served from.
const Group = "all"

type oneGroup struct{}

func (oneGroup) ID(*corev3.Node) string { return Group }

// Server is a go-control-plane ADS server (snapshot cache, ads=false so requests for a subset
// of resources are answered) that records every request it receives.
type Server struct {
	Cache cachev3.SnapshotCache
	Addr  string

	mu       sync.Mutex
	grpc     *grpc.Server
	cancel   context.CancelFunc
	requests []*discoveryv3.DiscoveryRequest
	deltas   []*discoveryv3.DeltaDiscoveryRequest
	streams  int

	auth      *Auth    // nil: plaintext, no token asked
	presented []string // bearer tokens presented (Auth only)
}

// Start runs a server on 127.0.0.1 (random port) until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, nil)
}

func start(t testing.TB, auth *Auth) *Server {
	t.Helper()
	s := &Server{Cache: cachev3.NewSnapshotCache(false, oneGroup{}, nil), auth: auth}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("xdstest: listen: %v", err)
	}
	s.Addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) serve(ln net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(context.Context, int64, string) error {
			s.mu.Lock()
			s.streams++
			s.mu.Unlock()
			return nil
		},
		DeltaStreamOpenFunc: func(context.Context, int64, string) error {
			s.mu.Lock()
			s.streams++
			s.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
			s.mu.Lock()
			s.requests = append(s.requests, r)
			s.mu.Unlock()
			return nil
		},
		StreamDeltaRequestFunc: func(_ int64, r *discoveryv3.DeltaDiscoveryRequest) error {
			s.mu.Lock()
			s.deltas = append(s.deltas, r)
			s.mu.Unlock()
			return nil
		},
	}
	srv := serverv3.NewServer(ctx, s.Cache, cb)
	// Accept client keepalive pings as often as every second, as a control plane must for its
	// proxies' keepalive (grpc-go's default policy answers pings more often than every 5 minutes
	// with GOAWAY).
	opts := []grpc.ServerOption{grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true})}
	if s.auth != nil {
		opts = append(opts, s.secureOptions(s.auth)...)
	}
	g := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, srv)
	s.mu.Lock()
	s.grpc, s.cancel = g, cancel
	s.mu.Unlock()
	go g.Serve(ln)
}

// Stop kills the server: streams end, clients see the connection drop.
func (s *Server) Stop() {
	s.mu.Lock()
	g, cancel := s.grpc, s.cancel
	s.grpc, s.cancel = nil, nil
	s.mu.Unlock()
	if g != nil {
		g.Stop()
		cancel()
	}
}

// Restart serves again on the same address (the cache keeps its snapshots unless cleared).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", s.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("xdstest: relisten %s: %v", s.Addr, err)
	}
	s.serve(ln)
}

// Set replaces the snapshot every node is served with.
func (s *Server) Set(t testing.TB, version string, res ...types.Resource) {
	t.Helper()
	if err := s.SetErr(version, res...); err != nil {
		t.Fatalf("xdstest: %v", err)
	}
}

// SetErr is Set for callers without a testing.TB.
func (s *Server) SetErr(version string, res ...types.Resource) error {
	// Every type gets the version, so an empty type is answered (with no resources) too.
	byType := map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType: nil, resourcev3.EndpointType: nil, resourcev3.ListenerType: nil, resourcev3.RouteType: nil,
	}
	for _, r := range res {
		var t string
		switch r.(type) {
		case *clusterv3.Cluster:
			t = resourcev3.ClusterType
		case *endpointv3.ClusterLoadAssignment:
			t = resourcev3.EndpointType
		case *listenerv3.Listener:
			t = resourcev3.ListenerType
		case *routev3.RouteConfiguration:
			t = resourcev3.RouteType
		default:
			return fmt.Errorf("unsupported resource %T", r)
		}
		byType[t] = append(byType[t], r)
	}
	snap, err := cachev3.NewSnapshot(version, byType)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return s.Cache.SetSnapshot(context.Background(), Group, snap)
}

// Requests returns the SotW requests received so far.
func (s *Server) Requests() []*discoveryv3.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discoveryv3.DiscoveryRequest(nil), s.requests...)
}

// DeltaRequests returns the delta requests received so far.
func (s *Server) DeltaRequests() []*discoveryv3.DeltaDiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discoveryv3.DeltaDiscoveryRequest(nil), s.deltas...)
}

// Streams counts the ADS streams opened so far.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams
}

// EDSCluster is an EDS cluster over ADS that reads assignment edsName, waiting forever for it
// (initial_fetch_timeout 0s, as Istio configures).
func EDSCluster(name, edsName string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		ConnectTimeout:       durationpb.New(time.Second),
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			ServiceName: edsName,
			EdsConfig: &corev3.ConfigSource{
				ResourceApiVersion:    corev3.ApiVersion_V3,
				InitialFetchTimeout:   durationpb.New(0),
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
			},
		},
	}
}

// CLA is a ClusterLoadAssignment with healthy endpoints at addrs ("ip:port").
func CLA(name string, addrs ...string) *endpointv3.ClusterLoadAssignment {
	var lbs []*endpointv3.LbEndpoint
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: SocketAddress(host, p)}},
			HealthStatus:   corev3.HealthStatus_HEALTHY,
		})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}}}
}

// SocketAddress is a TCP address.
func SocketAddress(host string, port int) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}

// HTTPListener is a listener on addr ("ip:port") whose HTTP connection manager reads route
// config rds over ADS; with rds == "" use InlineHTTPListener.
func HTTPListener(name, addr, rds string) *listenerv3.Listener {
	return listenerWith(name, addr, &hcmv3.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			RouteConfigName: rds,
			ConfigSource: &corev3.ConfigSource{
				ResourceApiVersion:    corev3.ApiVersion_V3,
				InitialFetchTimeout:   durationpb.New(0),
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
			},
		}},
	})
}

// InlineHTTPListener is a listener whose route config is inline.
func InlineHTTPListener(name, addr string, rc *routev3.RouteConfiguration) *listenerv3.Listener {
	return listenerWith(name, addr, &hcmv3.HttpConnectionManager{
		StatPrefix:     name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc},
	})
}

func listenerWith(name, addr string, hcm *hcmv3.HttpConnectionManager) *listenerv3.Listener {
	router, _ := anypb.New(&routerv3.Router{})
	hcm.HttpFilters = []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}}
	tc, err := anypb.New(hcm)
	if err != nil {
		panic(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return &listenerv3.Listener{
		Name:    name,
		Address: SocketAddress(host, p),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name:       "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: tc},
		}}}},
	}
}

// RouteConfig is a RouteConfiguration of virtual hosts.
func RouteConfig(name string, vhosts ...*routev3.VirtualHost) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: vhosts}
}

// VirtualHost matches domains and tries routes in order.
func VirtualHost(name string, domains []string, routes ...*routev3.Route) *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: name, Domains: domains, Routes: routes}
}

// PrefixRoute sends requests whose path starts with prefix to cluster.
func PrefixRoute(prefix, cluster string) *routev3.Route {
	return &routev3.Route{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
	}
}

// WithRetry adds a retry policy (Envoy retry_on syntax) to a route.
func WithRetry(r *routev3.Route, retryOn string, retries uint32) *routev3.Route {
	r.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: retryOn, NumRetries: wrapperspb.UInt32(retries)}
	return r
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("xdstest: free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
