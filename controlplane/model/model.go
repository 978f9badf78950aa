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
	// Reasons are short labels for logs and metrics ("serviceentry", "endpoints", ...).
	Reasons []string
}

// Empty reports whether the change needs no push.
func (c Change) Empty() bool { return !c.Full && len(c.Hosts) == 0 }

// Merge folds o into c.
func (c *Change) Merge(o Change) {
	if o.Full {
		c.Full = true
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

func (c *Change) full(reason string) {
	c.Full = true
	c.addReason(reason)
}

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

// Options configure a Model.
type Options struct {
	// Regress enables regression switches that live in the model (se-endpoint-port,
	// we-stale-label, full-push-on-endpoint-reappear).
	Regress regress.Set
	// DomainSuffix is the cluster domain (default "cluster.local").
	DomainSuffix string
	Logger       *slog.Logger
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
}

type claim struct {
	created time.Time
	key     string // "se/ns/name" or "svc/ns/name"
}

type seState struct {
	key, ns   string
	created   time.Time
	conv      *ConvertedServiceEntry
	selected  map[string]bool // WorkloadEntry keys associated through the workloadSelector
	endpoints map[uint32][]Endpoint
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
		hosts: map[string]*Entry{},
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
	st := &seState{key: key, ns: ns, created: created, conv: conv, selected: map[string]bool{}}
	if old != nil {
		st.created = old.created
	}
	// Associate WorkloadEntries through the selector.
	if conv.Selector != nil {
		for wk, we := range m.wesByNS[ns] {
			if selects(conv.Selector, we.ep.Labels) {
				st.selected[wk] = true
			}
		}
	}
	// se-endpoint-port: the historical bug rebuilt the remaining endpoints with the service
	// port when an endpoint had been deleted.
	buggy := m.opts.Regress.On(regress.SEEndpointPort) && old != nil &&
		len(conv.Endpoints)+len(st.selected) < len(old.conv.Endpoints)+len(old.selected)
	m.computeSEEndpoints(st, buggy)
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
	return ch
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
	return ch
}

func (m *Model) computeSEEndpoints(st *seState, buggyPorts bool) {
	all := slices.Clone(st.conv.Endpoints)
	weKeys := slices.Sorted(maps.Keys(st.selected))
	for _, wk := range weKeys {
		if we := m.wes[wk]; we != nil {
			all = append(all, we.ep)
		}
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
		match := selects(st.conv.Selector, ep.Labels)
		was := st.selected[key]
		switch {
		case match:
			st.selected[key] = true
		case was && m.opts.Regress.On(regress.WEStaleLabel):
			// The historical bug: an update only ever added associations, so a WorkloadEntry
			// relabelled away from the selector stayed behind the ServiceEntry.
		case was:
			delete(st.selected, key)
		default:
			continue
		}
		m.computeSEEndpoints(st, false)
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
		if !st.selected[key] {
			continue
		}
		delete(st.selected, key)
		m.computeSEEndpoints(st, m.opts.Regress.On(regress.SEEndpointPort))
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
		if old != nil {
			delete(m.hosts, host)
			ch.full(reason)
		}
		return
	}
	if old == nil || !old.Service.equal(next.Service) {
		m.hosts[host] = next
		ch.full(reason)
		return
	}
	if endpointsMapEqual(old.Endpoints, next.Endpoints) {
		// Keep the old entry: unchanged endpoint slices keep their identity, which lets the
		// pusher skip comparing their ClusterLoadAssignments.
		return
	}
	m.hosts[host] = next
	if m.opts.Regress.On(regress.FullPushOnEndpointReappear) && !sameServiceAccounts(old.Endpoints, next.Endpoints) {
		// Istio ≤ 1.15: a changed service-account set (0→N endpoints always changes it) was
		// treated as a config change and forced a full push.
		ch.full("service accounts changed")
		return
	}
	ch.eds(host, "endpoints")
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

// sameServiceAccounts compares the sets of service accounts of two endpoint maps; an endpoint
// without a service account counts as the empty account, so 0→N always differs.
func sameServiceAccounts(a, b map[uint32][]Endpoint) bool {
	set := func(m map[uint32][]Endpoint) map[string]bool {
		s := map[string]bool{}
		for _, eps := range m {
			for _, e := range eps {
				s[e.ServiceAccount] = true
			}
		}
		return s
	}
	return maps.Equal(set(a), set(b))
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
