// Package adsload runs many lightweight ADS clients in one process, like pilot-load's ADS
// clients, for control-plane capacity tests: each client has its own node id and connection,
// requests what Envoy requests (CDS, then EDS for its clusters, LDS, then RDS for its listeners),
// ACKs every response, and the package records resource counts, bytes, and per-push fan-out
// (when each client received each version) so the harness can compute bytes per connected proxy
// and push convergence times.
//
// The clients speak plaintext unless given credentials (package xdscred): then they reach a
// secure port as Istio's sidecars reach istiod's 15012, all with the same root and token.
package adsload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshchaos/meshchaos/internal/ads"
	"github.com/meshchaos/meshchaos/workloads/xdscred"
)

// Options configure a load.
type Options struct {
	// XDSAddress is the ADS server (host:port).
	XDSAddress string
	// Credentials reach a secure xDS port (TLS and a bearer token); the zero value is
	// plaintext. The token's namespace should be Namespace: a control plane may refuse a token
	// from another namespace than the node id's (the reference does).
	Credentials xdscred.Options
	// Clients is how many ADS clients to run.
	Clients int
	// NodeID builds client i's node id; default Istio-style "sidecar~10.x.y.z~adsload-i.<ns>~<ns>.svc.cluster.local".
	NodeID func(i int) string
	// First is the index of the first client (default 0): the clients are First …
	// First+Clients-1, so several processes (a fleet spread over pods) give the control plane
	// distinct proxies, exactly as one process with all the clients would.
	First int
	// Namespace goes into the default node ids and the node metadata (NAMESPACE).
	Namespace string
	// Ramp is the pause between starting two clients (0: all at once).
	Ramp time.Duration
	// BackoffMax bounds reconnect backoff (base 500ms, as Envoy).
	BackoffMax time.Duration
	// MaxPushes is how many recent pushes (versions) are kept for the report (default 200).
	MaxPushes int
	// Track selects clusters by a substring of their ClusterLoadAssignment's name; every client
	// records when it received each change of their usable (not UNHEALTHY) endpoint count
	// (Tracked), so a harness can measure convergence at the proxies from the endpoint change
	// in its API onwards.
	Track  string
	Logger *slog.Logger
}

var types = []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}

// Load is a running set of clients.
type Load struct {
	opts    Options
	log     *slog.Logger
	clients []*client
	started time.Time

	connected atomic.Int64
	// configured counts the clients whose open stream has received a response: connected and
	// served, what the harness waits for before it measures.
	configured atomic.Int64
	streams    atomic.Int64
	responses  [4]atomic.Int64
	bytes      [4]atomic.Int64
	acks       atomic.Int64
	nacks      atomic.Int64

	mu     sync.Mutex
	pushes map[string]*push
	order  []string
	fanout func(typeIdx int, d time.Duration) // metrics hook
}

// push is one version of one type as the clients received it.
type push struct {
	typeIdx     int
	version     string
	first, last time.Time
	clients     int
}

type client struct {
	id   int
	node *corev3.Node
	// Current counts per type, and endpoint count (from CLAs), updated by the client goroutine.
	resources [4]atomic.Int64
	endpoints atomic.Int64
	versions  [4]atomic.Pointer[string]
	connected atomic.Bool
	// configured: the open stream has received a response.
	configured atomic.Bool

	trackMu sync.Mutex
	tracked []Receipt // changes of the tracked clusters' endpoint count, oldest first
}

func typeIndex(t string) int { return slices.Index(types, t) }

// New validates opts.
func New(opts Options) (*Load, error) {
	if opts.XDSAddress == "" {
		return nil, errors.New("adsload: an xDS server address is required (--xds host:port)")
	}
	if opts.Clients <= 0 {
		return nil, errors.New("adsload: --clients must be at least 1")
	}
	if opts.First < 0 || opts.First+opts.Clients > 1<<24 {
		// The default node ids put the index in an IP's last three bytes.
		return nil, fmt.Errorf("adsload: clients %d to %d: want indexes from 0 to %d", opts.First, opts.First+opts.Clients-1, 1<<24-1)
	}
	if err := opts.Credentials.Validate(); err != nil {
		return nil, fmt.Errorf("adsload: %w", err)
	}
	if opts.Namespace == "" {
		opts.Namespace = "adsload"
	}
	if opts.NodeID == nil {
		ns := opts.Namespace
		opts.NodeID = func(i int) string {
			return fmt.Sprintf("sidecar~10.%d.%d.%d~adsload-%d.%s~%s.svc.cluster.local", 100+(i>>16)&0xff, (i>>8)&0xff, i&0xff, i, ns, ns)
		}
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = 30 * time.Second
	}
	if opts.MaxPushes <= 0 {
		opts.MaxPushes = 200
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	l := &Load{opts: opts, log: log, pushes: map[string]*push{}}
	// Istio-style metadata, shared by all clients (the control plane reads it per node).
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": opts.Namespace, "CLUSTER_ID": "Kubernetes", "LABELS": map[string]any{"app": "adsload"}})
	if err != nil {
		return nil, fmt.Errorf("adsload: node metadata: %w", err)
	}
	for i := opts.First; i < opts.First+opts.Clients; i++ {
		l.clients = append(l.clients, &client{id: i, node: &corev3.Node{
			Id:            opts.NodeID(i),
			Cluster:       fmt.Sprintf("adsload-%d.%s", i, opts.Namespace),
			Metadata:      md,
			UserAgentName: "adsload",
		}})
	}
	return l, nil
}

// Run starts every client and blocks until ctx ends.
func (l *Load) Run(ctx context.Context) error {
	l.started = time.Now()
	// One set of credentials for every client: the token and the roots are read again at each
	// stream and handshake anyway.
	creds, err := l.opts.Credentials.DialOptions()
	if err != nil {
		return fmt.Errorf("adsload: %w", err)
	}
	var wg sync.WaitGroup
	for _, c := range l.clients {
		conn, err := ads.Dial(l.opts.XDSAddress, creds...)
		if err != nil {
			return fmt.Errorf("adsload: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			l.runClient(ctx, c, conn)
		}()
		if l.opts.Ramp > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(l.opts.Ramp):
			}
		}
	}
	wg.Wait()
	return nil
}

func (l *Load) runClient(ctx context.Context, c *client, conn *grpc.ClientConn) {
	attempt := 0
	for ctx.Err() == nil {
		got, err := l.session(ctx, c, conn)
		if c.connected.Swap(false) {
			l.connected.Add(-1)
		}
		if c.configured.Swap(false) {
			l.configured.Add(-1)
		}
		if ctx.Err() != nil {
			return
		}
		if got {
			attempt = 0
		}
		ceil := min(500*time.Millisecond<<min(attempt, 20), l.opts.BackoffMax)
		attempt++
		d := time.Duration(rand.Int64N(int64(ceil))) + time.Millisecond
		l.log.Debug("adsload client reconnecting", "client", c.id, "err", err, "backoff", d)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// session runs one ADS stream for c, as Envoy requests resources: CDS, then EDS for its
// clusters and LDS, then RDS for the listeners' routes, each follow-up after the ACK.
func (l *Load) session(ctx context.Context, c *client, conn *grpc.ClientConn) (bool, error) {
	held := map[string]string{}
	for i, t := range types {
		if v := c.versions[i].Load(); v != nil {
			held[t] = *v
		}
	}
	s, err := ads.Open(ctx, conn, ads.Options{Node: c.node, Versions: held})
	if err != nil {
		return false, err
	}
	defer s.Close()
	l.streams.Add(1)
	if err := s.Subscribe(types[0]); err != nil {
		return false, err
	}
	if !c.connected.Swap(true) {
		l.connected.Add(1)
	}
	got := false
	err = s.Run(func(resp *discoveryv3.DiscoveryResponse) error {
		got = true
		if !c.configured.Swap(true) {
			l.configured.Add(1)
		}
		now := time.Now()
		i := typeIndex(resp.GetTypeUrl())
		if i < 0 {
			return ads.NoReply
		}
		l.responses[i].Add(1)
		l.bytes[i].Add(int64(proto.Size(resp)))
		want, count, eps, tracked, derr := decode(i, resp, l.opts.Track)
		if derr != nil {
			l.nacks.Add(1)
			return ads.Reject(derr)
		}
		v := resp.GetVersionInfo()
		c.versions[i].Store(&v)
		// SotW responses carry the whole set of the type (EDS/RDS: all subscribed names).
		c.resources[i].Store(int64(count))
		if i == 1 {
			c.endpoints.Store(int64(eps))
			// An EDS response may leave assignments out (they stay as they were, as in Envoy).
			if l.opts.Track != "" && tracked >= 0 {
				c.track(now, tracked)
			}
		}
		l.record(i, v, now)
		l.acks.Add(1)
		if want != nil {
			if err := s.Subscribe(types[i+1], want...); err != nil { // CDS → EDS, LDS → RDS
				return err
			}
		}
		if i == 0 {
			return s.Subscribe(types[2])
		}
		return nil
	})
	return got, err
}

// track records a receipt of the tracked clusters when their usable endpoint count changed (the first
// receipt always counts: it is the state the client starts from).
func (c *client) track(at time.Time, endpoints int) {
	c.trackMu.Lock()
	defer c.trackMu.Unlock()
	if n := len(c.tracked); n > 0 && c.tracked[n-1].Endpoints == endpoints {
		return
	}
	c.tracked = append(c.tracked, Receipt{At: at, Endpoints: endpoints})
}

// decode counts resources and returns the names the next type should subscribe to, and the
// endpoints of the assignments whose names contain track (-1 when the response has none).
func decode(i int, resp *discoveryv3.DiscoveryResponse, track string) (follow []string, count, endpoints, tracked int, err error) {
	count, tracked = len(resp.GetResources()), -1
	switch types[i] {
	case resourcev3.ClusterType:
		follow = []string{}
		for _, a := range resp.GetResources() {
			var c clusterv3.Cluster
			if err := a.UnmarshalTo(&c); err != nil {
				return nil, 0, 0, 0, fmt.Errorf("decode cluster: %w", err)
			}
			if c.GetType() == clusterv3.Cluster_EDS {
				n := c.GetEdsClusterConfig().GetServiceName()
				if n == "" {
					n = c.GetName()
				}
				follow = append(follow, n)
			}
		}
		sort.Strings(follow)
	case resourcev3.ListenerType:
		set := map[string]bool{}
		for _, a := range resp.GetResources() {
			var l listenerv3.Listener
			if err := a.UnmarshalTo(&l); err != nil {
				return nil, 0, 0, 0, fmt.Errorf("decode listener: %w", err)
			}
			for _, fc := range append(l.GetFilterChains(), l.GetDefaultFilterChain()) {
				for _, f := range fc.GetFilters() {
					var h hcmv3.HttpConnectionManager
					if f.GetTypedConfig().MessageIs(&h) && f.GetTypedConfig().UnmarshalTo(&h) == nil && h.GetRds() != nil {
						set[h.GetRds().GetRouteConfigName()] = true
					}
				}
			}
		}
		follow = []string{}
		for n := range set {
			follow = append(follow, n)
		}
		sort.Strings(follow)
	case resourcev3.EndpointType:
		for _, a := range resp.GetResources() {
			var cla endpointv3.ClusterLoadAssignment
			if err := a.UnmarshalTo(&cla); err != nil {
				return nil, 0, 0, 0, fmt.Errorf("decode assignment: %w", err)
			}
			isTracked := track != "" && strings.Contains(cla.GetClusterName(), track)
			if isTracked {
				tracked = max(tracked, 0)
			}
			for _, le := range cla.GetEndpoints() {
				endpoints += len(le.GetLbEndpoints())
				if isTracked {
					tracked += usable(le.GetLbEndpoints())
				}
			}
		}
	}
	return follow, count, endpoints, tracked, nil
}

func (l *Load) record(i int, version string, at time.Time) {
	key := types[i] + "|" + version
	l.mu.Lock()
	p := l.pushes[key]
	if p == nil {
		p = &push{typeIdx: i, version: version, first: at}
		l.pushes[key] = p
		l.order = append(l.order, key)
		if len(l.order) > l.opts.MaxPushes {
			delete(l.pushes, l.order[0])
			l.order = l.order[1:]
		}
	}
	p.last = at
	p.clients++
	d := at.Sub(p.first)
	fan := l.fanout
	l.mu.Unlock()
	if fan != nil {
		fan(i, d)
	}
}

// Push is one pushed version of one type as the clients saw it. ConvergenceMs is the spread
// between the first and the last client receiving it (push fan-out time).
type Push struct {
	Type          string    `json:"type"`
	Version       string    `json:"version"`
	Clients       int       `json:"clients"`
	FirstAt       time.Time `json:"firstAt"`
	LastAt        time.Time `json:"lastAt"`
	ConvergenceMs float64   `json:"convergenceMs"`
}

// Stats are the totals the harness reads.
type Stats struct {
	Clients   int   `json:"clients"`
	Connected int64 `json:"connected"`
	// Configured counts the clients whose open stream has received a response.
	Configured int64 `json:"configured"`
	Streams    int64 `json:"streams"`
	// First is the index of the first client (Options.First).
	First     int              `json:"first"`
	ACKs      int64            `json:"acks"`
	NACKs     int64            `json:"nacks"`
	Responses map[string]int64 `json:"responses"`
	Bytes     map[string]int64 `json:"bytes"`
	// Resources sums each client's current resource count per type; Endpoints sums endpoints.
	Resources map[string]int64 `json:"resources"`
	Endpoints int64            `json:"endpoints"`
	// ClientsAtVersion counts clients per current version, per type (convergence check).
	ClientsAtVersion map[string]map[string]int `json:"clientsAtVersion"`
	Pushes           []Push                    `json:"pushes"`
	// RSSBytes is the process's resident memory, on /stats only (0 where the platform does
	// not tell): what the fleet costs the node it runs on.
	RSSBytes int64 `json:"rssBytes,omitempty"`
}

var shortType = map[string]string{
	resourcev3.ClusterType: "cds", resourcev3.EndpointType: "eds", resourcev3.ListenerType: "lds", resourcev3.RouteType: "rds",
}

// Stats returns the current totals.
func (l *Load) Stats() Stats {
	s := Stats{
		Clients: len(l.clients), First: l.opts.First, Connected: l.connected.Load(), Configured: l.configured.Load(), Streams: l.streams.Load(),
		ACKs: l.acks.Load(), NACKs: l.nacks.Load(),
		Responses: map[string]int64{}, Bytes: map[string]int64{}, Resources: map[string]int64{},
		ClientsAtVersion: map[string]map[string]int{},
	}
	for i, t := range types {
		st := shortType[t]
		s.Responses[st] = l.responses[i].Load()
		s.Bytes[st] = l.bytes[i].Load()
		s.ClientsAtVersion[st] = map[string]int{}
	}
	for _, c := range l.clients {
		for i, t := range types {
			s.Resources[shortType[t]] += c.resources[i].Load()
			if v := c.versions[i].Load(); v != nil {
				s.ClientsAtVersion[shortType[t]][*v]++
			}
		}
		s.Endpoints += c.endpoints.Load()
	}
	l.mu.Lock()
	for _, k := range l.order {
		p := l.pushes[k]
		s.Pushes = append(s.Pushes, Push{
			Type: shortType[types[p.typeIdx]], Version: p.version, Clients: p.clients,
			FirstAt: p.first, LastAt: p.last, ConvergenceMs: float64(p.last.Sub(p.first).Microseconds()) / 1000,
		})
	}
	l.mu.Unlock()
	return s
}

// usable counts the endpoints Envoy balances over (health UNKNOWN, HEALTHY or DEGRADED): a
// control plane may send the endpoints of not-ready pods marked UNHEALTHY (istiod does), and
// their going unhealthy is the change a proxy must receive.
func usable(eps []*endpointv3.LbEndpoint) int {
	n := 0
	for _, e := range eps {
		switch e.GetHealthStatus() {
		case corev3.HealthStatus_UNKNOWN, corev3.HealthStatus_HEALTHY, corev3.HealthStatus_DEGRADED:
			n++
		}
	}
	return n
}

// Receipt is one change of the tracked clusters' endpoint count as one client received it.
type Receipt struct {
	At        time.Time `json:"at"`
	Endpoints int       `json:"endpoints"`
}

// Tracked is what every client received of the tracked clusters: Clients[i] are the receipts
// of the i-th client (client First+i), oldest first.
type Tracked struct {
	Track   string      `json:"track"`
	Clients [][]Receipt `json:"clients"`
}

// Tracked returns every client's receipts of the tracked clusters (none without Options.Track).
func (l *Load) Tracked() Tracked {
	t := Tracked{Track: l.opts.Track, Clients: make([][]Receipt, len(l.clients))}
	for i, c := range l.clients {
		c.trackMu.Lock()
		t.Clients[i] = append([]Receipt{}, c.tracked...)
		c.trackMu.Unlock()
	}
	return t
}
