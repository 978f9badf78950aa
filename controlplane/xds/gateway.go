package xds

import (
	"sort"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshchaos/meshchaos/controlplane/model"
)

// Gateway proxies (node type "router") get their listeners and routes from the Gateways that
// select them and the VirtualServices bound to those, as istiod builds a gateway's config:
//
//   - one listener per server port, "0.0.0.0_PORT" on 0.0.0.0:PORT, whose HTTP connection
//     manager takes the route configuration "http.PORT" over RDS (istiod's gateway RDS name);
//   - in it, one virtual host per VirtualService host a server on that port admits, named
//     "HOST:PORT", with the domains HOST and HOST:*; the first VirtualService (oldest) to claim
//     a host has it;
//   - each HTTP route of the VirtualService: its URI prefix (or "/"), to the destination's
//     cluster "outbound|PORT||FQDN" (weighted clusters for several destinations), with istiod's
//     route defaults (no timeout, the default retry policy);
//   - no VirtualService: a route configuration without virtual hosts (every request 404 NR).
//
// A gateway no Gateway selects gets no listener at all. Clusters are every visible service's,
// as for sidecars.

// GatewayRouteName is the route configuration of a gateway's server port.
func GatewayRouteName(port uint32) string { return "http." + strconv.FormatUint(uint64(port), 10) }

// generateGatewayRoutes fills r's Listeners and Routes for gateway proxies selected by gws.
func generateGatewayRoutes(r *Resources, entries []*model.Entry, gws []*model.Gateway, vss []*model.VirtualService, opts GenOptions) []Invalid {
	var bad []Invalid
	type server struct {
		gw *model.Gateway
		s  model.GatewayServer
	}
	byPort := map[uint32][]server{}
	for _, g := range gws {
		for _, s := range g.Servers {
			byPort[s.Port] = append(byPort[s.Port], server{g, s})
		}
	}
	for port, servers := range byPort {
		if ProxyPort(port) {
			continue
		}
		var vhosts []*route.VirtualHost
		taken := map[string]bool{}
		for _, vs := range vss {
			for _, h := range vs.Hosts {
				admitted := false
				for _, sv := range servers {
					bound := false
					for _, key := range vs.Gateways {
						bound = bound || key == sv.gw.Key()
					}
					admitted = admitted || (bound && sv.s.Admits(sv.gw.Namespace, vs.Namespace, h))
				}
				if !admitted || taken[h] {
					continue
				}
				taken[h] = true
				vhosts = append(vhosts, &route.VirtualHost{
					Name:    h + ":" + strconv.FormatUint(uint64(port), 10),
					Domains: []string{h, h + ":*"},
					Routes:  gatewayRoutes(vs, entries, opts),
				})
			}
		}
		sort.SliceStable(vhosts, func(i, j int) bool { return vhosts[i].Name < vhosts[j].Name })
		rn := GatewayRouteName(port)
		addValid(&bad, r.Routes, "RouteConfiguration", rn, &route.RouteConfiguration{Name: rn, VirtualHosts: vhosts,
			ValidateClusters: wrapperspb.Bool(false)})
		ln := ListenerName(port)
		addValid(&bad, r.Listeners, "Listener", ln, buildListenerRDS(ln, port, rn))
	}
	return bad
}

// gatewayRoutes are the Envoy routes of a VirtualService's HTTP routes.
func gatewayRoutes(vs *model.VirtualService, entries []*model.Entry, opts GenOptions) []*route.Route {
	out := make([]*route.Route, 0, len(vs.HTTP))
	for _, h := range vs.HTTP {
		match := sharedPrefixMatch
		if h.Prefix != "" && h.Prefix != "/" {
			match = &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: h.Prefix}}
		}
		action := &route.RouteAction{}
		if len(h.Destinations) == 1 {
			action.ClusterSpecifier = &route.RouteAction_Cluster{Cluster: destinationCluster(h.Destinations[0], vs.Namespace, entries)}
		} else {
			wc := &route.WeightedCluster{}
			for _, d := range h.Destinations {
				w := uint32(d.Weight)
				if w == 0 {
					w = uint32(100 / len(h.Destinations))
				}
				wc.Clusters = append(wc.Clusters, &route.WeightedCluster_ClusterWeight{
					Name: destinationCluster(d, vs.Namespace, entries), Weight: wrapperspb.UInt32(w)})
			}
			action.ClusterSpecifier = &route.RouteAction_WeightedClusters{WeightedClusters: wc}
		}
		if !opts.NoRouteDefaults {
			action.Timeout = sharedNoTimeout
			action.RetryPolicy = sharedRetryPolicy
		}
		out = append(out, &route.Route{Match: match, Action: &route.Route_Route{Route: action}})
	}
	return out
}

// destinationCluster is the cluster of a route destination: its host resolved as istiod
// resolves a VirtualService's short names (in the VirtualService's namespace), its port or the
// service's only one. A host the model does not know keeps its name: the proxy answers 503 NC.
func destinationCluster(d model.RouteDestination, vsNS string, entries []*model.Entry) string {
	host, port := d.Host, d.Port
	for _, e := range entries {
		s := e.Service
		short := s.KubeName != "" && (host == s.KubeName && s.Namespace == vsNS ||
			host == s.KubeName+"."+s.Namespace || host == s.KubeName+"."+s.Namespace+".svc")
		if s.Hostname != host && !short {
			continue
		}
		host = s.Hostname
		if port == 0 && len(s.Ports) == 1 {
			port = s.Ports[0].Number
		}
		break
	}
	return model.ClusterName(host, port)
}

// gatewayResources are a gateway scope's listeners and routes in the form generate returns.
func gatewayResources(entries []*model.Entry, gws []*model.Gateway, vss []*model.VirtualService, opts GenOptions) (listeners, routes map[string]types.Resource, bad []Invalid) {
	r := &Resources{Listeners: map[string]types.Resource{}, Routes: map[string]types.Resource{}}
	bad = generateGatewayRoutes(r, entries, gws, vss, opts)
	return r.Listeners, r.Routes, bad
}

// gatewayKeys splits a gateway scope's Selected into the Gateways' "ns/name".
func gatewayKeys(selected string) []string {
	if selected == "" {
		return nil
	}
	return strings.Split(selected, ",")
}
