package model

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meshchaos/meshchaos/controlplane/regress"
)

// Change says what a model mutation means for the proxies: a full push (services, ports or
// host ownership changed), or an incremental EDS push of the clusters of Hosts.
type Change struct {
	Full bool
	// Hosts whose endpoints changed (EDS). Meaningless when Full.
	Hosts map[string]struct{}
	// Configs name what a full push is for: host names whose service changed and
	// "Sidecar/NS" for Sidecar changes (istiod's ConfigsUpdated), so a full push reaches only
	// the proxies whose scope sees one of them. Empty with Full: every proxy.
	Configs map[string]struct{}
	// Reasons are short labels for logs and metrics ("serviceentry", "endpoints", ...).
	Reasons []string
}

// Empty reports whether the change needs no push.
func (c Change) Empty() bool { return !c.Full && len(c.Hosts) == 0 }

// Merge folds o into c.
func (c *Change) Merge(o Change) {
	all := (c.Full && len(c.Configs) == 0) || (o.Full && len(o.Configs) == 0)
	if o.Full {
		c.Full = true
	}
	if all {
		c.Configs = nil
	} else {
		for k := range o.Configs {
			if c.Configs == nil {
				c.Configs = map[string]struct{}{}
			}
			c.Configs[k] = struct{}{}
		}
	}
	for h := range o.Hosts {
		if c.Hosts == nil {
			c.Hosts = map[string]struct{}{}
		}
		c.Hosts[h] = struct{}{}
	}
	for _, r := range o.Reasons {
		if !slices.Contains(c.Reasons, r) {
			c.Reasons = append(c.Reasons, r)
		}
	}
}

func (c *Change) eds(host, reason string) {
	if c.Hosts == nil {
		c.Hosts = map[string]struct{}{}
	}
	c.Hosts[host] = struct{}{}
	c.addReason(reason)
}

// fullConfig is a full push for the proxies that see config (a host or "Sidecar/NS").
func (c *Change) fullConfig(config, reason string) {
	if !c.Full || len(c.Configs) > 0 {
		if c.Configs == nil {
			c.Configs = map[string]struct{}{}
		}
		c.Configs[config] = struct{}{}
	}
	c.Full = true
	c.addReason(reason)
}

// AllProxies reports whether a full change concerns every proxy (no Configs).
func (c Change) AllProxies() bool { return c.Full && len(c.Configs) == 0 }

func (c *Change) addReason(r string) {
	if !slices.Contains(c.Reasons, r) {
		c.Reasons = append(c.Reasons, r)
	}
}

// Entry is one host as the proxies see it: its service and its endpoints by service port
// number. Entries are immutable; the model replaces them on change.
type Entry struct {
	Service   *Service
	Endpoints map[uint32][]Endpoint
}

// SameConfig reports whether e and o generate the same clusters, listeners and routes: same
// service, and for services whose endpoints are inline in the cluster (DNS), same endpoints.
func (e *Entry) SameConfig(o *Entry) bool {
	if e == o {
		return true
	}
	if e == nil || o == nil || !e.Service.equal(o.Service) {
		return false
	}
	return e.Service.Resolution != ResolutionDNS || endpointsMapEqual(e.Endpoints, o.Endpoints)
}

// Options configure a Model.
type Options struct {
	// Regress enables regression switches that live in the model (se-endpoint-port,
	// we-stale-label, full-push-on-endpoint-reappear).
	Regress regress.Set
	// DomainSuffix is the cluster domain (default "cluster.local").
	DomainSuffix string
	// RootNamespace holds the mesh-wide default Sidecar (default DefaultRootNamespace).
	RootNamespace string
	Logger        *slog.Logger
	// OnSkip is called for every piece of input the conversion refused (after logging it).
	OnSkip func(Skip)
}

// Model is the registry. Its methods are safe for concurrent use; mutations are expected from a
// single event-processing goroutine.
type Model struct {
	opts Options
	log  *slog.Logger

	mu  sync.RWMutex
	ses map[string]*seState
	wes map[string]*weState
	// Indexes that keep every event O(objects it touches), not O(all objects).
	selectorSEs map[string]map[string]*seState // namespace → ServiceEntries with a workloadSelector
	wesByNS     map[string]map[string]*weState // namespace → WorkloadEntries
	kube        map[string]*kubeState
	slices      map[string]*sliceState
	pods        map[string]*podState
	podRefs     map[string]map[string]struct{} // pod key → Service keys whose slices point at it
	// slicesBySvc: Service key → its EndpointSlices.
	slicesBySvc map[string]map[string]*sliceState
	claims      map[string]map[string]claim // host → source key → claim
	hosts       map[string]*Entry
	// readySAs is the full-push-on-endpoint-reappear switch's state: host → service accounts of
	// its ready endpoints (istiod's EndpointShards.ServiceAccounts).
	readySAs map[string]map[string]struct{}
	// hadEndpoints holds the hosts that have had endpoints since they were defined: istiod's
	// EndpointIndex keeps a service's shard (its keys preserved) when its endpoints go to 0, and
	// a shard it has to create — a service's first endpoints — is a full push ("Full push, new
	// service", pilot/pkg/model/endpointshards.go UpdateServiceEndpoints).
	hadEndpoints map[string]bool
	// sidecars: namespace → name → namespace-wide Sidecar.
	sidecars map[string]map[string]*Sidecar
	// gateways and virtualServices by "ns/name".
	gateways        map[string]*Gateway
	virtualServices map[string]*VirtualService
}

type claim struct {
	created time.Time
	key     string // "se/ns/name" or "svc/ns/name"
}

type seState struct {
	key, ns string
	created time.Time
	conv    *ConvertedServiceEntry
	// selected: WorkloadEntry key → its endpoint as associated through the workloadSelector.
	// The value, not a lookup: an association the we-stale-label switch keeps outlives the entry.
	selected  map[string]SEEndpoint
	endpoints map[uint32][]Endpoint
	// portBug: the endpoints carry the ServiceEntry port (se-endpoint-port) until a full push.
	portBug bool
}

type weState struct {
	key, ns string
	ep      SEEndpoint
}

// New returns an empty model.
func New(opts Options) *Model {
	if opts.DomainSuffix == "" {
		opts.DomainSuffix = "cluster.local"
	}
	if opts.RootNamespace == "" {
		opts.RootNamespace = DefaultRootNamespace
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Model{
		opts: opts, log: opts.Logger,
		ses: map[string]*seState{}, wes: map[string]*weState{}, kube: map[string]*kubeState{},
		selectorSEs: map[string]map[string]*seState{}, wesByNS: map[string]map[string]*weState{},
		slicesBySvc: map[string]map[string]*sliceState{},
		slices:      map[string]*sliceState{}, pods: map[string]*podState{},
		podRefs: map[string]map[string]struct{}{}, claims: map[string]map[string]claim{},
		hosts: map[string]*Entry{}, readySAs: map[string]map[string]struct{}{}, hadEndpoints: map[string]bool{},
		sidecars: map[string]map[string]*Sidecar{},
		gateways: map[string]*Gateway{}, virtualServices: map[string]*VirtualService{},
	}
}

// Skip logs and counts one refused piece of input (used by the conversion's callers too).
func (m *Model) Skip(s Skip) { m.skip(s) }

func (m *Model) skip(s Skip) {
	m.log.Warn("input skipped", "object", s.Object, "what", s.What, "reason", s.Reason)
	if m.opts.OnSkip != nil {
		m.opts.OnSkip(s)
	}
}

// Entries returns every host, sorted by host name.
func (m *Model) Entries() []*Entry {
	m.mu.RLock()
	out := make([]*Entry, 0, len(m.hosts))
	for _, e := range m.hosts {
		out = append(out, e)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Service.Hostname < out[j].Service.Hostname })
	return out
}

// Entry returns one host's entry, or nil.
func (m *Model) Entry(host string) *Entry {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.hosts[host]
}

// Stats counts hosts and endpoints (every port's endpoints counted).
func (m *Model) Stats() (hosts, endpoints int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, e := range m.hosts {
		for _, eps := range e.Endpoints {
			endpoints += len(eps)
		}
	}
	return len(m.hosts), endpoints
}

// ---- ServiceEntry ----

// SetServiceEntry adds or updates a ServiceEntry (conv nil: it failed conversion; it is then
// treated as deleted so a previously valid version does not linger).
func (m *Model) SetServiceEntry(ns, name string, created time.Time, conv *ConvertedServiceEntry) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := ns + "/" + name
	if conv == nil {
		return m.deleteSELocked(key)
	}
	old := m.ses[key]
	st := &seState{key: key, ns: ns, created: created, conv: conv}
	if old != nil {
		st.created = old.created
	}
	incremental := old != nil && endpointOnlyUpdate(old.conv, conv)
	if incremental && m.opts.Regress.On(regress.WEStaleLabel) {
		// Istio 1.6 updated only the entry's own endpoints on an endpoint-only change; the
		// WorkloadEntry associations (stale ones included) stayed as they were.
		st.selected = maps.Clone(old.selected)
	} else {
		st.selected = m.selectWorkloadEntries(ns, conv.Selector)
	}
	// se-endpoint-port: Istio 1.6's incremental path wrote every endpoint of the host with the
	// ServiceEntry port; only a full push rebuilt them right (RefreshForFullPush).
	m.computeSEEndpoints(st, incremental && m.seEndpointPortBug(st))
	m.ses[key] = st
	if conv.Selector != nil {
		index(m.selectorSEs, ns, key, st)
	} else {
		unindex(m.selectorSEs, ns, key)
	}

	var ch Change
	hosts := map[string]bool{}
	if old != nil {
		for _, s := range old.conv.Services {
			hosts[s.Hostname] = true
			delete(m.claims[s.Hostname], "se/"+key)
		}
	}
	for _, s := range conv.Services {
		hosts[s.Hostname] = true
		prev, _ := m.owner(s.Hostname)
		m.claim(s.Hostname, claim{created: st.created, key: "se/" + key})
		m.reportDuplicate(s.Hostname, "se/"+key, prev.key)
	}
	for h := range hosts {
		m.recomputeHost(h, &ch, "serviceentry")
	}
	if !incremental {
		m.rebuildStaleSelections(&ch)
	}
	return ch
}

// endpointOnlyUpdate reports whether Istio 1.6 handled a ServiceEntry update incrementally:
// services and selector unchanged, and for DNS entries the endpoints too (a DNS entry's endpoints
// are in its cluster, so changing them was a full push).
func endpointOnlyUpdate(old, cur *ConvertedServiceEntry) bool {
	if !slices.EqualFunc(old.Services, cur.Services, (*Service).equal) ||
		!maps.Equal(old.Selector, cur.Selector) || (old.Selector == nil) != (cur.Selector == nil) {
		return false
	}
	return cur.Services[0].Resolution == ResolutionStatic || slices.EqualFunc(old.Endpoints, cur.Endpoints, SEEndpoint.equal)
}

// selectWorkloadEntries returns the WorkloadEntries of ns that selector matches.
func (m *Model) selectWorkloadEntries(ns string, selector map[string]string) map[string]SEEndpoint {
	out := map[string]SEEndpoint{}
	if selector == nil {
		return out
	}
	for wk, we := range m.wesByNS[ns] {
		if selects(selector, we.ep.Labels) {
			out[wk] = we.ep
		}
	}
	return out
}

// rebuildStaleSelections is we-stale-label's only healing: Istio 1.6 rebuilt its whole
// ServiceEntry/WorkloadEntry index (maybeRefreshIndexes) after a ServiceEntry change that
// needed a full push — any ServiceEntry, related or not — which dropped stale associations.
func (m *Model) rebuildStaleSelections(ch *Change) {
	if !m.opts.Regress.On(regress.WEStaleLabel) {
		return
	}
	for ns, sts := range m.selectorSEs {
		for _, st := range sts {
			sel := m.selectWorkloadEntries(ns, st.conv.Selector)
			if maps.EqualFunc(sel, st.selected, SEEndpoint.equal) {
				continue
			}
			st.selected = sel
			m.computeSEEndpoints(st, false)
			for _, s := range st.conv.Services {
				m.recomputeHost(s.Hostname, ch, "serviceentry")
			}
		}
	}
}

// DeleteServiceEntry removes a ServiceEntry.
func (m *Model) DeleteServiceEntry(ns, name string) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleteSELocked(ns + "/" + name)
}

func (m *Model) deleteSELocked(key string) Change {
	var ch Change
	old := m.ses[key]
	if old == nil {
		return ch
	}
	delete(m.ses, key)
	unindex(m.selectorSEs, old.ns, key)
	for _, s := range old.conv.Services {
		delete(m.claims[s.Hostname], "se/"+key)
		m.recomputeHost(s.Hostname, &ch, "serviceentry")
	}
	m.rebuildStaleSelections(&ch)
	return ch
}

// seEndpointPortBug reports whether an incremental update of st writes the ServiceEntry port
// (se-endpoint-port). Only STATIC entries: their endpoints go out by EDS; Istio 1.6 sent DNS
// entries' endpoint changes as full pushes, which were right.
func (m *Model) seEndpointPortBug(st *seState) bool {
	return m.opts.Regress.On(regress.SEEndpointPort) && st.conv.Services[0].Resolution == ResolutionStatic
}

func (m *Model) computeSEEndpoints(st *seState, buggyPorts bool) {
	st.portBug = buggyPorts
	all := slices.Clone(st.conv.Endpoints)
	for _, wk := range slices.Sorted(maps.Keys(st.selected)) {
		all = append(all, st.selected[wk])
	}
	ports := st.conv.Services[0].Ports
	st.endpoints = make(map[uint32][]Endpoint, len(ports))
	for _, p := range ports {
		eps := make([]Endpoint, 0, len(all))
		for _, e := range all {
			port := endpointPort(e, p)
			if buggyPorts {
				port = p.Number
			}
			w := e.Weight
			if w == 0 {
				w = 1
			}
			eps = append(eps, Endpoint{Address: e.Address, Port: port, Labels: e.Labels,
				ServiceAccount: e.ServiceAccount, Healthy: true, Weight: w})
		}
		sortEndpoints(eps)
		st.endpoints[p.Number] = eps
	}
}

// RefreshForFullPush brings what a full push reads up to date before it reads the model. Only
// se-endpoint-port needs it: Istio 1.6 rebuilt every ServiceEntry's endpoints from its registry
// on a full push (UpdateServiceShards), which healed the ports its incremental path had written.
// The returned change is covered by the full push that follows.
func (m *Model) RefreshForFullPush() Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ch Change
	for _, st := range m.ses {
		if !st.portBug {
			continue
		}
		m.computeSEEndpoints(st, false)
		for _, s := range st.conv.Services {
			m.recomputeHost(s.Hostname, &ch, "serviceentry")
		}
	}
	return ch
}

// ---- WorkloadEntry ----

// SetWorkloadEntry adds or updates a WorkloadEntry (ok false: it failed conversion and is
// treated as deleted).
func (m *Model) SetWorkloadEntry(ns, name string, ep SEEndpoint, ok bool) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := ns + "/" + name
	if !ok {
		return m.deleteWELocked(key)
	}
	we := &weState{key: key, ns: ns, ep: ep}
	m.wes[key] = we
	index(m.wesByNS, ns, key, we)
	var ch Change
	for _, st := range m.selectorSEs[ns] {
		_, was := st.selected[key]
		switch {
		case selects(st.conv.Selector, ep.Labels):
			st.selected[key] = ep
		case was && m.opts.Regress.On(regress.WEStaleLabel):
			// Istio 1.6 (#25678) updated only the ServiceEntries the new labels select, so
			// nothing removed the association (with the endpoint as it was) from this one.
			continue
		case was:
			delete(st.selected, key)
		default:
			continue
		}
		m.computeSEEndpoints(st, m.seEndpointPortBug(st))
		for _, s := range st.conv.Services {
			m.recomputeHost(s.Hostname, &ch, "workloadentry")
		}
	}
	return ch
}

// DeleteWorkloadEntry removes a WorkloadEntry.
func (m *Model) DeleteWorkloadEntry(ns, name string) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleteWELocked(ns + "/" + name)
}

func (m *Model) deleteWELocked(key string) Change {
	var ch Change
	we, ok := m.wes[key]
	if !ok {
		return ch
	}
	delete(m.wes, key)
	unindex(m.wesByNS, we.ns, key)
	for _, st := range m.selectorSEs[we.ns] {
		if _, ok := st.selected[key]; !ok {
			continue
		}
		if m.opts.Regress.On(regress.WEStaleLabel) && !selects(st.conv.Selector, we.ep.Labels) {
			// Istio 1.6 found what to delete by matching the deleted entry's last labels
			// against the selectors: an association a relabel left behind survives the delete.
			continue
		}
		delete(st.selected, key)
		m.computeSEEndpoints(st, m.seEndpointPortBug(st))
		for _, s := range st.conv.Services {
			m.recomputeHost(s.Hostname, &ch, "workloadentry")
		}
	}
	return ch
}

// ---- hosts ----

func (m *Model) claim(host string, c claim) {
	cs := m.claims[host]
	if cs == nil {
		cs = map[string]claim{}
		m.claims[host] = cs
	}
	cs[c.key] = c
}

// owner picks the oldest claim (then the smallest key), as Istio resolves duplicate hosts.
func (m *Model) owner(host string) (claim, bool) {
	var best claim
	found := false
	for _, c := range m.claims[host] {
		if !found || c.created.Before(best.created) || (c.created.Equal(best.created) && c.key < best.key) {
			best, found = c, true
		}
	}
	return best, found
}

// reportDuplicate logs and counts a definition of host that loses to an older one: key itself
// if it lost, or prevOwner if key (older) just displaced it.
func (m *Model) reportDuplicate(host, key, prevOwner string) {
	c, ok := m.owner(host)
	if !ok {
		return
	}
	loser := key
	if c.key == key {
		if prevOwner == "" || prevOwner == key {
			return
		}
		loser = prevOwner
	}
	m.skip(Skip{Object: objectName(loser), What: fmt.Sprintf("host %q (defined first by %s)", host, objectName(c.key)),
		Reason: "duplicate host"})
}

// objectName turns a claim key ("se/ns/name", "svc/ns/name") into "Kind/ns/name".
func objectName(key string) string {
	if rest, ok := strings.CutPrefix(key, "se/"); ok {
		return "ServiceEntry/" + rest
	}
	return "Service/" + strings.TrimPrefix(key, "svc/")
}

// recomputeHost rebuilds host's entry from its owner and records what changed in ch.
func (m *Model) recomputeHost(host string, ch *Change, reason string) {
	old := m.hosts[host]
	var next *Entry
	if c, ok := m.owner(host); ok {
		if len(m.claims[host]) > 1 {
			m.log.Debug("duplicate host: oldest definition wins", "host", host, "owner", c.key)
		}
		switch c.key[:3] {
		case "se/":
			if st := m.ses[c.key[3:]]; st != nil {
				for _, s := range st.conv.Services {
					if s.Hostname == host {
						next = &Entry{Service: s, Endpoints: st.endpoints}
					}
				}
			}
		default: // "svc"
			if ks := m.kube[c.key[4:]]; ks != nil {
				next = &Entry{Service: ks.svc, Endpoints: ks.endpoints}
			}
		}
	} else {
		delete(m.claims, host)
	}
	if next == nil {
		delete(m.readySAs, host)
		delete(m.hadEndpoints, host)
		if old != nil {
			delete(m.hosts, host)
			ch.fullConfig(host, reason)
		}
		return
	}
	saChanged := m.readyServiceAccountsChanged(host, next)
	has := hasEndpoints(next)
	first := has && !m.hadEndpoints[host]
	if has {
		m.hadEndpoints[host] = true
	}
	if old == nil || !old.Service.equal(next.Service) {
		m.hosts[host] = next
		ch.fullConfig(host, reason)
		return
	}
	if endpointsMapEqual(old.Endpoints, next.Endpoints) {
		// Keep the old entry: unchanged endpoint slices keep their identity, which lets the
		// pusher skip comparing their ClusterLoadAssignments.
		return
	}
	m.hosts[host] = next
	switch {
	case first:
		ch.fullConfig(host, "new service")
	case saChanged:
		ch.fullConfig(host, "service accounts changed")
	case headlessTCP(next.Service):
		// istiod re-pushes a headless Service's configuration when its endpoints change if a
		// port is not HTTP: proxies get a listener per endpoint IP (endpointslice.go
		// onEventInternal, "HeadlessEndpointUpdate"); pure HTTP headless services only EDS.
		ch.fullConfig(host, "headless endpoints")
	default:
		ch.eds(host, "endpoints")
	}
}

// hasEndpoints reports whether e has an endpoint on any port, ready or not.
func hasEndpoints(e *Entry) bool {
	for _, eps := range e.Endpoints {
		if len(eps) > 0 {
			return true
		}
	}
	return false
}

// headlessTCP reports whether s is a headless Kubernetes Service with a port that is not HTTP.
func headlessTCP(s *Service) bool {
	if s.KubeName == "" || s.ClusterIP != "" || s.Resolution != ResolutionStatic {
		return false
	}
	for _, p := range s.Ports {
		if !HTTPLike(p.Protocol) {
			return true
		}
	}
	return false
}

func endpointsMapEqual(a, b map[uint32][]Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for p, eps := range a {
		o, ok := b[p]
		if !ok || !endpointsEqual(eps, o) {
			return false
		}
	}
	return true
}

// readyServiceAccountsChanged is the full-push-on-endpoint-reappear switch (false without it).
// istiod up to 1.15.0 kept, per service, the set of non-empty service accounts of its ready
// endpoints and forced a full push ("service accounts changed") when an update brought a
// different set. An update without ready endpoints dropped the set and was incremental, so every
// 0→N of a workload with a service account — a single pod flapping Ready — was a full push.
func (m *Model) readyServiceAccountsChanged(host string, e *Entry) bool {
	if !m.opts.Regress.On(regress.FullPushOnEndpointReappear) {
		return false
	}
	set := map[string]struct{}{}
	ready := false
	for _, eps := range e.Endpoints {
		for _, ep := range eps {
			if !ep.Healthy {
				continue
			}
			ready = true
			if ep.ServiceAccount != "" {
				set[ep.ServiceAccount] = struct{}{}
			}
		}
	}
	if !ready {
		delete(m.readySAs, host)
		return false
	}
	old := m.readySAs[host]
	m.readySAs[host] = set
	return !maps.Equal(old, set)
}

func index[V any](idx map[string]map[string]V, ns, key string, v V) {
	m := idx[ns]
	if m == nil {
		m = map[string]V{}
		idx[ns] = m
	}
	m[key] = v
}

func unindex[V any](idx map[string]map[string]V, ns, key string) {
	if m := idx[ns]; m != nil {
		delete(m, key)
		if len(m) == 0 {
			delete(idx, ns)
		}
	}
}
