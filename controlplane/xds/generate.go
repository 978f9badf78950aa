// Package xds turns the model into Envoy v3 resources and serves them over ADS (State of the
// World and Delta) with go-control-plane.
//
// Resource naming (the contract with xdsproxy, real Envoy and grpc-go):
//
//   - Clusters: "outbound|PORT||HOST" (Istio's form), one per service port. STATIC services are
//     EDS clusters (eds_config: ADS, service_name = cluster name), DNS services STRICT_DNS
//     clusters with an inline load assignment, NONE services ORIGINAL_DST clusters.
//   - ClusterLoadAssignments: named like their cluster; only ready endpoints, all HEALTHY.
//   - Envoy listeners (sidecars and gateways): one outbound HTTP listener per service port
//     number, named "0.0.0.0_PORT", bound to 0.0.0.0:PORT, whose HTTP connection manager takes its
//     routes over RDS (ADS) from the route configuration named "PORT". Its local_reply_config
//     adds the header respflags.Header = "%RESPONSE_FLAGS%" to every proxy-generated reply.
//   - Route configurations: "PORT", one virtual host per service on that port, named "HOST:PORT",
//     with the domains HOST and HOST:PORT and, for Kubernetes Services, the short forms
//     name.ns, name.ns.svc and, for proxies of the service's namespace (GenOptions.Namespace),
//     name (each with and without :PORT) and the ClusterIP (with and without :PORT). A domain is given to the first service (by host name) that claims it, so
//     route configurations never carry duplicates. One route, prefix "/", to the cluster, with
//     istiod's defaults unless GenOptions.NoRouteDefaults: timeout 0 and DefaultRetryPolicy.
//   - Proxyless gRPC (grpc-go's xds resolver, target xds:///HOST:PORT): API listeners named
//     "HOST:PORT" for HOST the FQDN (and, for Kubernetes Services, name.ns and name.ns.svc),
//     each an HTTP connection manager with an inline route configuration to the cluster
//     "outbound|PORT||FQDN".
//
// No Envoy listener or route configuration is generated for a port the proxy binds itself (see
// ProxyPort); the clusters and the proxyless gRPC listeners of such a port are.
//
// Only HTTP-like ports (model.HTTPLike) get an HTTP listener and routes; the others get clusters
// only (the reference control plane generates no tcp_proxy chains). Only STATIC (EDS) services
// get proxyless gRPC listeners: grpc-go cannot use STRICT_DNS or ORIGINAL_DST clusters.
package xds

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	accesslog "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/results/respflags"
)

// Resources is one generation of the whole config, by type, keyed by resource name.
type Resources struct {
	Clusters     map[string]types.Resource
	Endpoints    map[string]types.Resource
	Listeners    map[string]types.Resource // Envoy listeners
	Routes       map[string]types.Resource
	APIListeners map[string]types.Resource // proxyless gRPC listeners

	// claSources: the model endpoint slice each CLA was built from (identity = unchanged).
	claSources map[string][]model.Endpoint
}

// ListenerName is the Envoy outbound listener for a port.
func ListenerName(port uint32) string { return "0.0.0.0_" + strconv.FormatUint(uint64(port), 10) }

// RouteName is the route configuration an outbound listener takes over RDS.
func RouteName(port uint32) string { return strconv.FormatUint(uint64(port), 10) }

// APIListenerName is a proxyless gRPC listener (the grpc-go dial target without "xds:///").
func APIListenerName(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// GenOptions configure generation.
type GenOptions struct {
	// NoRouteDefaults leaves out istiod's route defaults (DefaultRetryPolicy and timeout 0, i.e.
	// no route timeout), so a route carries only its cluster: the proxy's own defaults apply.
	NoRouteDefaults bool
	// Namespace is the proxies' namespace: the bare short name of a Kubernetes Service
	// ("name") resolves only in its own namespace, as istiod generates it.
	Namespace string
	// Router: the proxies are gateways, whose listeners and routes come from Gateways and
	// VirtualServices (gateway.go), not from every service port.
	Router bool
}

// Invalid is a resource that failed Validate() and was left out.
type Invalid struct {
	Type, Name string
	Err        error
}

func (i Invalid) Error() string { return fmt.Sprintf("%s %s invalid: %v", i.Type, i.Name, i.Err) }

type validator interface{ Validate() error }

// Generate builds every resource from the model's entries (sorted by host). Resources that fail
// Validate() are left out and reported; generation never fails as a whole.
func Generate(entries []*model.Entry, opts GenOptions) (*Resources, []Invalid) {
	return generate(entries, opts, true, true)
}

// parallelFrom is the number of entries from which generate builds clusters and routes on two
// goroutines: a scope's first generation is on the path of the first proxy's config after a
// restart (istiod's initial push), and at 50 000 ServiceEntries it took 0.8 s on one core.
const parallelFrom = 256

// generate builds the resources of entries; withEndpoints adds the ClusterLoadAssignments (a
// scope's generation leaves them out: they are shared by every scope), withAPI the API
// listeners (a scope has them once a proxyless client asks). Clusters (and CLAs) and routes,
// listeners and API listeners share nothing but the read-only entries, so large generations
// build them side by side.
func generate(entries []*model.Entry, opts GenOptions, withEndpoints, withAPI bool) (*Resources, []Invalid) {
	r := &Resources{
		Clusters: map[string]types.Resource{}, Endpoints: map[string]types.Resource{},
		Listeners: map[string]types.Resource{}, Routes: map[string]types.Resource{},
		APIListeners: map[string]types.Resource{}, claSources: map[string][]model.Endpoint{},
	}
	routes := func() []Invalid {
		if opts.Router {
			return nil
		}
		return generateRoutes(r, entries, opts)
	}
	if len(entries) < parallelFrom || !withAPI {
		bad := generateClusters(r, entries, withEndpoints)
		bad = append(bad, routes()...)
		if withAPI {
			bad = append(bad, generateAPIListeners(r, entries, opts)...)
		}
		return r, bad
	}
	// API listeners (each with its own route configuration, marshalled into an Any) cost about
	// as much as the clusters and routes together (CPU profile at 5000 ServiceEntries).
	var apiBad []Invalid
	var wg sync.WaitGroup
	wg.Go(func() { apiBad = generateAPIListeners(r, entries, opts) })
	bad := generateClusters(r, entries, withEndpoints)
	bad = append(bad, routes()...)
	wg.Wait()
	return r, append(bad, apiBad...)
}

// addValid puts res into m under name when it validates, else reports it in bad.
func addValid(bad *[]Invalid, m map[string]types.Resource, typ, name string, res types.Resource) {
	if err := res.(validator).Validate(); err != nil {
		*bad = append(*bad, Invalid{Type: typ, Name: name, Err: err})
		return
	}
	m[name] = res
}

// generateClusters fills r's Clusters and, withEndpoints, its Endpoints and claSources.
func generateClusters(r *Resources, entries []*model.Entry, withEndpoints bool) []Invalid {
	var bad []Invalid
	for _, e := range entries {
		s := e.Service
		for _, p := range s.Ports {
			cn := model.ClusterName(s.Hostname, p.Number)
			addValid(&bad, r.Clusters, "Cluster", cn, BuildCluster(e, p))
			if withEndpoints && s.Resolution == model.ResolutionStatic {
				addValid(&bad, r.Endpoints, "ClusterLoadAssignment", cn, BuildCLA(e, p))
				r.claSources[cn] = e.Endpoints[p.Number]
			}
		}
	}
	return bad
}

// generateAPIListeners fills r's APIListeners (proxyless gRPC's).
func generateAPIListeners(r *Resources, entries []*model.Entry, opts GenOptions) []Invalid {
	var bad []Invalid
	for _, e := range entries {
		s := e.Service
		// grpc-go's xds resolver handles EDS and LOGICAL_DNS clusters only: no API listener
		// for STRICT_DNS or ORIGINAL_DST ones (the dial fails instead of hanging on a cluster
		// the client rejects).
		if s.Resolution != model.ResolutionStatic {
			continue
		}
		for _, p := range s.Ports {
			if !model.HTTPLike(p.Protocol) {
				continue
			}
			cn := model.ClusterName(s.Hostname, p.Number)
			for _, h := range grpcHosts(s) {
				name := APIListenerName(h, p.Number)
				addValid(&bad, r.APIListeners, "Listener", name, buildAPIListener(name, cn, opts))
			}
		}
	}
	return bad
}

// generateRoutes fills r's Routes and Listeners.
func generateRoutes(r *Resources, entries []*model.Entry, opts GenOptions) []Invalid {
	var bad []Invalid
	vhosts := map[uint32][]*route.VirtualHost{}
	taken := map[uint32]map[string]bool{}
	// FQDN-level domains first so a short name never takes a host's own name.
	for _, e := range entries {
		for _, p := range e.Service.Ports {
			if taken[p.Number] == nil {
				taken[p.Number] = map[string]bool{}
			}
			taken[p.Number][e.Service.Hostname] = true
			taken[p.Number][e.Service.Hostname+":"+RouteName(p.Number)] = true
		}
	}
	for _, e := range entries {
		s := e.Service
		for _, p := range s.Ports {
			if !model.HTTPLike(p.Protocol) {
				continue
			}
			vhosts[p.Number] = append(vhosts[p.Number], buildVirtualHost(s, p, taken[p.Number], opts))
		}
	}
	for port, vh := range vhosts {
		if ProxyPort(port) {
			continue
		}
		rn := RouteName(port)
		addValid(&bad, r.Routes, "RouteConfiguration", rn, &route.RouteConfiguration{Name: rn, VirtualHosts: vh,
			ValidateClusters: wrapperspb.Bool(false)})
		ln := ListenerName(port)
		addValid(&bad, r.Listeners, "Listener", ln, buildListenerRDS(ln, port, rn))
	}
	return bad
}

// proxyPorts are the ports the proxy binds itself: Envoy's (and xdsproxy's) admin 15000, the
// capture ports 15001 (outbound) and 15006 (inbound), health 15021 and Prometheus 15090. istiod
// (conflictWithReservedListener) builds no listener on 15001/15006/15021/15090; 15000 is added
// because the gateways serve admin on all addresses, so a 0.0.0.0:15000 listener cannot bind
// and the proxy would reject every LDS response.
var proxyPorts = map[uint32]bool{15000: true, 15001: true, 15006: true, 15021: true, 15090: true}

// ProxyPort reports whether port is one the proxy binds itself (no listener is generated on it).
func ProxyPort(port uint32) bool { return proxyPorts[port] }

func grpcHosts(s *model.Service) []string {
	if s.KubeName == "" {
		return []string{s.Hostname}
	}
	return []string{s.Hostname, s.KubeName + "." + s.Namespace, s.KubeName + "." + s.Namespace + ".svc"}
}

// BuildCLA is the ClusterLoadAssignment of one service port: ready endpoints only.
func BuildCLA(e *model.Entry, p model.Port) *endpoint.ClusterLoadAssignment {
	cn := model.ClusterName(e.Service.Hostname, p.Number)
	eps := e.Endpoints[p.Number]
	lbs := make([]*endpoint.LbEndpoint, 0, len(eps))
	for _, ep := range eps {
		if !ep.Healthy {
			continue
		}
		lb := &endpoint.LbEndpoint{
			HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Address: socketAddress(ep.Address, ep.Port)}},
			HealthStatus: core.HealthStatus_HEALTHY,
		}
		if ep.Weight > 1 { // unset means equal weights: saves an allocation per endpoint
			lb.LoadBalancingWeight = wrapperspb.UInt32(ep.Weight)
		}
		lbs = append(lbs, lb)
	}
	cla := &endpoint.ClusterLoadAssignment{ClusterName: cn}
	if len(lbs) > 0 {
		// One locality; grpc-go refuses a locality without an ID and ignores one without a weight.
		cla.Endpoints = []*endpoint.LocalityLbEndpoints{{Locality: &core.Locality{}, LbEndpoints: lbs, LoadBalancingWeight: wrapperspb.UInt32(1)}}
	}
	return cla
}

func socketAddress(addr string, port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}
}

// adsSource is the config source of EDS clusters and RDS routes. initial_fetch_timeout 0 (as
// istiod sets it) makes Envoy wait for the first response instead of warming with an empty
// assignment or route table after Envoy's default 15 s.
var adsSource = &core.ConfigSource{
	ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	InitialFetchTimeout:   durationpb.New(0),
	ResourceApiVersion:    core.ApiVersion_V3,
}

// connectTimeout is istiod's cluster connect_timeout: MeshConfig.connectTimeout's default.
const connectTimeout = 10 * time.Second

// BuildCluster is the cluster of one service port.
func BuildCluster(e *model.Entry, p model.Port) *cluster.Cluster {
	cn := model.ClusterName(e.Service.Hostname, p.Number)
	c := &cluster.Cluster{
		Name:           cn,
		ConnectTimeout: durationpb.New(connectTimeout),
		LbPolicy:       cluster.Cluster_ROUND_ROBIN,
	}
	switch e.Service.Resolution {
	case model.ResolutionStatic:
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_EDS}
		c.EdsClusterConfig = &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource, ServiceName: cn}
	case model.ResolutionDNS:
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_STRICT_DNS}
		c.DnsLookupFamily = cluster.Cluster_V4_ONLY
		cla := BuildCLA(e, p)
		if len(cla.Endpoints) == 0 {
			// A DNS service without endpoints resolves its own host name (Istio's behaviour).
			port := p.Number
			if p.TargetPort != 0 {
				port = p.TargetPort
			}
			cla.Endpoints = []*endpoint.LocalityLbEndpoints{{LbEndpoints: []*endpoint.LbEndpoint{{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
					Address: socketAddress(e.Service.Hostname, port)}}}}}}
		}
		c.LoadAssignment = cla
	case model.ResolutionNone:
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
		c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
	}
	if p.Protocol == "HTTP2" || p.Protocol == "GRPC" || p.Protocol == "GRPC-WEB" {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(&httpopts.HttpProtocolOptions{
				UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{
					ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
						ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
							Http2ProtocolOptions: &core.Http2ProtocolOptions{}}}}}),
		}
	}
	return c
}

func buildVirtualHost(s *model.Service, p model.Port, taken map[string]bool, opts GenOptions) *route.VirtualHost {
	ps := RouteName(p.Number)
	domains := []string{s.Hostname, s.Hostname + ":" + ps}
	var extra []string
	if s.KubeName != "" {
		// istiod's alt hosts: the host minus the DNS domain it shares with the proxy's
		// (ns.svc.cluster.local): name, name.ns, name.ns.svc in the proxy's namespace; name.ns,
		// name.ns.svc elsewhere.
		shorts := []string{s.KubeName + "." + s.Namespace, s.KubeName + "." + s.Namespace + ".svc"}
		if s.Namespace == opts.Namespace {
			shorts = append([]string{s.KubeName}, shorts...)
		}
		for _, short := range shorts {
			extra = append(extra, short, short+":"+ps)
		}
		if s.ClusterIP != "" {
			extra = append(extra, s.ClusterIP, s.ClusterIP+":"+ps)
		}
	}
	for _, d := range extra {
		if !taken[d] {
			taken[d] = true
			domains = append(domains, d)
		}
	}
	return &route.VirtualHost{
		Name:    APIListenerName(s.Hostname, p.Number),
		Domains: domains,
		Routes:  []*route.Route{clusterRoute(model.ClusterName(s.Hostname, p.Number), opts)},
	}
}

// The parts every generated route has in common, one message each, shared by all of them: a
// scope at 50 000 ServiceEntries has 100 000 routes (virtual hosts and API listeners), and
// building these per route was a tenth of its generation time and 35 MiB of its heap. Generated
// resources are never changed once built, so sharing is safe.
var (
	sharedRetryPolicy = DefaultRetryPolicy()
	sharedNoTimeout   = durationpb.New(0)
	sharedPrefixMatch = &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}
)

func clusterRoute(cn string, opts GenOptions) *route.Route {
	action := &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: cn}}
	if !opts.NoRouteDefaults {
		// istiod's route without a VirtualService: timeout 0 disables Envoy's 15 s default.
		action.Timeout = sharedNoTimeout
		action.RetryPolicy = sharedRetryPolicy
	}
	return &route.Route{Match: sharedPrefixMatch, Action: &route.Route_Route{Route: action}}
}

// DefaultRetryPolicy is istiod's default retry policy (route/retry.DefaultPolicy): 2 retries on
// connect failures, refused streams, gRPC unavailable/cancelled and 503, each on another host
// where one is available.
func DefaultRetryPolicy() *route.RetryPolicy {
	return &route.RetryPolicy{
		RetryOn:                       "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
		NumRetries:                    wrapperspb.UInt32(2),
		RetriableStatusCodes:          []uint32{http.StatusServiceUnavailable},
		HostSelectionRetryMaxAttempts: 5,
		RetryHostPredicate: []*route.RetryPolicy_RetryHostPredicate{{
			Name: "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &route.RetryPolicy_RetryHostPredicate_TypedConfig{
				TypedConfig: mustAny(&previoushosts.PreviousHostsPredicate{})},
		}},
	}
}

var routerFilter = &hcm.HttpFilter{
	Name:       "envoy.filters.http.router",
	ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&router.Router{})},
}

// LocalReplyConfig adds respflags.Header = %RESPONSE_FLAGS% to every reply Envoy makes itself
// (a response flag is set exactly when Envoy, not the upstream, produced the reply or failed it).
func LocalReplyConfig() *hcm.LocalReplyConfig {
	return &hcm.LocalReplyConfig{Mappers: []*hcm.ResponseMapper{{
		Filter: &accesslog.AccessLogFilter{FilterSpecifier: &accesslog.AccessLogFilter_ResponseFlagFilter{
			ResponseFlagFilter: &accesslog.ResponseFlagFilter{}}},
		HeadersToAdd: []*core.HeaderValueOption{{
			Header:       &core.HeaderValue{Key: respflags.Header, Value: "%RESPONSE_FLAGS%"},
			AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}},
	}}}
}

// buildListenerRDS is an HTTP listener on 0.0.0.0:port taking the route configuration rds.
func buildListenerRDS(name string, port uint32, rds string) *listener.Listener {
	manager := &hcm.HttpConnectionManager{
		StatPrefix: "outbound_0.0.0.0_" + RouteName(port),
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource: adsSource, RouteConfigName: rds}},
		HttpFilters:      []*hcm.HttpFilter{routerFilter},
		LocalReplyConfig: LocalReplyConfig(),
	}
	return &listener.Listener{
		Name:             name,
		Address:          socketAddress("0.0.0.0", port),
		TrafficDirection: core.TrafficDirection_OUTBOUND,
		FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{
			Name:       "envoy.filters.network.http_connection_manager",
			ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(manager)},
		}}}},
	}
}

func buildAPIListener(name, cn string, opts GenOptions) *listener.Listener {
	manager := &hcm.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
			Name: name,
			VirtualHosts: []*route.VirtualHost{{Name: name, Domains: []string{"*"},
				Routes: []*route.Route{clusterRoute(cn, opts)}}},
		}},
		HttpFilters: []*hcm.HttpFilter{routerFilter},
	}
	return &listener.Listener{
		Name:        name,
		ApiListener: &listener.ApiListener{ApiListener: mustAny(manager)},
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", m, err)) // static config types: cannot fail
	}
	return a
}
