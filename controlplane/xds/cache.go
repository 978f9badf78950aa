package xds

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/controlplane/xds/watchcache"
)

// Caches hold what the proxies are served, as watchcache.Caches (one per type, or per type and
// scope). They answer requests for any subset of their resources (what proxyless gRPC sends; a
// snapshot cache with ads=true would not), notify only the watches of changed resources, serve
// Delta, and keep each stream's subscription across its ACKs, so that an endpoint change costs
// O(proxies watching it), not O(proxies × names) (see package watchcache).
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
	Endpoints *watchcache.Cache

	// MaxScopes bounds how many scopes exist (0: no bound). A scope is a whole generation of
	// clusters, listeners and routes, and proxies choose theirs by what they claim: without a
	// bound, clients claiming ever new namespaces could make the control plane hold any number
	// of copies of the config. Set before serving.
	MaxScopes int
	// OnScopeLimit, if set, is called for every watch refused by MaxScopes.
	OnScopeLimit func()
	// mostServed is the most ClusterLoadAssignments the Endpoints cache has held (see
	// MostServed).
	mostServed atomic.Int64

	prefix string
	mu     sync.Mutex
	scopes map[string]*ScopeCaches
	// refs counts the streams of each namespace's proxies (Acquire/Release, by HoldKey); when
	// the last one closes, the namespace's scopes are dropped, so what proxies claim costs
	// memory only while they are connected.
	refs   map[string]int
	latest []*model.Entry // the model as of the latest full push
	// populate fills a new scope from latest (set by the pusher; nil: scopes start empty).
	populate func(sc *ScopeCaches, entries []*model.Entry)
	// fillAPI generates a generated scope's API listeners, with sc.mu held (set by the pusher).
	fillAPI func(sc *ScopeCaches)
	// selected names the workloadSelector Sidecar that selects a (non-gateway) proxy, "" for
	// none (set by the pusher; nil: scopes by namespace only).
	selected func(node *core.Node, ns string) string
	// watches are the open CDS/LDS/RDS watches, moved to another scope's caches when their
	// proxy's scope changes (Move).
	watches map[*movableWatch]struct{}
}

// ScopeCaches are the scope-dependent caches of the sidecars, or of the gateways, of one
// namespace.
type ScopeCaches struct {
	// Key names the scope: the namespace for sidecars, "NS~SIDECAR" for the sidecars a
	// workloadSelector Sidecar selects, "router~NS~GATEWAYS" for gateways (the Gateways that
	// select them; "router~NS" when none does).
	Key string
	// Namespace is the proxies' namespace ("" for proxies that do not say theirs).
	Namespace string
	// Selected is the name of the workloadSelector Sidecar of Namespace that selects this
	// scope's proxies ("" for the namespace's default scope); for a gateway scope, the Gateways
	// ("ns/name,…") that select its proxies.
	Selected string
	// Gateway: the scope of router (gateway) proxies, which no Sidecar scopes (as istiod:
	// gateways get the namespace's default scope, egress "*/*"); their listeners and routes
	// come from the Gateways and VirtualServices that select them.
	Gateway      bool
	Clusters     *watchcache.Cache
	Routes       *watchcache.Cache
	Listeners    *watchcache.Cache
	APIListeners *watchcache.Cache

	ready chan struct{} // closed once filled for the first time
	// apiWanted: a proxyless client of this scope has asked for listeners, so generations
	// include the API listeners. Envoy sidecars never read them, and at 50 000 ServiceEntries
	// they were half of a scope's generation time (each is a whole HTTP connection manager
	// with its route, marshalled into an Any). Set under mu, once.
	apiWanted atomic.Bool
	mu        sync.Mutex // one generation into these caches at a time
	generated bool
	sidecar   *model.Sidecar
	entries   []*model.Entry      // the visible entries the caches were generated from
	hosts     map[string]struct{} // their host names
	pushes    int                 // generations written (for tests and /debug/push_status)
	// input is what the latest generation was built from: the per-proxy generation mode
	// builds each proxy's responses from it again (see Pusher.generateFor).
	input *genInput
}

var _ cachev3.Cache = (*Caches)(nil)

// NewCaches creates empty caches. prefix distinguishes this process's versions from a previous
// instance's (a reconnecting proxy then always gets a full answer).
func NewCaches(prefix string) *Caches {
	return &Caches{
		Endpoints: watchcache.New(resourcev3.EndpointType, prefix),
		prefix:    prefix,
		scopes:    map[string]*ScopeCaches{},
		refs:      map[string]int{},
		watches:   map[*movableWatch]struct{}{},
	}
}

// Scope returns the caches of the sidecars of namespace ns, creating and filling them on first
// use; nil when that would exceed MaxScopes.
func (c *Caches) Scope(ns string) *ScopeCaches { return c.scope(ns, false, "") }

// ScopeOf returns the caches of node's scope (see ScopeKey); nil when that would exceed MaxScopes.
func (c *Caches) ScopeOf(node *core.Node) *ScopeCaches {
	ns, gw := ProxyNamespace(node), isGateway(node)
	return c.scope(ns, gw, c.selectedBy(node, ns, gw))
}

// ScopeKey names node's scope: its namespace, "NS~SIDECAR" when a workloadSelector Sidecar
// selects it, or "router~NS~GATEWAYS" for a gateway (node id "router~..."; GATEWAYS the
// "ns/name" of the Gateways that select it, "router~NS" when none does).
func (c *Caches) ScopeKey(node *core.Node) string {
	ns, gw := ProxyNamespace(node), isGateway(node)
	return keyOf(ns, gw, c.selectedBy(node, ns, gw))
}

func (c *Caches) selectedBy(node *core.Node, ns string, gateway bool) string {
	c.mu.Lock()
	sel := c.selected
	c.mu.Unlock()
	if sel == nil {
		return ""
	}
	return sel(node, ns) // a gateway's Gateways, a sidecar's workloadSelector Sidecar

}

func keyOf(ns string, gateway bool, selected string) string {
	switch {
	case gateway && selected != "":
		return "router~" + ns + "~" + selected
	case gateway:
		return "router~" + ns
	case selected != "":
		return ns + "~" + selected
	}
	return ns
}

func isGateway(node *core.Node) bool { return strings.HasPrefix(node.GetId(), "router~") }

func (c *Caches) scope(ns string, gateway bool, selected string) *ScopeCaches {
	key := keyOf(ns, gateway, selected)
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
	// Versions carry the scope's key so a proxy moving between scopes never takes one scope's
	// version for another's.
	prefix := c.prefix + key + "-"
	sc = &ScopeCaches{Key: key, Namespace: ns, Gateway: gateway, Selected: selected, ready: make(chan struct{}),
		Clusters:     watchcache.New(resourcev3.ClusterType, prefix),
		Routes:       watchcache.New(resourcev3.RouteType, prefix),
		Listeners:    watchcache.New(resourcev3.ListenerType, prefix),
		APIListeners: watchcache.New(resourcev3.ListenerType, prefix),
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

// MostServed is the most ClusterLoadAssignments (one per cluster) this control plane has
// served at once: what a subscription's names are measured against (Limits.NameSlack).
func (c *Caches) MostServed() int { return int(c.mostServed.Load()) }

// noteServed records that the Endpoints cache holds n assignments now.
func (c *Caches) noteServed(n int) {
	for {
		cur := c.mostServed.Load()
		if int64(n) <= cur || c.mostServed.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

// HoldKey names what a stream of node holds (Acquire): its namespace's scopes, sidecar or
// gateway. Unlike ScopeKey it does not change while the proxy is connected (a workloadSelector
// Sidecar can move a proxy between its namespace's scopes, never to another namespace).
func HoldKey(node *core.Node) string { return keyOf(ProxyNamespace(node), isGateway(node), "") }

// Acquire records a stream of node's namespace: its scopes are kept while it has streams. Call
// it before the stream's first watch; it returns the key to Release.
func (c *Caches) Acquire(node *core.Node) string {
	key := HoldKey(node)
	c.mu.Lock()
	c.refs[key]++
	c.mu.Unlock()
	return key
}

// Release undoes one Acquire of key; the last one drops the namespace's scopes (a proxy of that
// namespace that connects later gets a new one, filled from the latest full push).
func (c *Caches) Release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refs[key]--
	if c.refs[key] > 0 {
		return
	}
	delete(c.refs, key)
	for k, sc := range c.scopes {
		if keyOf(sc.Namespace, sc.Gateway, "") == key {
			delete(c.scopes, k)
		}
	}
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
func (c *Caches) ForNode(typeURL string, node *core.Node) *watchcache.Cache {
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
	return c.scopeCache(sc, typeURL, node)
}

func knownType(typeURL string) bool {
	switch typeURL {
	case resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType:
		return true
	}
	return false
}

func (c *Caches) scopeCache(sc *ScopeCaches, typeURL string, node *core.Node) *watchcache.Cache {
	switch typeURL {
	case resourcev3.ClusterType:
		return sc.Clusters
	case resourcev3.RouteType:
		return sc.Routes
	case resourcev3.ListenerType:
		if IsProxyless(node) {
			c.wantAPIListeners(sc)
			return sc.APIListeners
		}
		return sc.Listeners
	}
	return nil
}

// wantAPIListeners makes sc's generations include its API listeners from now on, generating
// them at once if sc has been generated (waiting for a generation in progress). The flag is
// set only once they are filled: a client that sees it set gets the cache without the lock,
// and must never be answered from a cache still empty (grpc-go drops a listener a SotW
// answer leaves out).
func (c *Caches) wantAPIListeners(sc *ScopeCaches) {
	if sc.apiWanted.Load() {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.apiWanted.Load() {
		return
	}
	if sc.generated && c.fillAPI != nil {
		c.fillAPI(sc)
	}
	sc.apiWanted.Store(true)
}

// movableWatch is an open watch on a scope's cache. When its proxy's scope changes (a
// workloadSelector Sidecar now selects it, or no longer does) Move re-creates it, with the same
// request, subscription and response channel, on the new scope's cache: the proxy's version is
// the old scope's, so the new cache answers at once with its whole state, as istiod pushes a
// proxy whose SidecarScope changed.
type movableWatch struct {
	node    *core.Node
	typeURL string
	create  func(lc *watchcache.Cache) (func(), error)

	mu     sync.Mutex
	key    string
	cancel func()
	done   bool
}

// watch creates a watch through create on node's scope cache for typeURL, movable between scopes.
func (c *Caches) watch(typeURL string, node *core.Node, create func(lc *watchcache.Cache) (func(), error)) (func(), error) {
	if !knownType(typeURL) {
		return nil, status.Errorf(codes.InvalidArgument, "unknown type %q: this control plane serves CDS, EDS, LDS and RDS", truncate(typeURL))
	}
	if typeURL == resourcev3.EndpointType {
		return create(c.Endpoints) // one cache for every scope
	}
	sc := c.ScopeOf(node)
	if sc == nil {
		if c.OnScopeLimit != nil {
			c.OnScopeLimit()
		}
		return nil, status.Errorf(codes.ResourceExhausted, "too many proxy scopes (at most %d): not serving a new one", c.MaxScopes)
	}
	lc := c.scopeCache(sc, typeURL, node)
	w := &movableWatch{node: node, typeURL: typeURL, create: create, key: sc.Key}
	w.mu.Lock()
	defer w.mu.Unlock()
	cancel, err := create(lc)
	if err != nil {
		return nil, err
	}
	w.cancel = orNoop(cancel)
	c.mu.Lock()
	c.watches[w] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.watches, w)
		c.mu.Unlock()
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.done {
			w.done = true
			w.cancel()
		}
	}, nil
}

// Move re-creates every open watch whose proxy's scope changed on its new scope's cache, and
// returns how many moved. The pusher calls it after each full push (Sidecar and pod label
// changes are full pushes).
func (c *Caches) Move() int {
	c.mu.Lock()
	open := make([]*movableWatch, 0, len(c.watches))
	for w := range c.watches {
		open = append(open, w)
	}
	c.mu.Unlock()
	moved := 0
	for _, w := range open {
		sc := c.ScopeOf(w.node)
		if sc == nil {
			continue // MaxScopes: the watch stays on the scope it has
		}
		w.mu.Lock()
		if !w.done && w.key != sc.Key {
			w.cancel()
			cancel, err := w.create(c.scopeCache(sc, w.typeURL, w.node))
			if err != nil {
				w.cancel, w.done = func() {}, true // the proxy's next request opens a new watch
			} else {
				w.cancel, w.key = orNoop(cancel), sc.Key
				moved++
			}
		}
		w.mu.Unlock()
	}
	return moved
}

// orNoop: a cache may answer a watch at once and return no cancel function.
func orNoop(cancel func()) func() {
	if cancel == nil {
		return func() {}
	}
	return cancel
}

// CreateWatch implements cachev3.Cache: the request goes to its node's scope.
func (c *Caches) CreateWatch(r *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	return c.watch(r.GetTypeUrl(), r.GetNode(), func(lc *watchcache.Cache) (func(), error) {
		if lc == nil {
			return nil, fmt.Errorf("no cache for type %s", r.GetTypeUrl())
		}
		return lc.CreateWatch(r, sub, ch)
	})
}

// CreateDeltaWatch implements cachev3.Cache.
func (c *Caches) CreateDeltaWatch(r *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	return c.watch(r.GetTypeUrl(), r.GetNode(), func(lc *watchcache.Cache) (func(), error) {
		if lc == nil {
			return nil, fmt.Errorf("no cache for type %s", r.GetTypeUrl())
		}
		return lc.CreateDeltaWatch(r, sub, ch)
	})
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

func truncate(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
