package xds

import (
	"context"
	"fmt"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshchaos/meshchaos/controlplane/model"
)

// Generation is where a push's clusters, listeners and routes are generated.
//
// PerScope (the default) generates them once per scope (istiod's SidecarScope: a namespace, a
// workloadSelector Sidecar's proxies, a gateway set) and shares the generated and encoded
// resources among the scope's proxies: what the reference control plane is built to do.
//
// PerProxy builds every CDS, LDS and RDS response a SotW proxy is sent again for that proxy:
// the scope's resources of that type are generated from the inputs of the scope's latest
// generation, and those the response carries are encoded, on the proxy's stream, inside a slot
// of the push throttle, before the response is counted and sent. So each full push costs one
// generation and encoding per proxy and type, as in istio up to 1.14, whose unit of a push was
// one proxy (ConfigGenerator.BuildClusters/BuildListeners/BuildHTTPRoutes per proxy, then
// marshalled for that proxy's connection), and pilot_xds_push_time includes it. The content
// is the same as PerScope's (same inputs, same deterministic encoding). The scope's shared
// caches are still generated and kept: they decide which proxies a push reaches and with what
// version, as in PerScope. Delta streams and EDS are served as in PerScope.
type Generation string

// The generation modes (--generation).
const (
	PerScope Generation = "per-scope"
	PerProxy Generation = "per-proxy"
)

// Generations lists the modes, the default first.
var Generations = []Generation{PerScope, PerProxy}

// ParseGeneration reads a --generation value ("" is PerScope); an unknown one is an error that
// lists the known ones.
func ParseGeneration(s string) (Generation, error) {
	switch g := Generation(s); g {
	case "":
		return PerScope, nil
	case PerScope, PerProxy:
		return g, nil
	}
	return "", fmt.Errorf("unknown generation mode %q (known: %s)", s, generationNames())
}

// genInput is what a scope's generation is built from: its visible entries, its options and,
// for a gateway scope, the Gateways and VirtualServices that select it.
type genInput struct {
	entries  []*model.Entry
	opts     GenOptions
	gateways []*model.Gateway
	vss      []*model.VirtualService
}

// resources generates the resources of typeURL (CDS, LDS or RDS) from in, as the scope's
// generation does; proxyless: LDS is the API listeners. Invalid resources are left out, as in
// the scope's generation (which reported them).
func (in *genInput) resources(typeURL string, proxyless bool) map[string]types.Resource {
	r := &Resources{Clusters: map[string]types.Resource{}, Listeners: map[string]types.Resource{},
		Routes: map[string]types.Resource{}, APIListeners: map[string]types.Resource{}}
	switch {
	case typeURL == resourcev3.ClusterType:
		generateClusters(r, in.entries, false)
		return r.Clusters
	case typeURL == resourcev3.ListenerType && proxyless:
		generateAPIListeners(r, in.entries, in.opts)
		return r.APIListeners
	case in.opts.Router:
		listeners, routes, _ := gatewayResources(in.entries, in.gateways, in.vss, in.opts)
		if typeURL == resourcev3.ListenerType {
			return listeners
		}
		return routes
	case typeURL == resourcev3.ListenerType:
		// istiod's LDS builds the listeners, not the routes they name over RDS. A port whose
		// route configuration fails validation still gets its listener here (its scope's
		// generation leaves it out); a generated route configuration never has so far.
		generateListeners(r, in.entries)
		return r.Listeners
	default:
		generateRoutes(r, in.entries, in.opts)
		return r.Routes
	}
}

// generateListeners fills r's Listeners as generateRoutes does, without the routes.
func generateListeners(r *Resources, entries []*model.Entry) {
	for _, e := range entries {
		for _, p := range e.Service.Ports {
			if !model.HTTPLike(p.Protocol) || ProxyPort(p.Number) {
				continue
			}
			ln := ListenerName(p.Number)
			if _, ok := r.Listeners[ln]; ok {
				continue
			}
			var bad []Invalid
			addValid(&bad, r.Listeners, "Listener", ln, buildListenerRDS(ln, p.Number, RouteName(p.Number)))
		}
	}
}

// generateFor builds again, for one proxy of sc, the resources of typeURL named in names (in
// that order) and encodes them; ok is false when sc has no generation yet or one of names is
// not generated (the caller then sends the scope's response).
func (p *Pusher) generateFor(sc *ScopeCaches, typeURL string, proxyless bool, names []string) (out []*anypb.Any, ok bool, err error) {
	sc.mu.Lock()
	in := sc.input
	sc.mu.Unlock()
	if in == nil {
		return nil, false, nil
	}
	res := in.resources(typeURL, proxyless)
	out = make([]*anypb.Any, len(names))
	for i, n := range names {
		r, found := res[n]
		if !found {
			return nil, false, nil
		}
		b, err := cachev3.MarshalResource(r)
		if err != nil {
			return nil, false, fmt.Errorf("encode %s %q for one proxy: %w", ShortType(typeURL), n, err)
		}
		out[i] = &anypb.Any{TypeUrl: typeURL, Value: b}
	}
	p.m.ProxyGenerations.WithLabelValues(ShortType(typeURL)).Inc()
	return out, true, nil
}

// renderForProxy is the sotwserver Render of the PerProxy mode: a CDS, LDS or RDS response is
// generated and encoded again for node, inside a push-throttle slot (istiod's throttle bounds
// whole per-proxy pushes, generation included), with the names, order and version of the
// scope's response. Other types, and responses of a scope not generated yet, go out as built.
func (s *Server) renderForProxy(ctx context.Context, node *core.Node, out *discovery.DiscoveryResponse) (*discovery.DiscoveryResponse, error) {
	typeURL := out.GetTypeUrl()
	switch typeURL {
	case resourcev3.ClusterType, resourcev3.ListenerType, resourcev3.RouteType:
	default:
		return out, nil
	}
	sc := s.caches.ScopeOf(node)
	if sc == nil {
		return out, nil
	}
	names, err := responseNames(out)
	if err != nil {
		return nil, err
	}
	if err := s.sends.acquire(ctx); err != nil {
		return nil, err
	}
	anys, ok, err := s.pusher.generateFor(sc, typeURL, IsProxyless(node), names)
	s.sends.release()
	if err != nil || !ok {
		if err != nil {
			s.log.Error("per-proxy generation; sending the scope's response", "type", ShortType(typeURL), "err", err)
		}
		return out, nil
	}
	return &discovery.DiscoveryResponse{VersionInfo: out.GetVersionInfo(), TypeUrl: typeURL, Resources: anys}, nil
}

// responseNames lists the names of a response's resources, in order, from their encoding:
// field 1 (name) of each Cluster, Listener or RouteConfiguration. A full-state answer carries
// its resources as the encoded resources field (watchcache's fullAnswer), others as Anys.
func responseNames(out *discovery.DiscoveryResponse) ([]string, error) {
	if len(out.GetResources()) > 0 {
		names := make([]string, len(out.GetResources()))
		for i, a := range out.GetResources() {
			n, err := fieldOne(a.GetValue())
			if err != nil {
				return nil, fmt.Errorf("a %s response's resource %d: %w", ShortType(out.GetTypeUrl()), i, err)
			}
			names[i] = n
		}
		return names, nil
	}
	var names []string
	b := []byte(out.ProtoReflect().GetUnknown())
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("a %s response: %w", ShortType(out.GetTypeUrl()), protowire.ParseError(n))
		}
		b = b[n:]
		if num != resourcesField || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil, fmt.Errorf("a %s response: %w", ShortType(out.GetTypeUrl()), protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		anyBytes, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, fmt.Errorf("a %s response: %w", ShortType(out.GetTypeUrl()), protowire.ParseError(n))
		}
		b = b[n:]
		value, err := anyValue(anyBytes)
		if err != nil {
			return nil, err
		}
		name, err := fieldOne(value)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// resourcesField is DiscoveryResponse.resources' field number; anyValueField Any.value's.
const (
	resourcesField = 2
	anyValueField  = 2
)

// anyValue is the value field of an encoded Any.
func anyValue(b []byte) ([]byte, error) {
	var value []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num == anyValueField && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			value, b = v, b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return value, nil
}

// fieldOne is the string field 1 of an encoded message (a resource's name).
func fieldOne(b []byte) (string, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", protowire.ParseError(n)
			}
			return string(v), nil
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return "", protowire.ParseError(n)
		}
		b = b[n:]
	}
	return "", fmt.Errorf("no name (field 1) in a resource")
}

// String is the mode's flag value.
func (g Generation) String() string { return string(g) }

// generationNames lists the modes for help texts.
func generationNames() string {
	out := make([]string, len(Generations))
	for i, g := range Generations {
		out[i] = string(g)
	}
	return strings.Join(out, ", ")
}
