package xds

import (
	"context"
	"sort"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"

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

	// MaxScopes bounds how many scopes exist (0: no bound). A scope is a whole generation of
	// clusters, listeners and routes, and proxies choose theirs by what they claim: without a
	// bound, clients claiming ever new namespaces could make the control plane hold any number
	// of copies of the config. Set before serving.
	MaxScopes int
	// OnScopeLimit, if set, is called for every watch refused by MaxScopes.
	OnScopeLimit func()

	prefix string
	mu     sync.Mutex
	scopes map[string]*ScopeCaches
	// refs counts the streams of each scope key (Acquire/Release); a scope whose last stream
	// closes is dropped, so what proxies claim costs memory only while they are connected.
	refs   map[string]int
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
		refs:      map[string]int{},
	}
}

// Scope returns the caches of the sidecars of namespace ns, creating and filling them on first
// use; nil when that would exceed MaxScopes.
func (c *Caches) Scope(ns string) *ScopeCaches { return c.scope(ns, false) }

// ScopeOf returns the caches of node's scope (see ScopeKey); nil when that would exceed MaxScopes.
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
	if c.MaxScopes > 0 && len(c.scopes) >= c.MaxScopes {
		c.mu.Unlock()
		return nil
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

// Acquire records a stream of node's scope: the scope is kept while it has streams. Call it
// before the stream's first watch.
func (c *Caches) Acquire(node *core.Node) string {
	key := ScopeKey(node)
	c.mu.Lock()
	c.refs[key]++
	c.mu.Unlock()
	return key
}

// Release undoes one Acquire of key; the last one drops the scope (a proxy of that scope that
// connects later gets a new one, filled from the latest full push).
func (c *Caches) Release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refs[key]--
	if c.refs[key] > 0 {
		return
	}
	delete(c.refs, key)
	delete(c.scopes, key)
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

// ForNode returns the cache serving typeURL to node (nil for an unknown type, or when node's
// scope would exceed MaxScopes).
func (c *Caches) ForNode(typeURL string, node *core.Node) *cachev3.LinearCache {
	if typeURL == resourcev3.EndpointType {
		return c.Endpoints
	}
	if !knownType(typeURL) {
		return nil
	}
	sc := c.ScopeOf(node)
	if sc == nil {
		return nil
	}
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

func knownType(typeURL string) bool {
	switch typeURL {
	case resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType:
		return true
	}
	return false
}

// cacheFor is ForNode with the reason as a gRPC status when there is none (the stream ends
// with it).
func (c *Caches) cacheFor(typeURL string, node *core.Node) (*cachev3.LinearCache, error) {
	if !knownType(typeURL) {
		return nil, status.Errorf(codes.InvalidArgument, "unknown type %q: this control plane serves CDS, EDS, LDS and RDS", truncate(typeURL))
	}
	if lc := c.ForNode(typeURL, node); lc != nil {
		return lc, nil
	}
	if c.OnScopeLimit != nil {
		c.OnScopeLimit()
	}
	return nil, status.Errorf(codes.ResourceExhausted, "too many proxy scopes (namespaces; at most %d): not serving a new one", c.MaxScopes)
}

// CreateWatch implements cachev3.Cache: the request goes to its node's scope.
func (c *Caches) CreateWatch(r *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	lc, err := c.cacheFor(r.GetTypeUrl(), r.GetNode())
	if err != nil {
		return nil, err
	}
	return lc.CreateWatch(r, sub, ch)
}

// CreateDeltaWatch implements cachev3.Cache.
func (c *Caches) CreateDeltaWatch(r *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	lc, err := c.cacheFor(r.GetTypeUrl(), r.GetNode())
	if err != nil {
		return nil, err
	}
	return lc.CreateDeltaWatch(r, sub, ch)
}

// Fetch implements cachev3.Cache (REST xDS; not served).
func (c *Caches) Fetch(ctx context.Context, r *cachev3.Request) (cachev3.Response, error) {
	lc, err := c.cacheFor(r.GetTypeUrl(), r.GetNode())
	if err != nil {
		return nil, err
	}
	return lc.Fetch(ctx, r)
}

// ProxyNamespace is the namespace of a proxy as istiod finds it: the NAMESPACE node metadata,
// else the node id "TYPE~IP~POD.NS~NS.svc.cluster.local" (the NS after the pod name); "" when
// neither says (such a proxy gets the root namespace's Sidecar, or everything). A name that
// cannot be a Kubernetes namespace counts as none: it would name a scope no Sidecar can reach.
func ProxyNamespace(node *core.Node) string {
	ns := node.GetMetadata().GetFields()["NAMESPACE"].GetStringValue()
	if ns == "" {
		parts := strings.Split(node.GetId(), "~")
		if len(parts) != 4 {
			return ""
		}
		i := strings.LastIndexByte(parts[2], '.')
		if i < 0 {
			return ""
		}
		ns = parts[2][i+1:]
	}
	if len(validation.IsDNS1123Label(ns)) > 0 {
		return ""
	}
	return ns
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

func truncate(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
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
