package xds

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshchaos/meshchaos/controlplane/metrics"
	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/controlplane/regress"
)

// PushOptions configure a Pusher.
type PushOptions struct {
	// Quiet is the debounce quiet period: a push starts once no event arrived for this long
	// (istiod's PILOT_DEBOUNCE_AFTER, 100 ms).
	Quiet time.Duration
	// Max bounds the debounce: a push starts at the latest this long after the first merged
	// event (istiod's PILOT_DEBOUNCE_MAX, 10 s).
	Max     time.Duration
	Regress regress.Set
	// Generate configures resource generation (route defaults).
	Generate GenOptions
	Logger   *slog.Logger
	Metrics  *metrics.Metrics
}

// Pusher merges model changes (debounce), keeps one push in flight, and writes the generated
// resources into the caches: endpoint-only changes update only the affected
// ClusterLoadAssignments (EDS push), anything else regenerates and resends everything (full push).
// Endpoint changes of DNS services are full pushes: their endpoints are inline in the cluster.
type Pusher struct {
	opts   PushOptions
	model  *model.Model
	caches *Caches
	log    *slog.Logger
	m      *metrics.Metrics

	mu       sync.Mutex
	pending  model.Change
	firstAt  time.Time
	lastAt   time.Time
	kick     chan struct{}
	enabled  bool                 // pushes are held until the initial full push
	lastPush map[string]time.Time // type URL → start of the latest push that changed it
	pushMu   sync.Mutex           // one push in flight

	// pushed: the model endpoint slice behind each CLA in the cache (push goroutine only).
	pushed map[string][]model.Endpoint

	// scopes are the quadratic-scope regression's per-service scopes (push goroutine only).
	scopes []*scope
}

// NewPusher creates a pusher; pushes start after the first Push (the initial full push) or Enable.
func NewPusher(m *model.Model, c *Caches, opts PushOptions) *Pusher {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	return &Pusher{opts: opts, model: m, caches: c, log: opts.Logger, m: opts.Metrics,
		kick: make(chan struct{}, 1), lastPush: map[string]time.Time{}}
}

// Enqueue merges a change into the pending push.
func (p *Pusher) Enqueue(ch model.Change) {
	if ch.Empty() {
		return
	}
	now := time.Now()
	p.mu.Lock()
	p.pending.Merge(ch)
	if p.firstAt.IsZero() {
		p.firstAt = now
	}
	p.lastAt = now
	p.mu.Unlock()
	for _, r := range ch.Reasons {
		p.m.PushTriggers.WithLabelValues(r).Inc()
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Enable lets debounced pushes start (the ungated mode enables them at once).
func (p *Pusher) Enable() {
	p.mu.Lock()
	p.enabled = true
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run is the debounce loop; it returns when ctx ends.
func (p *Pusher) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-timer.C:
		}
		p.mu.Lock()
		if !p.enabled || p.pending.Empty() {
			p.mu.Unlock()
			continue
		}
		now := time.Now()
		deadline := p.lastAt.Add(p.opts.Quiet)
		if maxAt := p.firstAt.Add(p.opts.Max); p.opts.Max > 0 && maxAt.Before(deadline) {
			deadline = maxAt
		}
		if now.Before(deadline) {
			p.mu.Unlock()
			timer.Reset(deadline.Sub(now))
			continue
		}
		ch, first := p.pending, p.firstAt
		p.pending, p.firstAt, p.lastAt = model.Change{}, time.Time{}, time.Time{}
		p.mu.Unlock()
		p.m.DebounceTime.Observe(now.Sub(first).Seconds())
		p.Push(ch)
	}
}

// Push pushes ch now (no debounce) and enables debounced pushes. The sync gate uses it for the
// initial full push.
func (p *Pusher) Push(ch model.Change) {
	p.pushMu.Lock()
	defer p.pushMu.Unlock()
	start := time.Now()
	if !ch.Full && p.inlineEndpoints(ch.Hosts) {
		// A DNS service's endpoints are inline in its cluster: only CDS carries them. istiod
		// answers endpoint changes of DNS ServiceEntries with a full push too.
		ch.Full = true
	}
	if ch.Full {
		// Everything merged so far is covered: the full push reads the model after this.
		p.mu.Lock()
		p.pending, p.firstAt, p.lastAt = model.Change{}, time.Time{}, time.Time{}
		p.mu.Unlock()
		p.fullPush(start)
		p.m.Pushes.WithLabelValues("full").Inc()
		p.m.PushTime.WithLabelValues("full").Observe(time.Since(start).Seconds())
	} else {
		p.edsPush(start, ch.Hosts)
		p.m.Pushes.WithLabelValues("eds").Inc()
		p.m.PushTime.WithLabelValues("eds").Observe(time.Since(start).Seconds())
	}
	hosts, eps := p.model.Stats()
	p.m.Services.Set(float64(hosts))
	p.m.Endpoints.Set(float64(eps))
	p.log.Debug("push", "full", ch.Full, "hosts", len(ch.Hosts), "reasons", ch.Reasons, "took", time.Since(start))
	p.mu.Lock()
	p.enabled = true
	p.mu.Unlock()
}

// LastPush is the start of the latest push that changed typeURL (for convergence).
func (p *Pusher) LastPush(typeURL string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastPush[typeURL]
}

func (p *Pusher) markPushed(start time.Time, typeURLs ...string) {
	p.mu.Lock()
	for _, t := range typeURLs {
		p.lastPush[t] = start
	}
	p.mu.Unlock()
}

func (p *Pusher) fullPush(start time.Time) {
	// Its own change needs no push of its own: this push reads the model after it.
	p.model.RefreshForFullPush()
	entries := p.model.Entries()
	if p.opts.Regress.On(regress.QuadraticScope) {
		p.buildScopes(entries)
	}
	res, bad := Generate(entries, p.opts.Generate)
	for _, b := range bad {
		p.log.Error("generated resource failed validation; left out", "type", b.Type, "name", b.Name, "err", b.Err)
		p.m.InvalidResources.WithLabelValues(b.Type).Inc()
	}
	p.markPushed(start, resourcev3.ClusterType, resourcev3.ListenerType, resourcev3.RouteType, resourcev3.EndpointType)
	// EDS first so clusters warm with their endpoints already there; then CDS, LDS, RDS. A full
	// push resends CDS/LDS/RDS to every proxy (SetResources marks every resource changed).
	p.updateEndpoints(res.Endpoints, res.claSources, true)
	p.caches.Clusters.SetResources(res.Clusters)
	p.caches.Listeners.SetResources(res.Listeners)
	p.caches.APIListeners.SetResources(res.APIListeners)
	p.caches.Routes.SetResources(res.Routes)
}

// inlineEndpoints reports whether any of hosts is a DNS service (endpoints inline in its cluster).
func (p *Pusher) inlineEndpoints(hosts map[string]struct{}) bool {
	for h := range hosts {
		if e := p.model.Entry(h); e != nil && e.Service.Resolution == model.ResolutionDNS {
			return true
		}
	}
	return false
}

func (p *Pusher) edsPush(start time.Time, hosts map[string]struct{}) {
	next := map[string]types.Resource{}
	sources := map[string][]model.Endpoint{}
	for h := range hosts {
		e := p.model.Entry(h)
		if e == nil || e.Service.Resolution != model.ResolutionStatic {
			continue
		}
		for _, port := range e.Service.Ports {
			cla := BuildCLA(e, port)
			if err := cla.Validate(); err != nil {
				p.log.Error("generated resource failed validation; left out", "type", "ClusterLoadAssignment", "name", cla.ClusterName, "err", err)
				p.m.InvalidResources.WithLabelValues("ClusterLoadAssignment").Inc()
				continue
			}
			next[cla.ClusterName] = cla
			sources[cla.ClusterName] = e.Endpoints[port.Number]
		}
	}
	p.markPushed(start, resourcev3.EndpointType)
	p.updateEndpoints(next, sources, false)
}

// updateEndpoints writes CLAs that differ from the cache's; all means next is the complete set
// (absent ones are deleted).
func (p *Pusher) updateEndpoints(next map[string]types.Resource, sources map[string][]model.Endpoint, all bool) {
	cur := p.caches.Endpoints.GetResources()
	if p.pushed == nil {
		p.pushed = map[string][]model.Endpoint{}
	}
	changed := map[string]types.Resource{}
	for name, r := range next {
		old, ok := cur[name]
		if ok && sameSlice(p.pushed[name], sources[name]) {
			continue // built from the very same model endpoints: unchanged
		}
		p.pushed[name] = sources[name]
		if !ok || !proto.Equal(old, r) {
			changed[name] = r
		}
	}
	var deleted []string
	if all {
		for name := range cur {
			if _, ok := next[name]; !ok {
				deleted = append(deleted, name)
				delete(p.pushed, name)
			}
		}
	}
	if len(changed) == 0 && len(deleted) == 0 {
		return
	}
	if err := p.caches.Endpoints.UpdateResources(changed, deleted); err != nil {
		p.log.Error("update endpoint cache", "err", err)
	}
}

// scopeKey mirrors Istio 1.6's model.ConfigKey: a GroupVersionKind (three strings), a name and a
// namespace, 80 bytes.
type scopeKey struct {
	group, version, kind string
	name, namespace      string
}

// scope mirrors the default SidecarScope of Istio 1.6: the services a proxy sees and the configs
// it depends on (configDependencies, a map keyed by the 80-byte ConfigKey).
type scope struct {
	services []*model.Service
	deps     map[scopeKey]struct{}
}

// buildScopes is the quadratic-scope regression. Istio 1.6 (initSidecarScopes, before istio
// #25118) built a default SidecarScope per *service*, not per namespace, each listing every
// service and depending on every service's ConfigKey (a map with 80-byte keys, before #25532 made
// it a uint32 hash): n scopes × n entries, ≈ 12 GB of istiod at 5000 ServiceEntries. The scopes
// are rebuilt on every full push, the previous set alive until the new one is complete, as a push
// context was. The generated config does not change: the bug is the memory and the build time.
func (p *Pusher) buildScopes(entries []*model.Entry) {
	all := make([]*model.Service, len(entries))
	for i, e := range entries {
		all[i] = e.Service
	}
	scopes := make([]*scope, 0, len(entries))
	for range entries {
		// As 1.6: the services appended to an empty slice, a map grown from empty.
		sc := &scope{services: append([]*model.Service{}, all...), deps: map[scopeKey]struct{}{}}
		for _, s := range sc.services {
			sc.deps[scopeKey{group: "networking.istio.io", version: "v1alpha3", kind: "ServiceEntry",
				name: s.Hostname, namespace: s.Namespace}] = struct{}{}
		}
		scopes = append(scopes, sc)
	}
	p.scopes = scopes
}

// ScopeSize is the number of config dependencies held by quadratic-scope scopes (0 without it).
func (p *Pusher) ScopeSize() int {
	p.pushMu.Lock()
	defer p.pushMu.Unlock()
	n := 0
	for _, s := range p.scopes {
		n += len(s.deps)
	}
	return n
}

// sameSlice reports whether a and b are the same slice (same backing array and length); model
// entries are immutable, so that means the same endpoints.
func sameSlice(a, b []model.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}
