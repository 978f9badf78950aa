package model

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	apinet "istio.io/api/networking/v1"
)

// GatewayConfig is the config key of every Gateway and VirtualService change: only gateway
// proxies read them (the reference supports VirtualServices bound to gateways, not to "mesh"),
// so a full push for it regenerates the gateways' scopes alone.
const GatewayConfig = "Gateway"

// Gateway is an Istio Gateway (networking.istio.io/v1) as the reference reads it: the gateway
// proxies its selector selects, in any namespace (istiod's default), and its plaintext HTTP
// servers. Gateways are immutable; the model replaces them.
type Gateway struct {
	Namespace, Name string
	Created         time.Time
	Selector        map[string]string
	Servers         []GatewayServer
}

// GatewayServer is one server of a Gateway: a port and the hosts it admits, "host" or
// "ns/host" (ns "*" or "." or a namespace: where the VirtualServices that may bind come from).
type GatewayServer struct {
	Port     uint32
	Protocol string
	Hosts    []string
}

// VirtualService is an Istio VirtualService as the reference reads it: its hosts, the gateways
// it binds to ("ns/name", resolved), and its HTTP routes.
type VirtualService struct {
	Namespace, Name string
	Created         time.Time
	Hosts           []string
	Gateways        []string
	HTTP            []HTTPRoute
}

// HTTPRoute is one HTTP route of a VirtualService: an URI prefix to match ("" matches every
// request) and the weighted destinations.
type HTTPRoute struct {
	Prefix       string
	Destinations []RouteDestination
}

// RouteDestination is a route's destination: a host (as the VirtualService names it), a port
// (0: the host's only port) and a weight (0: split evenly).
type RouteDestination struct {
	Host   string
	Port   uint32
	Weight int32
}

// ConvertGateway turns a Gateway into the model's form. Servers the reference cannot serve
// (TLS, TCP) are left out and reported, as is a Gateway without a selector.
func ConvertGateway(ns, name string, created time.Time, spec *apinet.Gateway) (*Gateway, []Skip) {
	obj := "Gateway/" + ns + "/" + name
	gw := &Gateway{Namespace: ns, Name: name, Created: created}
	var skips []Skip
	if len(spec.GetSelector()) == 0 {
		// istiod would select every gateway proxy of the mesh: a Gateway meant for nobody.
		return nil, []Skip{{Object: obj, What: "selector", Reason: "empty"}}
	}
	gw.Selector = make(map[string]string, len(spec.GetSelector()))
	for k, v := range spec.GetSelector() {
		gw.Selector[k] = v
	}
	for _, s := range spec.GetServers() {
		p := strings.ToUpper(s.GetPort().GetProtocol())
		if !HTTPLike(p) || s.GetTls() != nil {
			skips = append(skips, Skip{Object: obj, What: fmt.Sprintf("server %d/%s", s.GetPort().GetNumber(), p), Reason: "only plaintext HTTP servers are served"})
			continue
		}
		gw.Servers = append(gw.Servers, GatewayServer{Port: s.GetPort().GetNumber(), Protocol: p, Hosts: slices.Clone(s.GetHosts())})
	}
	return gw, skips
}

// ConvertVirtualService turns a VirtualService into the model's form. Matches other than an
// URI prefix or exact path, and every other HTTP feature (rewrites, faults, mirrors), are left
// out and reported: the route stays, as the part the reference serves.
func ConvertVirtualService(ns, name string, created time.Time, spec *apinet.VirtualService) (*VirtualService, []Skip) {
	obj := "VirtualService/" + ns + "/" + name
	vs := &VirtualService{Namespace: ns, Name: name, Created: created, Hosts: slices.Clone(spec.GetHosts())}
	var skips []Skip
	for _, g := range spec.GetGateways() {
		if g == "mesh" {
			skips = append(skips, Skip{Object: obj, What: "gateway mesh", Reason: "the reference applies VirtualServices to gateways only"})
			continue
		}
		if !strings.Contains(g, "/") {
			g = ns + "/" + g
		}
		vs.Gateways = append(vs.Gateways, g)
	}
	for i, h := range spec.GetHttp() {
		r := HTTPRoute{}
		for _, m := range h.GetMatch() {
			switch u := m.GetUri().GetMatchType().(type) {
			case *apinet.StringMatch_Prefix:
				r.Prefix = u.Prefix
			case *apinet.StringMatch_Exact:
				r.Prefix = u.Exact
			default:
				skips = append(skips, Skip{Object: obj, What: fmt.Sprintf("http[%d] match", i), Reason: "only URI prefix and exact matches are served"})
			}
			break // the first match only
		}
		for _, d := range h.GetRoute() {
			r.Destinations = append(r.Destinations, RouteDestination{Host: d.GetDestination().GetHost(),
				Port: d.GetDestination().GetPort().GetNumber(), Weight: d.GetWeight()})
		}
		if len(r.Destinations) == 0 {
			skips = append(skips, Skip{Object: obj, What: fmt.Sprintf("http[%d]", i), Reason: "no route destination (redirects and direct responses are not served)"})
			continue
		}
		vs.HTTP = append(vs.HTTP, r)
	}
	return vs, skips
}

// Selects reports whether the Gateway selects a proxy with labels.
func (g *Gateway) Selects(labels map[string]string) bool {
	for k, v := range g.Selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Key is the Gateway's "ns/name", as VirtualServices name it.
func (g *Gateway) Key() string { return g.Namespace + "/" + g.Name }

// Admits reports whether server s admits VirtualService host h from namespace vsNS (istiod's
// host matching: the server's "ns/host" must name the VirtualService's namespace, or "*", or
// "." for the Gateway's own; "*" and "*.suffix" match by suffix).
func (s GatewayServer) Admits(gwNS, vsNS, h string) bool {
	for _, sh := range s.Hosts {
		hns, host, ok := strings.Cut(sh, "/")
		if !ok {
			hns, host = "*", sh
		}
		switch hns {
		case "*":
		case ".":
			if vsNS != gwNS {
				continue
			}
		default:
			if hns != vsNS {
				continue
			}
		}
		if hostMatches(host, h) || (strings.HasPrefix(h, "*") && host == "*") {
			return true
		}
	}
	return false
}

// SetGateway adds or updates a Gateway (gw nil: it was refused; treated as deleted). A full
// push of the gateways' scopes.
func (m *Model) SetGateway(ns, name string, gw *Gateway) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gw == nil {
		delete(m.gateways, ns+"/"+name)
	} else {
		m.gateways[ns+"/"+name] = gw
	}
	var ch Change
	ch.fullConfig(GatewayConfig, "gateway")
	return ch
}

// DeleteGateway removes a Gateway.
func (m *Model) DeleteGateway(ns, name string) Change { return m.SetGateway(ns, name, nil) }

// SetVirtualService adds or updates a VirtualService (vs nil: deleted). A full push of the
// gateways' scopes.
func (m *Model) SetVirtualService(ns, name string, vs *VirtualService) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	if vs == nil {
		delete(m.virtualServices, ns+"/"+name)
	} else {
		m.virtualServices[ns+"/"+name] = vs
	}
	var ch Change
	ch.fullConfig(GatewayConfig, "virtualservice")
	return ch
}

// DeleteVirtualService removes a VirtualService.
func (m *Model) DeleteVirtualService(ns, name string) Change {
	return m.SetVirtualService(ns, name, nil)
}

// GatewaysFor returns the Gateways that select a gateway proxy with labels, by namespace and
// name.
func (m *Model) GatewaysFor(labels map[string]string) []*Gateway {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*Gateway
	for _, g := range m.gateways {
		if g.Selects(labels) {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// Gateway returns the Gateway "ns/name" (nil when absent).
func (m *Model) Gateway(key string) *Gateway {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.gateways[key]
}

// VirtualServicesFor returns the VirtualServices bound to any of the Gateways keys ("ns/name"),
// oldest first (then by namespace and name), as istiod orders them.
func (m *Model) VirtualServicesFor(keys []string) []*VirtualService {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*VirtualService
	for _, vs := range m.virtualServices {
		if slices.ContainsFunc(vs.Gateways, func(g string) bool { return slices.Contains(keys, g) }) {
			out = append(out, vs)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}
