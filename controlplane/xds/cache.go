package xds

import (
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// Caches are one go-control-plane LinearCache per resource type, muxed by type URL. Linear
// caches answer requests for any subset of their resources (what proxyless gRPC sends; a
// snapshot cache with ads=true would not), notify only the watches of changed resources (so an
// EDS push reaches only the proxies watching the affected clusters), and serve Delta.
//
// Envoy and proxyless gRPC need different listeners: Envoy asks for every listener (wildcard)
// and must not get API listeners; gRPC asks for "HOST:PORT" by name. So listeners live in two
// caches, chosen by the node (see IsProxyless).
type Caches struct {
	Clusters     *cachev3.LinearCache
	Endpoints    *cachev3.LinearCache
	Routes       *cachev3.LinearCache
	Listeners    *cachev3.LinearCache
	APIListeners *cachev3.LinearCache
	Mux          *cachev3.MuxCache
}

const (
	keyAPIListeners = "grpc-listeners"
)

// NewCaches creates empty caches. prefix distinguishes this process's versions from a previous
// instance's (a reconnecting proxy then always gets a full answer).
func NewCaches(prefix string) *Caches {
	c := &Caches{
		Clusters:     cachev3.NewLinearCache(resourcev3.ClusterType, cachev3.WithVersionPrefix(prefix)),
		Endpoints:    cachev3.NewLinearCache(resourcev3.EndpointType, cachev3.WithVersionPrefix(prefix)),
		Routes:       cachev3.NewLinearCache(resourcev3.RouteType, cachev3.WithVersionPrefix(prefix)),
		Listeners:    cachev3.NewLinearCache(resourcev3.ListenerType, cachev3.WithVersionPrefix(prefix)),
		APIListeners: cachev3.NewLinearCache(resourcev3.ListenerType, cachev3.WithVersionPrefix(prefix)),
	}
	classify := func(typeURL string, node *core.Node) string {
		if typeURL == resourcev3.ListenerType && IsProxyless(node) {
			return keyAPIListeners
		}
		return typeURL
	}
	c.Mux = &cachev3.MuxCache{
		Classify: func(r *cachev3.Request) string { return classify(r.GetTypeUrl(), r.GetNode()) },
		ClassifyDelta: func(r *cachev3.DeltaRequest) string {
			return classify(r.GetTypeUrl(), r.GetNode())
		},
		Caches: map[string]cachev3.Cache{
			resourcev3.ClusterType:  c.Clusters,
			resourcev3.EndpointType: c.Endpoints,
			resourcev3.RouteType:    c.Routes,
			resourcev3.ListenerType: c.Listeners,
			keyAPIListeners:         c.APIListeners,
		},
	}
	return c
}

// IsProxyless reports whether node is a proxyless gRPC client: grpc-go's user agent, Istio's
// GENERATOR=grpc node metadata, or a node id starting with "grpc~".
func IsProxyless(node *core.Node) bool {
	if node == nil {
		return false
	}
	if strings.HasPrefix(node.GetUserAgentName(), "gRPC") || strings.HasPrefix(node.GetId(), "grpc~") {
		return true
	}
	if g, ok := node.GetMetadata().GetFields()["GENERATOR"]; ok && g.GetStringValue() == "grpc" {
		return true
	}
	return false
}

// ForNode returns the cache serving typeURL to node.
func (c *Caches) ForNode(typeURL string, node *core.Node) *cachev3.LinearCache {
	switch typeURL {
	case resourcev3.ClusterType:
		return c.Clusters
	case resourcev3.EndpointType:
		return c.Endpoints
	case resourcev3.RouteType:
		return c.Routes
	case resourcev3.ListenerType:
		if IsProxyless(node) {
			return c.APIListeners
		}
		return c.Listeners
	}
	return nil
}

// ShortType is the istiod label for a type URL: cds, eds, lds, rds.
func ShortType(typeURL string) string {
	switch typeURL {
	case resourcev3.ClusterType:
		return "cds"
	case resourcev3.EndpointType:
		return "eds"
	case resourcev3.ListenerType:
		return "lds"
	case resourcev3.RouteType:
		return "rds"
	}
	if i := strings.LastIndex(typeURL, "."); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}
