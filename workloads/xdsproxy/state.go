package xdsproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
)

// update is one decoded xDS response for one type, protocol-neutral.
type update struct {
	typeURL   string
	version   string // SotW version_info, or the delta system_version_info
	resources []namedResource
	removed   []string // delta removals
	// full is set for SotW CDS and LDS: every resource of the type is in the response and
	// an omitted one is deleted. SotW EDS and RDS responses carry only what changed.
	full bool
}

type namedResource struct {
	name    string
	version string
	msg     proto.Message
}

type clusterSlot struct {
	active, warming *clusterCfg
	warmTimedOut    bool
	timer           *time.Timer
}

type listenerSlot struct {
	active, warming *listenerCfg
	warmTimedOut    bool
	timer           *time.Timer
	sock            *boundListener
}

// state is the proxy's configuration as Envoy's managers hold it: active and warming clusters
// and listeners, the endpoint and route resources they use, and server initialization.
type state struct {
	mu        sync.Mutex
	clusters  map[string]*clusterSlot
	clas      map[string]*claCfg
	listeners map[string]*listenerSlot
	routes    map[string]*routeCfg
	versions  map[string]string // last accepted version per type (config_dump version_info)
	lastErr   map[string]string // last rejection per type

	cdsSeen, ldsSeen bool
	clustersInit     bool // initial clusters are warm: LDS may be requested
	ready            bool
	// created → ready: Envoy's server.initialization_time_ms (the time to first config).
	created time.Time
	initMs  int64

	rr map[string]*atomic.Uint64 // round-robin position per cluster, kept across updates

	listenerIP string // overrides listener IPs (Options.ListenerIP)

	changed  chan struct{} // tells the xDS loop that subscriptions may have changed
	publish  func(*snapshot)
	bindFunc func(l *listenerCfg) (*boundListener, error)
	serve    func(b *boundListener)
	stats    *stats
	log      *slog.Logger // nil: nothing is logged
}

func newState(st *stats) *state {
	return &state{
		created:   time.Now(),
		clusters:  map[string]*clusterSlot{},
		clas:      map[string]*claCfg{},
		listeners: map[string]*listenerSlot{},
		routes:    map[string]*routeCfg{},
		versions:  map[string]string{},
		lastErr:   map[string]string{},
		rr:        map[string]*atomic.Uint64{},
		changed:   make(chan struct{}, 1),
		stats:     st,
	}
}

func (s *state) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// apply applies u as Envoy would: valid resources take effect, invalid ones are reported and
// leave what was there before. The returned error is the NACK message.
func (s *state) apply(u update) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []string
	switch u.typeURL {
	case resourcev3.ClusterType:
		errs = s.applyClusters(u)
		s.cdsSeen = true
	case resourcev3.EndpointType:
		errs = s.applyCLAs(u)
	case resourcev3.ListenerType:
		errs = s.applyListeners(u)
		s.ldsSeen = true
	case resourcev3.RouteType:
		errs = s.applyRoutes(u)
	default:
		return fmt.Errorf("xdsproxy does not handle type %s", u.typeURL)
	}
	s.settle()
	if len(errs) > 0 {
		s.lastErr[u.typeURL] = strings.Join(errs, "; ")
		return errors.New(strings.Join(errs, "; "))
	}
	s.versions[u.typeURL] = u.version
	delete(s.lastErr, u.typeURL)
	return nil
}

// reject records a response that could not even be decoded; nothing changes.
func (s *state) reject(typeURL string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr[typeURL] = err.Error()
}

func (s *state) applyClusters(u update) []string {
	var errs []string
	present := map[string]bool{}
	for _, r := range u.resources {
		present[r.name] = true
		cfg, err := translateCluster(r.msg.(*clusterv3.Cluster), r.version)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		for _, f := range cfg.notHonoured {
			if s.stats.notHonoured(f) && s.log != nil {
				s.log.Warn("accepted a cluster with what xdsproxy does not do (counted in xdsproxy.unsupported.*)", "cluster", cfg.name, "feature", f)
			}
		}
		slot := s.clusters[cfg.name]
		if slot == nil {
			slot = &clusterSlot{}
			s.clusters[cfg.name] = slot
		}
		// Envoy ignores an update that does not change the cluster.
		if slot.warming == nil && slot.active != nil && proto.Equal(slot.active.raw, cfg.raw) {
			continue
		}
		if slot.warming != nil && proto.Equal(slot.warming.raw, cfg.raw) {
			continue
		}
		if slot.timer != nil {
			slot.timer.Stop()
		}
		slot.warming, slot.warmTimedOut = cfg, false
		if cfg.eds && cfg.fetchTimeout > 0 {
			name := cfg.name
			slot.timer = time.AfterFunc(cfg.fetchTimeout, func() { s.warmTimeoutCluster(name, cfg) })
		}
	}
	for _, name := range u.removed {
		s.deleteCluster(name)
	}
	if u.full {
		for name := range s.clusters {
			if !present[name] {
				s.deleteCluster(name)
			}
		}
	}
	return errs
}

func (s *state) deleteCluster(name string) {
	if slot := s.clusters[name]; slot != nil {
		if slot.timer != nil {
			slot.timer.Stop()
		}
		delete(s.clusters, name)
		delete(s.rr, name)
	}
}

func (s *state) warmTimeoutCluster(name string, cfg *clusterCfg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot := s.clusters[name]; slot != nil && slot.warming == cfg {
		slot.warmTimedOut = true
		s.settle()
	}
}

func (s *state) applyCLAs(u update) []string {
	var errs []string
	subscribed := s.edsNamesLocked()
	for _, r := range u.resources {
		if !slices.Contains(subscribed, r.name) {
			continue // Envoy ignores resources it did not ask for
		}
		cfg, err := translateCLA(r.msg.(*endpointv3.ClusterLoadAssignment), r.version)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		s.clas[cfg.name] = cfg
	}
	for _, name := range u.removed {
		delete(s.clas, name)
	}
	return errs
}

func (s *state) applyListeners(u update) []string {
	var errs []string
	present := map[string]bool{}
	for _, r := range u.resources {
		present[r.name] = true
		cfg, err := translateListener(r.msg.(*listenerv3.Listener), r.version)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if s.listenerIP != "" {
			cfg.address = net.JoinHostPort(s.listenerIP, cfg.port)
		}
		slot := s.listeners[cfg.name]
		if slot != nil && slot.warming == nil && slot.active != nil && proto.Equal(slot.active.raw, cfg.raw) {
			continue
		}
		if slot != nil && slot.warming != nil && proto.Equal(slot.warming.raw, cfg.raw) {
			continue
		}
		if err := s.checkAddress(cfg, slot); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if slot == nil {
			slot = &listenerSlot{}
			if cfg.bind {
				b, err := s.bindFunc(cfg)
				switch {
				case err != nil && cfg.captured:
					// Envoy binds no port for it: a port of the pod's own (the proxy's admin,
					// the app's) is not a reason to reject it.
					cfg.unserved = fmt.Sprintf("served on loopback where possible, but %s is taken: %v", cfg.address, err)
				case err != nil:
					errs = append(errs, fmt.Sprintf("listener %q: cannot bind %s: %v", cfg.name, cfg.address, err))
					continue
				default:
					slot.sock = b
				}
			}
			s.listeners[cfg.name] = slot
		}
		if cfg.unserved != "" && s.stats.notHonoured("listener-not-served") && s.log != nil {
			s.log.Warn("accepted a listener xdsproxy does not serve (counted in xdsproxy.unsupported.listener-not-served)", "listener", cfg.name, "why", cfg.unserved)
		}
		if slot.timer != nil {
			slot.timer.Stop()
		}
		slot.warming, slot.warmTimedOut = cfg, false
		if cfg.rdsName != "" && cfg.rdsTimeout > 0 {
			name := cfg.name
			slot.timer = time.AfterFunc(cfg.rdsTimeout, func() { s.warmTimeoutListener(name, cfg) })
		}
	}
	for _, name := range u.removed {
		s.deleteListener(name)
	}
	if u.full {
		for name := range s.listeners {
			if !present[name] {
				s.deleteListener(name)
			}
		}
	}
	return errs
}

// checkAddress rejects what Envoy rejects: two listeners on one address, and changing the
// address or bind_to_port of an existing listener.
func (s *state) checkAddress(cfg *listenerCfg, slot *listenerSlot) error {
	if slot != nil {
		cur := slot.active
		if cur == nil {
			cur = slot.warming
		}
		if cur.address != cfg.address || cur.bind != cfg.bind {
			return fmt.Errorf("listener %q: updating the address (%s to %s) or bind_to_port of a listener is not supported", cfg.name, cur.address, cfg.address)
		}
		return nil
	}
	for name, other := range s.listeners {
		cur := other.active
		if cur == nil {
			cur = other.warming
		}
		if cur.address == cfg.address && cfg.bind {
			return fmt.Errorf("listener %q: has duplicate address %s as existing listener %q", cfg.name, cfg.address, name)
		}
	}
	return nil
}

func (s *state) deleteListener(name string) {
	slot := s.listeners[name]
	if slot == nil {
		return
	}
	if slot.timer != nil {
		slot.timer.Stop()
	}
	if slot.sock != nil {
		if slot.active != nil {
			slot.sock.draining.Store(s.liveListenerLocked(slot.active))
		}
		slot.sock.close()
	}
	delete(s.listeners, name)
}

func (s *state) warmTimeoutListener(name string, cfg *listenerCfg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot := s.listeners[name]; slot != nil && slot.warming == cfg {
		slot.warmTimedOut = true
		s.settle()
	}
}

func (s *state) applyRoutes(u update) []string {
	var errs []string
	subscribed := s.rdsNamesLocked()
	for _, r := range u.resources {
		if !slices.Contains(subscribed, r.name) {
			continue
		}
		rc := r.msg.(*routev3.RouteConfiguration)
		t, err := compileRouteConfig(rc)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		s.routes[rc.GetName()] = &routeCfg{name: rc.GetName(), version: r.version, raw: rc, table: t, updated: time.Now()}
	}
	for _, name := range u.removed {
		delete(s.routes, name)
	}
	return errs
}

// settle promotes warm clusters and listeners, advances initialization, drops resources no
// longer subscribed, publishes the routing snapshot and wakes the xDS loop. Holds s.mu.
func (s *state) settle() {
	for _, slot := range s.clusters {
		w := slot.warming
		if w == nil {
			continue
		}
		if !w.eds || s.clas[w.edsName] != nil || slot.warmTimedOut {
			if slot.timer != nil {
				slot.timer.Stop()
			}
			slot.active, slot.warming = w, nil
		}
	}
	if s.cdsSeen && !s.clustersInit && s.warmingClustersLocked() == 0 {
		s.clustersInit = true
	}
	for _, slot := range s.listeners {
		w := slot.warming
		if w == nil {
			continue
		}
		if w.rdsName == "" || s.routes[w.rdsName] != nil || slot.warmTimedOut {
			if slot.timer != nil {
				slot.timer.Stop()
			}
			slot.active, slot.warming = w, nil
		}
	}
	if s.clustersInit && s.ldsSeen && !s.ready && s.warmingListenersLocked() == 0 {
		s.ready = true
		s.initMs = time.Since(s.created).Milliseconds()
	}
	eds := s.edsNamesLocked()
	for name := range s.clas {
		if !slices.Contains(eds, name) {
			delete(s.clas, name)
		}
	}
	rds := s.rdsNamesLocked()
	for name := range s.routes {
		if !slices.Contains(rds, name) {
			delete(s.routes, name)
		}
	}
	s.publishLocked()
	s.notify()
}

func (s *state) warmingClustersLocked() int {
	n := 0
	for _, slot := range s.clusters {
		if slot.warming != nil {
			n++
		}
	}
	return n
}

func (s *state) warmingListenersLocked() int {
	n := 0
	for _, slot := range s.listeners {
		if slot.warming != nil {
			n++
		}
	}
	return n
}

// edsNamesLocked is the EDS subscription: the assignments of active and warming clusters.
func (s *state) edsNamesLocked() []string {
	set := map[string]bool{}
	for _, slot := range s.clusters {
		for _, c := range []*clusterCfg{slot.active, slot.warming} {
			if c != nil && c.eds {
				set[c.edsName] = true
			}
		}
	}
	return sortedKeys(set)
}

// rdsNamesLocked is the RDS subscription: the route configs of active and warming listeners.
func (s *state) rdsNamesLocked() []string {
	set := map[string]bool{}
	for _, slot := range s.listeners {
		for _, l := range []*listenerCfg{slot.active, slot.warming} {
			if l != nil && l.rdsName != "" {
				set[l.rdsName] = true
			}
		}
	}
	return sortedKeys(set)
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// subscriptions returns the resource names to request per non-wildcard type, and whether LDS
// may be requested yet (Envoy requests listeners once its initial clusters are warm).
func (s *state) subscriptions() (eds, rds []string, lds bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.edsNamesLocked(), s.rdsNamesLocked(), s.clustersInit
}

// markCDSTimedOut ends waiting for the first CDS response (initial fetch timeout).
func (s *state) markTimedOut(typeURL string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch typeURL {
	case resourcev3.ClusterType:
		s.cdsSeen = true
	case resourcev3.ListenerType:
		s.ldsSeen = true
	}
	s.settle()
}

// isReady reports Envoy's /ready: initialization finished (first CDS and LDS applied, their
// clusters and listeners warm).
func (s *state) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// snapshot is what the request path reads: immutable, swapped atomically on every change.
type snapshot struct {
	listeners map[string]*liveListener
	clusters  map[string]*upstream
}

type liveListener struct {
	cfg   *listenerCfg
	table *routeTable // nil: RDS never arrived (initial fetch timed out) → every request is NR
}

type upstream struct {
	name           string
	hosts          []string
	rr             *atomic.Uint64
	connectTimeout time.Duration
}

func (s *state) publishLocked() {
	snap := &snapshot{listeners: map[string]*liveListener{}, clusters: map[string]*upstream{}}
	for name, slot := range s.clusters {
		c := slot.active
		if c == nil {
			continue
		}
		set := c.static
		if c.eds {
			if cla := s.clas[c.edsName]; cla != nil {
				set = cla.set
			}
		}
		rr := s.rr[name]
		if rr == nil {
			rr = &atomic.Uint64{}
			s.rr[name] = rr
		}
		u := &upstream{name: name, rr: rr, connectTimeout: c.connectTimeout}
		u.hosts = set.hostsFor(c.panicThreshold)
		snap.clusters[name] = u
	}
	for name, slot := range s.listeners {
		if slot.active != nil {
			snap.listeners[name] = s.liveListenerLocked(slot.active)
		}
	}
	if s.publish != nil {
		s.publish(snap)
	}
	// Sockets of newly active listeners start accepting only now, as Envoy does not serve a
	// listener before it is warm.
	for _, slot := range s.listeners {
		if slot.active != nil && slot.sock != nil && s.serve != nil {
			s.serve(slot.sock)
		}
	}
	if s.stats != nil {
		s.stats.activeClusters.Store(int64(len(snap.clusters)))
		s.stats.warmingClusters.Store(int64(s.warmingClustersLocked()))
		s.stats.activeListeners.Store(int64(len(snap.listeners)))
		s.stats.warmingListeners.Store(int64(s.warmingListenersLocked()))
	}
}

// liveListenerLocked is what requests on l's connections route with: l and its route table.
func (s *state) liveListenerLocked(l *listenerCfg) *liveListener {
	ll := &liveListener{cfg: l, table: l.inline}
	if l.rdsName != "" {
		if rc := s.routes[l.rdsName]; rc != nil {
			ll.table = rc.table
		}
	}
	return ll
}

// close stops timers and closes every listener socket.
func (s *state) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.listeners {
		s.deleteListener(name)
	}
	for name := range s.clusters {
		s.deleteCluster(name)
	}
}

// boundListener is a listener socket; it accepts connections once its listener is active.
type boundListener struct {
	name     string
	ln       net.Listener
	srv      *http.Server
	once     sync.Once
	closeFn  func()
	draining atomic.Pointer[liveListener] // set when the listener is removed: its last configuration
	open     atomic.Int64                 // connections not yet closed
}

func (b *boundListener) close() {
	if b.closeFn != nil {
		b.closeFn()
	} else {
		b.ln.Close()
	}
}
