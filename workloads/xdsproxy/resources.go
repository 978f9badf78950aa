package xdsproxy

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
)

// Envoy's defaults where a resource leaves a field unset.
const (
	defaultConnectTimeout = 5 * time.Second
	// defaultPanicThreshold is common_lb_config.healthy_panic_threshold's default, in percent.
	defaultPanicThreshold = 50
	// defaultOverprovisioning is a ClusterLoadAssignment policy's overprovisioning_factor
	// default (140 %), as a factor.
	defaultOverprovisioning = 1.4
	// defaultInitialFetchTimeout applies to a config source that sets no initial_fetch_timeout.
	defaultInitialFetchTimeout = 15 * time.Second
)

// clusterCfg is a validated Cluster.
type clusterCfg struct {
	name           string
	version        string
	raw            *clusterv3.Cluster
	eds            bool
	edsName        string        // ClusterLoadAssignment name (service_name, or the cluster name)
	fetchTimeout   time.Duration // how long the cluster warms waiting for EDS; 0 waits forever
	connectTimeout time.Duration
	panicThreshold float64      // percent of healthy hosts below which a level is in panic
	static         *endpointSet // STATIC/STRICT_DNS/LOGICAL_DNS: the inline load_assignment
	updated        time.Time
	// notHonoured names what of the cluster xdsproxy accepts and does not do (see
	// notHonouredOf).
	notHonoured []string
}

// rawBuffer is Envoy's plaintext transport socket.
const rawBuffer = "envoy.transport_sockets.raw_buffer"

// notHonouredOf names the parts of c that xdsproxy accepts, as Envoy does, but cannot honour:
// an upstream TLS transport socket (it connects in plaintext). istiod's clusters carry
// transport_socket_matches for mTLS to endpoints labelled tlsMode=istio; with no such
// endpoint (meshchaos's backends have no Istio sidecar) Envoy too connects in plaintext, so
// the matches are named only when an endpoint could select them.
func notHonouredOf(c *clusterv3.Cluster) []string {
	var out []string
	if ts := c.GetTransportSocket(); ts != nil && ts.GetName() != rawBuffer {
		out = append(out, "upstream_tls")
	}
	for _, m := range c.GetTransportSocketMatches() {
		if m.GetTransportSocket().GetName() != rawBuffer && len(m.GetMatch().GetFields()) == 0 {
			out = append(out, "upstream_tls") // a match of every endpoint
		}
	}
	return out
}

// endpointSet is a ClusterLoadAssignment's hosts by priority level, most preferred first.
type endpointSet struct {
	levels           []priorityLevel
	overprovisioning float64
}

// priorityLevel is one priority's hosts ("ip:port") in assignment order.
type priorityLevel struct {
	priority          uint32
	all               []string // every host, whatever its health
	healthy, degraded []string
	excluded          int // DRAINING: never chosen outside panic, not counted for panic
}

// availablePercent is the level's share of healthy and degraded hosts among those counted.
func (l *priorityLevel) availablePercent() float64 {
	n := len(l.all) - l.excluded
	if n <= 0 {
		return 0
	}
	return 100 * float64(len(l.healthy)+len(l.degraded)) / float64(n)
}

// hostsFor returns the hosts requests are balanced over, as Envoy's load balancer chooses them
// with the given healthy panic threshold (percent): the healthy hosts of the most preferred level
// that has any (degraded ones when no level has a healthy host); all hosts of that level when it
// is in panic (fewer than threshold percent available, unless the levels together are fully
// available after overprovisioning); all hosts of every level when none is available at all
// (Envoy's total panic), or none when the threshold is 0 (503 UH).
func (s *endpointSet) hostsFor(panicThreshold float64) []string {
	if s == nil {
		return nil
	}
	total := 0.0
	for i := range s.levels {
		total += min(100, s.overprovisioning*s.levels[i].availablePercent())
	}
	total = min(100, total)
	if total == 0 {
		if panicThreshold == 0 {
			return nil
		}
		var all []string
		for _, l := range s.levels {
			all = append(all, l.all...)
		}
		return all
	}
	chosen := -1
	for i, l := range s.levels {
		if len(l.healthy) > 0 {
			chosen = i
			break
		}
	}
	if chosen < 0 {
		for i, l := range s.levels {
			if len(l.degraded) > 0 {
				chosen = i
				break
			}
		}
	}
	l := s.levels[chosen]
	switch {
	case total < 100 && l.availablePercent() < panicThreshold:
		return l.all
	case len(l.healthy) > 0:
		return l.healthy
	default:
		return l.degraded
	}
}

// claCfg is a validated ClusterLoadAssignment.
type claCfg struct {
	name    string
	version string
	raw     *endpointv3.ClusterLoadAssignment
	set     *endpointSet
	updated time.Time
}

// listenerCfg is a validated Listener: one with an HTTP connection manager is served, any
// other is held (accepted, as Envoy accepts it, and shown in /config_dump) but not served.
type listenerCfg struct {
	name    string
	version string
	raw     *listenerv3.Listener
	address string // ip:port
	bind    bool
	// unserved says why the listener is held but not served ("": served).
	unserved string
	// captured: a 0.0.0.0 listener with bind_to_port false, served on loopback instead.
	captured     bool
	statPrefix   string
	rdsName      string        // set when routes come from RDS
	rdsTimeout   time.Duration // RDS initial fetch timeout; 0 waits forever
	inline       *routeTable   // set when the route config is inline
	stripAnyPort bool
	stripMatch   bool
	port         string
	updated      time.Time
}

// routeCfg is a validated RouteConfiguration.
type routeCfg struct {
	name    string
	version string
	raw     proto.Message
	table   *routeTable
	updated time.Time
}

func fetchTimeout(cs *corev3.ConfigSource) time.Duration {
	if cs == nil || cs.GetInitialFetchTimeout() == nil {
		return defaultInitialFetchTimeout
	}
	return cs.GetInitialFetchTimeout().AsDuration()
}

func translateCluster(c *clusterv3.Cluster, version string) (*clusterCfg, error) {
	if err := c.ValidateAll(); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.GetName(), err)
	}
	cc := &clusterCfg{name: c.GetName(), version: version, raw: c, connectTimeout: defaultConnectTimeout, updated: time.Now(),
		notHonoured: notHonouredOf(c)}
	if ct := c.GetConnectTimeout(); ct != nil {
		cc.connectTimeout = ct.AsDuration()
	}
	cc.panicThreshold = defaultPanicThreshold
	if pt := c.GetCommonLbConfig().GetHealthyPanicThreshold(); pt != nil {
		cc.panicThreshold = min(100, pt.GetValue())
	}
	switch c.GetType() {
	case clusterv3.Cluster_EDS:
		ec := c.GetEdsClusterConfig()
		if ec.GetEdsConfig() == nil {
			// Envoy: "cannot create an EDS cluster without an EDS config".
			return nil, fmt.Errorf("cluster %q: cannot create an EDS cluster without an EDS config", c.GetName())
		}
		cc.eds = true
		cc.edsName = ec.GetServiceName()
		if cc.edsName == "" {
			cc.edsName = c.GetName()
		}
		cc.fetchTimeout = fetchTimeout(ec.GetEdsConfig())
	case clusterv3.Cluster_STATIC, clusterv3.Cluster_STRICT_DNS, clusterv3.Cluster_LOGICAL_DNS:
		// DNS names are resolved by the dialer at connect time, which is what LOGICAL_DNS does.
		set, err := endpointsOf(c.GetLoadAssignment(), c.GetType() == clusterv3.Cluster_STATIC)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", c.GetName(), err)
		}
		cc.static = set
	case clusterv3.Cluster_ORIGINAL_DST:
		// Accepted like Envoy; without traffic interception xdsproxy has no original
		// destination, so the cluster has no hosts (503 UH).
		cc.static = &endpointSet{}
	default:
		return nil, fmt.Errorf("cluster %q: xdsproxy does not support cluster type %v", c.GetName(), c.GetClusterDiscoveryType())
	}
	return cc, nil
}

func translateCLA(cla *endpointv3.ClusterLoadAssignment, version string) (*claCfg, error) {
	if err := cla.ValidateAll(); err != nil {
		return nil, fmt.Errorf("cluster load assignment %q: %w", cla.GetClusterName(), err)
	}
	set, err := endpointsOf(cla, true)
	if err != nil {
		return nil, fmt.Errorf("cluster load assignment %q: %w", cla.GetClusterName(), err)
	}
	return &claCfg{name: cla.GetClusterName(), version: version, raw: cla, set: set, updated: time.Now()}, nil
}

// endpointsOf builds the host set by priority. mustBeIP mirrors Envoy, which rejects a
// non-IP address in EDS and STATIC clusters ("malformed IP address").
func endpointsOf(cla *endpointv3.ClusterLoadAssignment, mustBeIP bool) (*endpointSet, error) {
	set := &endpointSet{overprovisioning: defaultOverprovisioning}
	if cla == nil {
		return set, nil
	}
	if f := cla.GetPolicy().GetOverprovisioningFactor(); f != nil {
		set.overprovisioning = float64(f.GetValue()) / 100
	}
	byPrio := map[uint32]*priorityLevel{}
	for _, loc := range cla.GetEndpoints() {
		p := loc.GetPriority()
		l := byPrio[p]
		if l == nil {
			l = &priorityLevel{priority: p}
			byPrio[p] = l
		}
		for _, lb := range loc.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			if sa == nil {
				return nil, fmt.Errorf("endpoint without a socket address")
			}
			host := sa.GetAddress()
			if mustBeIP {
				if _, err := netip.ParseAddr(host); err != nil {
					return nil, fmt.Errorf("malformed IP address: %s", host)
				}
			}
			hp := net.JoinHostPort(host, strconv.Itoa(int(sa.GetPortValue())))
			l.all = append(l.all, hp)
			switch lb.GetHealthStatus() {
			case corev3.HealthStatus_UNKNOWN, corev3.HealthStatus_HEALTHY:
				l.healthy = append(l.healthy, hp)
			case corev3.HealthStatus_DEGRADED:
				l.degraded = append(l.degraded, hp)
			case corev3.HealthStatus_DRAINING:
				l.excluded++ // Envoy excludes EDS-draining hosts from load balancing
			}
		}
	}
	for _, l := range byPrio {
		set.levels = append(set.levels, *l)
	}
	slices.SortFunc(set.levels, func(a, b priorityLevel) int { return cmp.Compare(a.priority, b.priority) })
	return set, nil
}

func translateListener(l *listenerv3.Listener, version string) (*listenerCfg, error) {
	if err := l.ValidateAll(); err != nil {
		return nil, fmt.Errorf("listener %q: %w", l.GetName(), err)
	}
	sa := l.GetAddress().GetSocketAddress()
	if sa == nil {
		return nil, fmt.Errorf("listener %q: xdsproxy needs a socket address", l.GetName())
	}
	if _, err := netip.ParseAddr(sa.GetAddress()); err != nil {
		return nil, fmt.Errorf("listener %q: malformed IP address: %s", l.GetName(), sa.GetAddress())
	}
	lc := &listenerCfg{
		name: l.GetName(), version: version, raw: l,
		address: net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))),
		port:    strconv.Itoa(int(sa.GetPortValue())),
		bind:    l.GetBindToPort() == nil || l.GetBindToPort().GetValue(),
		updated: time.Now(),
	}
	chains := l.GetFilterChains()
	if l.GetDefaultFilterChain() != nil {
		chains = append(chains, l.GetDefaultFilterChain())
	}
	var hcm *hcmv3.HttpConnectionManager
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			tc := f.GetTypedConfig()
			if tc == nil {
				continue
			}
			m := &hcmv3.HttpConnectionManager{}
			if tc.MessageIs(m) {
				if err := tc.UnmarshalTo(m); err != nil {
					return nil, fmt.Errorf("listener %q: http connection manager: %w", l.GetName(), err)
				}
				hcm = m
				break
			}
		}
		if hcm != nil {
			break
		}
	}
	if hcm == nil {
		// A TCP proxy, a virtual listener (Istio's virtualOutbound), anything but HTTP: Envoy
		// takes it, so taking it is what a control plane expects (a NACK would count as a
		// rejection istiod never sees from Envoy); xdsproxy serves HTTP only.
		lc.unserved, lc.bind = "no HTTP connection manager (xdsproxy serves HTTP only)", false
		return lc, nil
	}
	if !lc.bind {
		// Istio's sidecar outbound listeners (0.0.0.0_PORT) bind no port: iptables sends the
		// app's connections to virtualOutbound, which hands them on by original destination.
		// xdsproxy has no iptables: it serves such a listener on loopback at its port, where
		// the app calls the sidecar (http://127.0.0.1:PORT). Listeners of one IP are reached
		// only through iptables: held, not served.
		ip, _ := netip.ParseAddr(sa.GetAddress())
		if !ip.IsUnspecified() {
			lc.unserved = "bind_to_port false on one address (Istio reaches it through iptables, which xdsproxy does not have)"
		} else {
			loop := "127.0.0.1"
			if ip.Is6() {
				loop = "::1"
			}
			lc.address, lc.bind, lc.captured = net.JoinHostPort(loop, lc.port), true, true
		}
	}
	if err := hcm.ValidateAll(); err != nil {
		return nil, fmt.Errorf("listener %q: http connection manager: %w", l.GetName(), err)
	}
	lc.statPrefix = hcm.GetStatPrefix()
	lc.stripAnyPort = hcm.GetStripAnyHostPort()
	lc.stripMatch = hcm.GetStripMatchingHostPort()
	switch {
	case hcm.GetRds() != nil:
		lc.rdsName = hcm.GetRds().GetRouteConfigName()
		lc.rdsTimeout = fetchTimeout(hcm.GetRds().GetConfigSource())
	case hcm.GetRouteConfig() != nil:
		t, err := compileRouteConfig(hcm.GetRouteConfig())
		if err != nil {
			return nil, fmt.Errorf("listener %q: %w", l.GetName(), err)
		}
		lc.inline = t
	default:
		return nil, fmt.Errorf("listener %q: http connection manager needs rds or route_config", l.GetName())
	}
	return lc, nil
}
