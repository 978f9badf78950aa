package xds

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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
	// Generation is where CDS, LDS and RDS are generated: once per scope, shared by its
	// proxies (PerScope, the default), or again for every proxy's response (PerProxy, as
	// istio ≤ 1.14 did; see perproxy.go).
	Generation Generation
	Logger     *slog.Logger
	Metrics    *metrics.Metrics
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
	triggers map[string]int // the pending changes' events by trigger type (pilot_push_triggers)
	firstAt  time.Time
	lastAt   time.Time
	kick     chan struct{}
	enabled  bool                   // pushes are held until the initial full push
	lastPush map[string]*pushRecord // type URL → the latest push that changed it
	seq      uint64
	rec      *pushRecord // the push in flight (push goroutine only)
	status   PushStatus  // the latest push, for /debug/push_status
	pushMu   sync.Mutex  // one push in flight

	// pushed: the model endpoint slice behind each CLA in the cache (push goroutine only).
	pushed map[string][]model.Endpoint

	// scopes are the quadratic-scope regression's per-service scopes (push goroutine only).
	scopes []*scope

	// proxies counts the connected proxies (the server's streams; nil: none), for
	// pilot_push_triggers.
	proxies func() int
}

// NewPusher creates a pusher; pushes start after the first Push (the initial full push) or Enable.
func NewPusher(m *model.Model, c *Caches, opts PushOptions) *Pusher {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	p := &Pusher{opts: opts, model: m, caches: c, log: opts.Logger, m: opts.Metrics,
		kick: make(chan struct{}, 1), lastPush: map[string]*pushRecord{}}
	c.mu.Lock()
	c.populate = func(sc *ScopeCaches, entries []*model.Entry) { p.pushScopeLocked(sc, entries, nil) }
	c.fillAPI = p.fillAPIListenersLocked
	c.selected = func(node *core.Node, ns string) string {
		if isGateway(node) {
			// A gateway's scope is the set of Gateways that select it (istiod's merged
			// gateway): proxies with the same set share one generation.
			var keys []string
			for _, g := range m.GatewaysFor(ProxyLabels(node, m)) {
				keys = append(keys, g.Key())
			}
			return strings.Join(keys, ",")
		}
		sc := m.SidecarForProxy(ns, ProxyLabels(node, m))
		if sc == nil || len(sc.Selector) == 0 || sc.Namespace != ns {
			return ""
		}
		return sc.Name
	}
	c.mu.Unlock()
	return p
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
	if p.triggers == nil {
		p.triggers = map[string]int{}
	}
	for _, r := range ch.Reasons {
		p.triggers[TriggerType(r)]++
	}
	p.mu.Unlock()
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
		ch, first, triggers := p.pending, p.firstAt, p.triggers
		p.pending, p.firstAt, p.lastAt, p.triggers = model.Change{}, time.Time{}, time.Time{}, nil
		p.mu.Unlock()
		p.m.DebounceTime.Observe(now.Sub(first).Seconds())
		p.push(ch, first, triggers)
	}
}

// recordTriggers counts a push's events by trigger type once per connected proxy, as istiod's
// pilot_push_triggers does: it records the reasons of each proxy's push as the proxy is taken
// off its push queue (pilot/pkg/xds/discovery.go, recordPushTriggers at Dequeue), every
// connected proxy being queued for every push, whether the push changes anything for it.
func (p *Pusher) recordTriggers(triggers map[string]int) {
	p.mu.Lock()
	proxies := p.proxies
	p.mu.Unlock()
	if proxies == nil || len(triggers) == 0 {
		return
	}
	n := proxies()
	if n == 0 {
		return
	}
	for t, c := range triggers {
		p.m.PushTriggers.WithLabelValues(t).Add(float64(c * n))
	}
}

// countProxies gives the pusher the count of connected proxies (the server's).
func (p *Pusher) countProxies(f func() int) {
	p.mu.Lock()
	p.proxies = f
	p.mu.Unlock()
}

// Push pushes ch now (no debounce) and enables debounced pushes. The sync gate uses it for the
// initial full push.
func (p *Pusher) Push(ch model.Change) {
	triggers := map[string]int{}
	for _, r := range ch.Reasons {
		triggers[TriggerType(r)]++
	}
	p.push(ch, time.Now(), triggers)
}

// push pushes ch; first is the first event of its debounced batch (for convergence), triggers
// its events by trigger type.
func (p *Pusher) push(ch model.Change, first time.Time, triggers map[string]int) {
	p.pushMu.Lock()
	defer p.pushMu.Unlock()
	start := time.Now()
	p.seq++
	p.rec = &pushRecord{seq: p.seq, first: first, start: start, types: map[string]bool{},
		scopes: map[string]bool{}, clas: map[string]struct{}{}}
	if !ch.Full && p.inlineEndpoints(ch.Hosts) {
		// A DNS service's endpoints are inline in its cluster: only CDS carries them. istiod
		// answers endpoint changes of DNS ServiceEntries with a full push too.
		ch.Full = true
		ch.Configs = ch.Hosts
	}
	if ch.Full {
		// Everything merged so far is covered: the full push reads the model after this.
		p.mu.Lock()
		for t, n := range p.triggers {
			if triggers == nil {
				triggers = map[string]int{}
			}
			triggers[t] += n
		}
		p.pending, p.firstAt, p.lastAt, p.triggers = model.Change{}, time.Time{}, time.Time{}, nil
		p.mu.Unlock()
		p.fullPush(ch)
		p.m.Pushes.WithLabelValues("full").Inc()
		p.m.PushCycleTime.WithLabelValues("full").Observe(time.Since(start).Seconds())
	} else {
		p.edsPush(ch.Hosts)
		p.m.Pushes.WithLabelValues("eds").Inc()
		p.m.PushCycleTime.WithLabelValues("eds").Observe(time.Since(start).Seconds())
	}
	p.recordTriggers(triggers)
	hosts, eps := p.model.Stats()
	p.m.Services.Set(float64(hosts))
	p.m.Endpoints.Set(float64(eps))
	kind := "eds"
	if ch.Full {
		kind = "full"
	}
	p.mu.Lock()
	p.status = PushStatus{Seq: p.rec.seq, Kind: kind, Reasons: ch.Reasons, FirstEvent: first, Start: start,
		End: time.Now(), Services: hosts, Endpoints: eps}
	p.mu.Unlock()
	p.log.Debug("push", "full", ch.Full, "hosts", len(ch.Hosts), "reasons", ch.Reasons, "took", time.Since(start))
	p.mu.Lock()
	p.enabled = true
	p.mu.Unlock()
}

// PushStatus is /debug/push_status: the latest push and the scopes.
type PushStatus struct {
	Seq        uint64        `json:"seq"`
	Kind       string        `json:"kind"` // full or eds
	Reasons    []string      `json:"reasons"`
	FirstEvent time.Time     `json:"firstEvent"`
	Start      time.Time     `json:"start"`
	End        time.Time     `json:"end"`
	Services   int           `json:"services"`
	Endpoints  int           `json:"endpoints"`
	Scopes     []ScopeStatus `json:"scopes"`
}

// ScopeStatus is one scope: its namespace, Sidecar, visible services and generations.
type ScopeStatus struct {
	Namespace   string `json:"namespace"`
	Gateway     bool   `json:"gateway,omitempty"`
	Sidecar     string `json:"sidecar,omitempty"` // "ns/name"; empty: every host visible
	Services    int    `json:"services"`
	Generations int    `json:"generations"`
}

// Status is the latest push and every scope.
func (p *Pusher) Status() PushStatus {
	p.mu.Lock()
	st := p.status
	p.mu.Unlock()
	for _, sc := range p.caches.Scopes() {
		sc.mu.Lock()
		ss := ScopeStatus{Namespace: sc.Namespace, Gateway: sc.Gateway, Services: len(sc.entries), Generations: sc.pushes}
		if sc.sidecar != nil {
			ss.Sidecar = sc.sidecar.Namespace + "/" + sc.sidecar.Name
		}
		sc.mu.Unlock()
		st.Scopes = append(st.Scopes, ss)
	}
	return st
}

// pushRecord is one push as the server needs it for istiod's per-proxy metrics: when its batch
// began, when it started, and what it changed. Filled by the push goroutine before the caches
// notify anyone; read by the streams.
type pushRecord struct {
	seq          uint64
	first, start time.Time

	mu     sync.Mutex
	types  map[string]bool     // type URLs it changed
	scopes map[string]bool     // scope keys whose CDS/LDS/RDS it resent
	clas   map[string]struct{} // ClusterLoadAssignments it changed or removed
}

// expects reports whether a proxy of scope key subscribed to names of typeURL (nil: wildcard)
// gets a response from this push.
func (r *pushRecord) expects(typeURL, key string, names []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.types[typeURL] {
		return false
	}
	if typeURL != resourcev3.EndpointType {
		return r.scopes[key]
	}
	for _, n := range names {
		if _, ok := r.clas[n]; ok {
			return true
		}
	}
	return false
}

// lastRecord is the latest push that changed typeURL (nil before any).
func (p *Pusher) lastRecord(typeURL string) *pushRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastPush[typeURL]
}

func (p *Pusher) markPushed(typeURLs ...string) {
	p.rec.mu.Lock()
	for _, t := range typeURLs {
		p.rec.types[t] = true
	}
	p.rec.mu.Unlock()
	p.mu.Lock()
	for _, t := range typeURLs {
		p.lastPush[t] = p.rec
	}
	p.mu.Unlock()
}

func (p *Pusher) fullPush(ch model.Change) {
	// Its own change needs no push of its own: this push reads the model after it.
	p.model.RefreshForFullPush()
	entries := p.model.Entries()
	if p.opts.Regress.On(regress.QuadraticScope) {
		p.buildScopes(entries)
	}
	res, bad := generateEndpoints(entries)
	p.reportInvalid(bad)
	p.markPushed(resourcev3.ClusterType, resourcev3.ListenerType, resourcev3.RouteType, resourcev3.EndpointType)
	// EDS first so clusters warm with their endpoints already there; then each scope's CDS,
	// LDS, RDS.
	p.updateEndpoints(res.Endpoints, res.claSources, true)
	scopes := p.caches.setLatest(entries)
	for _, sc := range scopes {
		p.pushScope(sc, entries, &ch)
	}
	// A Sidecar or a pod's labels may have changed which Sidecar selects a proxy.
	if moved := p.caches.Move(); moved > 0 {
		p.log.Debug("proxies moved between scopes", "watches", moved)
	}
	p.m.Scopes.Set(float64(len(p.caches.Scopes())))
}

// ProxyLabels are a proxy's workload labels as istiod reads them: the LABELS node metadata,
// else the labels of its pod, named by the node id "TYPE~IP~POD.NS~NS.svc.cluster.local".
func ProxyLabels(node *core.Node, m *model.Model) map[string]string {
	if l := node.GetMetadata().GetFields()["LABELS"].GetStructValue(); l != nil {
		out := make(map[string]string, len(l.GetFields()))
		for k, v := range l.GetFields() {
			out[k] = v.GetStringValue()
		}
		return out
	}
	parts := strings.Split(node.GetId(), "~")
	if len(parts) != 4 {
		return nil
	}
	pod, ns, ok := strings.Cut(parts[2], ".")
	if !ok {
		return nil
	}
	labels, _ := m.PodLabels(ns, pod)
	return labels
}

func (p *Pusher) reportInvalid(bad []Invalid) {
	for _, b := range bad {
		p.log.Error("generated resource failed validation; left out", "type", b.Type, "name", b.Name, "err", b.Err)
		p.m.InvalidResources.WithLabelValues(b.Type).Inc()
	}
}

// pushScope brings one scope's caches up to date with entries. ch is the full push's change
// (nil when a new scope is filled): a scope that neither sees a changed config nor changed
// itself is left alone, so its proxies get nothing (istiod's ProxyNeedsPush with the
// SidecarScope's dependencies); any other is regenerated once for all its proxies and resent to
// each of them (SetResources marks every resource set: istiod's full push; Delta proxies get
// only what changed: an equal resource keeps its content version).
func (p *Pusher) pushScope(sc *ScopeCaches, entries []*model.Entry, ch *model.Change) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	p.pushScopeLocked(sc, entries, ch)
}

// pushScopeLocked is pushScope with sc.mu held.
func (p *Pusher) pushScopeLocked(sc *ScopeCaches, entries []*model.Entry, ch *model.Change) {
	var sidecar *model.Sidecar
	switch {
	case sc.Gateway:
	case sc.Selected != "":
		// A scope of the proxies a workloadSelector Sidecar selects; should the Sidecar go,
		// the namespace's default until Move takes its proxies away.
		if sidecar = p.model.Sidecar(sc.Namespace, sc.Selected); sidecar == nil || len(sidecar.Selector) == 0 {
			sidecar = p.model.SidecarFor(sc.Namespace)
		}
	default:
		sidecar = p.model.SidecarFor(sc.Namespace)
	}
	visible := entries
	if sidecar != nil {
		visible = make([]*model.Entry, 0, len(entries))
		for _, e := range entries {
			if sidecar.Visible(e.Service, sc.Namespace) {
				visible = append(visible, e)
			}
		}
	}
	gatewaysChanged := false
	if sc.Gateway && ch != nil {
		_, gatewaysChanged = ch.Configs[model.GatewayConfig]
	}
	if ch != nil && sc.generated && sidecar == sc.sidecar && !ch.AllProxies() && !gatewaysChanged &&
		!seesConfig(sc.hosts, ch.Configs) && !seesConfig(hostSet(visible), ch.Configs) && sameConfig(visible, sc.entries) {
		return
	}
	if ch != nil {
		p.rec.mu.Lock()
		p.rec.scopes[sc.Key] = true
		p.rec.mu.Unlock()
	}
	api := sc.apiWanted.Load() // set only under sc.mu
	in := &genInput{entries: visible, opts: p.scopeOptions(sc)}
	res, bad := generate(visible, in.opts, false, api)
	p.reportInvalid(bad)
	if in.opts.Router {
		keys := gatewayKeys(sc.Selected)
		for _, k := range keys {
			if g := p.model.Gateway(k); g != nil {
				in.gateways = append(in.gateways, g)
			}
		}
		in.vss = p.model.VirtualServicesFor(keys)
		var gbad []Invalid
		res.Listeners, res.Routes, gbad = gatewayResources(visible, in.gateways, in.vss, in.opts)
		p.reportInvalid(gbad)
	}
	sc.Clusters.SetResources(res.Clusters)
	sc.Listeners.SetResources(res.Listeners)
	if api {
		sc.APIListeners.SetResources(res.APIListeners)
	}
	sc.Routes.SetResources(res.Routes)
	sc.generated, sc.sidecar, sc.entries, sc.hosts, sc.input = true, sidecar, visible, hostSet(visible), in
	sc.pushes++
}

// fillAPIListenersLocked generates sc's API listeners from the entries of its last generation
// (sc.mu held): the first proxyless client of a generated scope asked for them.
func (p *Pusher) fillAPIListenersLocked(sc *ScopeCaches) {
	r := &Resources{APIListeners: map[string]types.Resource{}}
	p.reportInvalid(generateAPIListeners(r, sc.entries, p.scopeOptions(sc)))
	sc.APIListeners.SetResources(r.APIListeners)
}

// scopeOptions are the generation options for sc's proxies (short names resolve in their
// namespace).
func (p *Pusher) scopeOptions(sc *ScopeCaches) GenOptions {
	opts := p.opts.Generate
	opts.Namespace = sc.Namespace
	opts.Router = sc.Gateway
	return opts
}

// generateEndpoints builds the ClusterLoadAssignments of every STATIC service port.
func generateEndpoints(entries []*model.Entry) (*Resources, []Invalid) {
	r := &Resources{Endpoints: map[string]types.Resource{}, claSources: map[string][]model.Endpoint{}}
	var bad []Invalid
	for _, e := range entries {
		if e.Service.Resolution != model.ResolutionStatic {
			continue
		}
		for _, port := range e.Service.Ports {
			cla := BuildCLA(e, port)
			if err := cla.Validate(); err != nil {
				bad = append(bad, Invalid{Type: "ClusterLoadAssignment", Name: cla.ClusterName, Err: err})
				continue
			}
			r.Endpoints[cla.ClusterName] = cla
			r.claSources[cla.ClusterName] = e.Endpoints[port.Number]
		}
	}
	return r, bad
}

func hostSet(entries []*model.Entry) map[string]struct{} {
	out := make(map[string]struct{}, len(entries))
	for _, e := range entries {
		out[e.Service.Hostname] = struct{}{}
	}
	return out
}

// seesConfig reports whether any of configs is one of hosts.
func seesConfig(hosts, configs map[string]struct{}) bool {
	for c := range configs {
		if _, ok := hosts[c]; ok {
			return true
		}
	}
	return false
}

// sameConfig reports whether two lists of entries generate the same scope config.
func sameConfig(a, b []*model.Entry) bool {
	return slices.EqualFunc(a, b, (*model.Entry).SameConfig)
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

func (p *Pusher) edsPush(hosts map[string]struct{}) {
	entries := make([]*model.Entry, 0, len(hosts))
	for h := range hosts {
		if e := p.model.Entry(h); e != nil {
			entries = append(entries, e)
		}
	}
	res, bad := generateEndpoints(entries)
	p.reportInvalid(bad)
	p.markPushed(resourcev3.EndpointType)
	p.updateEndpoints(res.Endpoints, res.claSources, false)
}

// updateEndpoints writes CLAs that differ from the cache's; all means next is the complete set
// (absent ones are deleted).
func (p *Pusher) updateEndpoints(next map[string]types.Resource, sources map[string][]model.Endpoint, all bool) {
	// An EDS push looks up only the CLAs it built; a full one also needs the whole set, for
	// the deletions.
	var cur map[string]types.Resource
	lookup := p.caches.Endpoints.Resource
	if all {
		cur = p.caches.Endpoints.GetResources()
		lookup = func(name string) (types.Resource, bool) { r, ok := cur[name]; return r, ok }
	}
	if p.pushed == nil {
		p.pushed = map[string][]model.Endpoint{}
	}
	changed := map[string]types.Resource{}
	for name, r := range next {
		old, ok := lookup(name)
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
	p.rec.mu.Lock()
	for n := range changed {
		p.rec.clas[n] = struct{}{}
	}
	for _, n := range deleted {
		p.rec.clas[n] = struct{}{}
	}
	p.rec.mu.Unlock()
	if err := p.caches.Endpoints.UpdateResources(changed, deleted); err != nil {
		p.log.Error("update endpoint cache", "err", err)
	}
	p.caches.noteServed(p.caches.Endpoints.NumResources())
}

// TriggerType maps a model change reason to istiod's pilot_push_triggers type: endpoint
// (EndpointSlice and WorkloadEntry endpoint changes, service accounts), service (Services,
// ServiceEntries), config (Sidecars), global (the initial push).
func TriggerType(reason string) string {
	switch reason {
	case "endpoints", "endpointslice", "workloadentry", "service accounts changed", "new service", "headless endpoints":
		return "endpoint"
	case "service", "serviceentry":
		return "service"
	case "sidecar":
		return "config"
	}
	return "global"
}

// scopeKey mirrors Istio 1.6's model.ConfigKey: a GroupVersionKind (three strings), a name and a
// namespace, 80 bytes.
type scopeKey struct {
	group, version, kind string
	name, namespace      string
}

// scope mirrors the default SidecarScope of Istio 1.6: the services a proxy sees, looked up by
// hostname, and the configs it depends on (configDependencies, a map keyed by the 80-byte
// ConfigKey). Each scope holds its own copy of every service (the struct, not a pointer to the
// model's), so every (scope, service) pair costs the service's data, a hostname index entry and
// a dependency entry: the cost that made 1.6's scopes grow with n².
type scope struct {
	services   []model.Service
	byHostname map[string]*model.Service
	deps       map[scopeKey]struct{}
}

// buildScopes is the quadratic-scope regression. Istio 1.6 (initSidecarScopes, before istio
// #25118) built a default SidecarScope per *service*, not per namespace, each listing every
// service and depending on every service's ConfigKey (a map with 80-byte keys, before #25532 made
// it a uint32 hash): n scopes × n entries, ≈ 12 GB of istiod at 5000 ServiceEntries. The scopes
// are rebuilt on every full push, the previous set alive until the new one is complete, as a push
// context was. The generated config does not change: the bug is the memory and the build time.
func (p *Pusher) buildScopes(entries []*model.Entry) {
	scopes := make([]*scope, 0, len(entries))
	for range entries {
		// As 1.6: the services appended to an empty slice, maps grown from empty.
		sc := &scope{byHostname: map[string]*model.Service{}, deps: map[scopeKey]struct{}{}}
		for _, e := range entries {
			sc.services = append(sc.services, *e.Service)
		}
		for i := range sc.services {
			s := &sc.services[i]
			sc.byHostname[s.Hostname] = s
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
