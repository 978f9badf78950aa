package xds

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshchaos/meshchaos/controlplane/model"
)

// Caches hold what the proxies are served, as go-control-plane LinearCaches. Linear caches
// answer requests for any subset of their resources (what proxyless gRPC sends; a snapshot cache
// with ads=true would not), notify only the watches of changed resources, and serve Delta.
//
// Clusters, listeners and routes depend on the proxy's scope (istiod's SidecarScope): the
// proxy's namespace decides which Sidecar applies and which short host names resolve. So they
// live in one set of caches per namespace (ScopeCaches), generated once per scope and shared by
// every proxy of that namespace; a scope is created, and filled, when the first proxy of its
// namespace asks. ClusterLoadAssignments do not depend on the scope (a proxy asks only for the
// clusters it was given): one Endpoints cache serves everybody, so an EDS push reaches only the
// proxies watching the affected clusters.
//
// Envoy and proxyless gRPC need different listeners: Envoy asks for every listener (wildcard)
// and must not get API listeners; gRPC asks for "HOST:PORT" by name. So a scope has two listener
// caches, chosen by the node (see IsProxyless).
type Caches struct {
	Endpoints *cachev3.LinearCache

	prefix string
	mu     sync.Mutex
	scopes map[string]*ScopeCaches
	latest []*model.Entry // the model as of the latest full push
	// populate fills a new scope from latest (set by the pusher; nil: scopes start empty).
	populate func(sc *ScopeCaches, entries []*model.Entry)
}

// ScopeCaches are the scope-dependent caches of the sidecars, or of the gateways, of one
// namespace.
type ScopeCaches struct {
	// Key names the scope: the namespace for sidecars, "router~NS" for gateways.
	Key string
	// Namespace is the proxies' namespace ("" for proxies that do not say theirs).
	Namespace string
	// Gateway: the scope of router (gateway) proxies, which no Sidecar scopes (as istiod:
	// gateways get the namespace's default scope, egress "*/*").
	Gateway      bool
	Clusters     *cachev3.LinearCache
	Routes       *cachev3.LinearCache
	Listeners    *cachev3.LinearCache
	APIListeners *cachev3.LinearCache

	ready     chan struct{} // closed once filled for the first time
	mu        sync.Mutex    // one generation into these caches at a time
	generated bool
	sidecar   *model.Sidecar
	entries   []*model.Entry      // the visible entries the caches were generated from
	hosts     map[string]struct{} // their host names
	pushes    int                 // generations written (for tests and /debug/push_status)
}

var _ cachev3.Cache = (*Caches)(nil)

// NewCaches creates empty caches. prefix distinguishes this process's versions from a previous
// instance's (a reconnecting proxy then always gets a full answer).
func NewCaches(prefix string) *Caches {
	return &Caches{
		Endpoints: cachev3.NewLinearCache(resourcev3.EndpointType, cachev3.WithVersionPrefix(prefix)),
		prefix:    prefix,
		scopes:    map[string]*ScopeCaches{},
	}
}

// Scope returns the caches of the sidecars of namespace ns, creating and filling them on first
// use.
func (c *Caches) Scope(ns string) *ScopeCaches { return c.scope(ns, false) }

// ScopeOf returns the caches of node's scope (see ScopeKey).
func (c *Caches) ScopeOf(node *core.Node) *ScopeCaches {
	return c.scope(ProxyNamespace(node), isGateway(node))
}

// ScopeKey names node's scope: its namespace, or "router~NS" for a gateway (node id "router~...").
func ScopeKey(node *core.Node) string { return keyOf(ProxyNamespace(node), isGateway(node)) }

func keyOf(ns string, gateway bool) string {
	if gateway {
		return "router~" + ns
	}
	return ns
}

func isGateway(node *core.Node) bool { return strings.HasPrefix(node.GetId(), "router~") }

func (c *Caches) scope(ns string, gateway bool) *ScopeCaches {
	key := keyOf(ns, gateway)
	c.mu.Lock()
	sc := c.scopes[key]
	if sc != nil {
		c.mu.Unlock()
		<-sc.ready // never serve a scope before its first fill
		return sc
	}
	// Versions carry the namespace so a proxy moving between scopes never takes one scope's
	// version for another's.
	prefix := c.prefix + key + "-"
	sc = &ScopeCaches{Key: key, Namespace: ns, Gateway: gateway, ready: make(chan struct{}),
		Clusters:     cachev3.NewLinearCache(resourcev3.ClusterType, cachev3.WithVersionPrefix(prefix)),
		Routes:       cachev3.NewLinearCache(resourcev3.RouteType, cachev3.WithVersionPrefix(prefix)),
		Listeners:    cachev3.NewLinearCache(resourcev3.ListenerType, cachev3.WithVersionPrefix(prefix)),
		APIListeners: cachev3.NewLinearCache(resourcev3.ListenerType, cachev3.WithVersionPrefix(prefix)),
	}
	// Filled before anyone else can see it, from the model of the latest full push; a push
	// that starts now waits for sc.mu and then brings it up to date.
	sc.mu.Lock()
	c.scopes[key] = sc
	entries, populate := c.latest, c.populate
	c.mu.Unlock()
	if populate != nil {
		populate(sc, entries)
	}
	sc.mu.Unlock()
	close(sc.ready)
	return sc
}

// Scopes lists the scopes, by key.
func (c *Caches) Scopes() []*ScopeCaches {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*ScopeCaches, 0, len(c.scopes))
	for _, sc := range c.scopes {
		out = append(out, sc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Pushes is how many times this scope's caches were (re)generated.
func (sc *ScopeCaches) Pushes() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.pushes
}

// setLatest records the model of a full push and returns the scopes to bring up to date.
func (c *Caches) setLatest(entries []*model.Entry) []*ScopeCaches {
	c.mu.Lock()
	c.latest = entries
	c.mu.Unlock()
	return c.Scopes()
}

// ForNode returns the cache serving typeURL to node (nil for an unknown type).
func (c *Caches) ForNode(typeURL string, node *core.Node) *cachev3.LinearCache {
	if typeURL == resourcev3.EndpointType {
		return c.Endpoints
	}
	sc := c.ScopeOf(node)
	switch typeURL {
	case resourcev3.ClusterType:
		return sc.Clusters
	case resourcev3.RouteType:
		return sc.Routes
	case resourcev3.ListenerType:
		if IsProxyless(node) {
			return sc.APIListeners
		}
		return sc.Listeners
	}
	return nil
}

// CreateWatch implements cachev3.Cache: the request goes to its node's scope.
func (c *Caches) CreateWatch(r *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	lc := c.ForNode(r.GetTypeUrl(), r.GetNode())
	if lc == nil {
		return nil, fmt.Errorf("no cache for type %s", r.GetTypeUrl())
	}
	return lc.CreateWatch(r, sub, ch)
}

// CreateDeltaWatch implements cachev3.Cache.
func (c *Caches) CreateDeltaWatch(r *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	lc := c.ForNode(r.GetTypeUrl(), r.GetNode())
	if lc == nil {
		return nil, fmt.Errorf("no cache for type %s", r.GetTypeUrl())
	}
	return lc.CreateDeltaWatch(r, sub, ch)
}

// Fetch implements cachev3.Cache (REST xDS; not served).
func (c *Caches) Fetch(ctx context.Context, r *cachev3.Request) (cachev3.Response, error) {
	lc := c.ForNode(r.GetTypeUrl(), r.GetNode())
	if lc == nil {
		return nil, fmt.Errorf("no cache for type %s", r.GetTypeUrl())
	}
	return lc.Fetch(ctx, r)
}

// ProxyNamespace is the namespace of a proxy as istiod finds it: the NAMESPACE node metadata,
// else the node id "TYPE~IP~POD.NS~NS.svc.cluster.local" (the NS after the pod name); "" when
// neither says (such a proxy gets the root namespace's Sidecar, or everything).
func ProxyNamespace(node *core.Node) string {
	if ns := node.GetMetadata().GetFields()["NAMESPACE"].GetStringValue(); ns != "" {
		return ns
	}
	parts := strings.Split(node.GetId(), "~")
	if len(parts) != 4 {
		return ""
	}
	if i := strings.LastIndexByte(parts[2], '.'); i >= 0 {
		return parts[2][i+1:]
	}
	return ""
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
