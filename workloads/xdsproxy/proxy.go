// Package xdsproxy is a Go HTTP/1.1 sidecar and gateway configured over xDS with Envoy's
// semantics in everything meshchaos experiments observe: ADS (state of the world or delta) with
// ACK/NACK; reconnect with Envoy's jittered backoff, a new connection per attempt, keeping the
// last configuration meanwhile; HTTP/2 keepalive on the xDS connection so a frozen control plane
// is noticed; deletion of clusters and listeners a SotW response omits; a removed listener
// drains (new connections refused, open ones served until the drain time); cluster and listener
// warming; Envoy's local replies with their response flags (in respflags.Header); and Envoy's
// admin /ready, /config_dump and /stats. The local substrate runs it where real Envoy cannot be
// installed.
//
// Where it knowingly differs from Envoy (none of it changes what the experiments count):
//   - HTTP/1.1 only (downstream and upstream); a listener is served through its HTTP
//     connection manager, one per listener (first filter chain that has one;
//     filter_chain_match is ignored). HTTP filters other than the router are ignored. A
//     listener without one (tcp_proxy, Istio's virtualOutbound) is accepted, as Envoy accepts
//     it, and held but not served.
//   - No iptables: a listener on 0.0.0.0 with bind_to_port false (Istio's sidecar outbound
//     listeners, which iptables and virtualOutbound reach) is served on loopback at its port,
//     where the app calls its sidecar; one on a single address with bind_to_port false is held.
//   - Malformed requests get Go's 400 without the response-flag header (Envoy: 400 with DPE).
//   - Load balancing is round robin over the healthy hosts of the most preferred priority that
//     has any, with Envoy's panic threshold (healthy_panic_threshold, default 50 %: below it, all
//     hosts of that priority) and total panic; load does not spill over to lower priorities, and
//     weights, localities and lb_policy are ignored. No circuit breakers, outlier detection or
//     active health checks; ORIGINAL_DST clusters have no hosts (503 UH).
//   - Retries: retry_on connect-failure, reset, 5xx, gateway-error, retriable-status-codes with
//     num_retries and per_try_timeout, Envoy's default back-off between them (fully jittered,
//     25 ms base, 250 ms at most; retry_back_off is not read); a local reply after the last
//     retry failed carries URX beside its flag ("UF,URX"). Route timeouts are honoured (504 UT).
//   - An updated cluster whose assignment is already known warms at once (Envoy's EDS cache).
//   - An upstream keep-alive connection closed while idle is noticed when it is next taken from
//     the pool (Envoy: at once); a close racing with a request fails it with 503 UC, as in Envoy.
//   - /config_dump shows the last rejection per type on a pseudo-entry's error_state.
//   - A removed listener closes its idle keep-alive connections at once. An updated listener's
//     open connections continue on the new configuration (Envoy drains them on the old one).
//   - The xDS connection is grpc-go's, configured like Istio's agent (which Envoy reaches through
//     a local socket): keepalive 30s/10s (grpc-go raises a time below 10s to 10s), and an attempt
//     waits up to grpc-go's 20s for the server's HTTP/2 handshake.
//   - Plaintext (istiod's port 15010) unless Options.Credentials name a root certificate; then,
//     as pilot-agent on port 15012, TLS against that root only, under Credentials.ServerName,
//     with the projected ServiceAccount token as a bearer token (package xdscred). Both files
//     are read again for every attempt, so rotations are picked up at the next reconnect. No
//     client certificate (pilot-agent may present its workload certificate instead of a token
//     once it has one).
package xdsproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshchaos/meshchaos/workloads/xdscred"
)

// Options configure a proxy.
type Options struct {
	// XDSAddress is the ADS server, host:port.
	XDSAddress string
	// Credentials reach a secure xDS port (TLS and a bearer token); the zero value is plaintext.
	Credentials xdscred.Options
	// NodeID is the node id sent to the server; Istio-style ids
	// ("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local") are passed through unchanged.
	NodeID string
	// Cluster is the node's cluster (Envoy --service-cluster).
	Cluster string
	// Metadata is the node metadata (JSON-like values).
	Metadata map[string]any
	// Delta selects the incremental (delta) ADS protocol; the default is state of the world.
	Delta bool
	// AdminAddress is where /ready, /config_dump and /stats listen; "" disables admin.
	AdminAddress string
	// InitialFetchTimeout bounds the wait for the first CDS and LDS response before
	// initialization continues without them. 0 waits forever (Istio's bootstrap sets 0s).
	InitialFetchTimeout time.Duration
	// BackoffBase and BackoffMax bound the reconnect backoff (Envoy: 500ms and 30s).
	BackoffBase, BackoffMax time.Duration
	// KeepaliveTime and KeepaliveTimeout are the HTTP/2 keepalive of the xDS connection: after
	// KeepaliveTime without a byte from the server the proxy pings, and drops the connection
	// when no answer comes within KeepaliveTimeout (then reconnects). Defaults 30s and 10s, as
	// Istio's agent dials istiod. grpc-go raises a KeepaliveTime below 10s to 10s.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// DrainTime is how long a removed listener's open connections may finish their requests
	// before they are closed (Envoy's --drain-time-s; Istio passes its drainDuration, 45s).
	DrainTime time.Duration
	// ListenerIP, when set, replaces the IP of every listener address (the port stays): bind
	// 0.0.0.0 listeners of a control plane to loopback in tests, or to one pod IP.
	ListenerIP string
	// Logger receives xDS and lifecycle events; nil discards them.
	Logger *slog.Logger
}

// Proxy is a running xdsproxy.
type Proxy struct {
	opts  Options
	log   *slog.Logger
	stats *stats
	state *state
	snap  atomic.Pointer[snapshot]

	fwd *forwarder

	mu      sync.Mutex
	admin   net.Listener
	servers []*http.Server
	cancel  context.CancelFunc
	done    chan struct{}
}

// New validates opts and builds a proxy; Start runs it.
func New(opts Options) (*Proxy, error) {
	if opts.XDSAddress == "" {
		return nil, errors.New("xdsproxy: an xDS server address is required (--xds host:port)")
	}
	if opts.NodeID == "" {
		return nil, errors.New("xdsproxy: a node id is required (--node-id)")
	}
	if err := opts.Credentials.Validate(); err != nil {
		return nil, fmt.Errorf("xdsproxy: %w", err)
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = 500 * time.Millisecond
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = 30 * time.Second
	}
	if opts.KeepaliveTime <= 0 {
		opts.KeepaliveTime = 30 * time.Second
	}
	if opts.KeepaliveTimeout <= 0 {
		opts.KeepaliveTimeout = 10 * time.Second
	}
	if opts.DrainTime <= 0 {
		opts.DrainTime = 45 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p := &Proxy{opts: opts, log: log, stats: newStats(), done: make(chan struct{})}
	p.state = newState(p.stats)
	p.state.log = log
	if opts.ListenerIP != "" {
		if net.ParseIP(opts.ListenerIP) == nil {
			return nil, fmt.Errorf("xdsproxy: listener IP %q is not an IP address", opts.ListenerIP)
		}
		p.state.listenerIP = opts.ListenerIP
	}
	p.state.publish = func(s *snapshot) { p.snap.Store(s) }
	p.state.bindFunc = p.bind
	p.state.serve = p.serveListener
	p.snap.Store(&snapshot{listeners: map[string]*liveListener{}, clusters: map[string]*upstream{}})
	p.fwd = newForwarder(p.stats)
	return p, nil
}

// Start binds the admin listener and starts the ADS client. It returns once both run.
func (p *Proxy) Start(ctx context.Context) error {
	md, err := structpb.NewStruct(p.opts.Metadata)
	if err != nil {
		return fmt.Errorf("xdsproxy: node metadata: %w", err)
	}
	// Only the target and the credentials' files are checked here; every stream attempt dials
	// its own connection.
	conn, err := p.dialXDS()
	if err != nil {
		return fmt.Errorf("xdsproxy: xDS server %s: %w", p.opts.XDSAddress, err)
	}
	conn.Close()
	if p.opts.AdminAddress != "" {
		ln, err := net.Listen("tcp", p.opts.AdminAddress)
		if err != nil {
			return fmt.Errorf("xdsproxy: admin listener %s: %w", p.opts.AdminAddress, err)
		}
		p.admin = ln
		srv := &http.Server{Handler: p.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
		p.track(srv)
		go srv.Serve(ln)
	}
	if p.opts.InitialFetchTimeout > 0 {
		time.AfterFunc(p.opts.InitialFetchTimeout, func() { p.state.markTimedOut(resourcev3.ClusterType) })
	}
	cctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	c := &xdsClient{
		p: p, versions: map[string]string{},
		node: &corev3.Node{Id: p.opts.NodeID, Cluster: p.opts.Cluster, Metadata: md, UserAgentName: "xdsproxy"},
	}
	go func() {
		defer close(p.done)
		c.run(cctx)
	}()
	return nil
}

// Run starts the proxy and serves until ctx ends.
func (p *Proxy) Run(ctx context.Context) error {
	if err := p.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	p.Close()
	return nil
}

// AdminAddr is the admin listener's address ("" when admin is off).
func (p *Proxy) AdminAddr() string {
	if p.admin == nil {
		return ""
	}
	return p.admin.Addr().String()
}

// Ready reports whether initialization finished (what /ready answers).
func (p *Proxy) Ready() bool { return p.state.isReady() }

// Close stops the ADS client and closes every listener.
func (p *Proxy) Close() {
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
	p.state.close()
	p.mu.Lock()
	servers := p.servers
	p.servers = nil
	p.mu.Unlock()
	for _, s := range servers {
		s.Close()
	}
	p.fwd.close()
}

// dialXDS makes the gRPC client for one stream attempt. A client per attempt (Istio sets
// max_requests_per_connection 1 on its xds-grpc cluster) makes the stream-level backoff the
// only retry loop: a long-lived client would redial on grpc-go's own backoff (1s ×1.6 ±20%),
// which overrides Envoy's jitter and brings a fleet of proxies back nearly in step. The client
// never retries itself: a failed connection fails the attempt. The credentials are built
// again for each client, so a rotated root certificate is trusted from the next attempt on.
func (p *Proxy) dialXDS() (*grpc.ClientConn, error) {
	creds, err := p.opts.Credentials.DialOptions()
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(p.opts.XDSAddress, append(creds,
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: p.opts.KeepaliveTime, Timeout: p.opts.KeepaliveTimeout}),
		// Envoy sets no limit on a response's size; gRPC's default of 4 MiB is one CDS
		// response of a few thousand services.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)),
	)...)
}

func (p *Proxy) track(s *http.Server) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.servers = append(p.servers, s)
}

func (p *Proxy) untrack(s *http.Server) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.servers {
		if x == s {
			p.servers = append(p.servers[:i], p.servers[i+1:]...)
			return
		}
	}
}

// bind opens a listener's socket when the listener is added (a bind error rejects it, as in
// Envoy); serveListener starts accepting once it is warm.
func (p *Proxy) bind(l *listenerCfg) (*boundListener, error) {
	ln, err := net.Listen("tcp", l.address)
	if err != nil {
		return nil, err
	}
	b := &boundListener{name: l.name, ln: ln}
	srv := &http.Server{
		Handler:           p.listenerHandler(b),
		ReadHeaderTimeout: 60 * time.Second,
		IdleTimeout:       time.Hour, // Envoy's default downstream idle timeout
		ErrorLog:          slogErrorLog(p.log),
		ConnState: func(c net.Conn, st http.ConnState) {
			p.stats.downstreamConn(c, st)
			b.open.Add(connDelta(st))
		},
	}
	b.closeFn = func() {
		// Envoy's drain of a removed listener with Istio's --drain-strategy immediate: the socket
		// closes at once (new connections are refused) and idle connections close; requests in
		// flight or arriving on open connections are served, answered with Connection: close;
		// after the drain time whatever is left is closed. (http.Server.Shutdown would drop a
		// request that arrives on an open connection.)
		srv.SetKeepAlivesEnabled(false)
		ln.Close()
		go func() {
			deadline := time.Now().Add(p.opts.DrainTime)
			for b.open.Load() > 0 && time.Now().Before(deadline) {
				time.Sleep(drainPoll)
			}
			srv.Close()
			p.untrack(srv)
		}()
	}
	b.srv = srv
	p.track(srv)
	return b, nil
}

// drainPoll is how often a draining listener checks whether its last connection closed.
const drainPoll = 20 * time.Millisecond

func (p *Proxy) serveListener(b *boundListener) {
	b.once.Do(func() { go b.srv.Serve(b.ln) })
}

// knownVersions is what delta sends as initial_resource_versions on a new stream.
func (p *Proxy) knownVersions(typeURL string) map[string]string {
	s := p.state
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	switch typeURL {
	case resourcev3.ClusterType:
		for n, slot := range s.clusters {
			if slot.active != nil {
				out[n] = slot.active.version
			}
		}
	case resourcev3.EndpointType:
		for n, c := range s.clas {
			out[n] = c.version
		}
	case resourcev3.ListenerType:
		for n, slot := range s.listeners {
			if slot.active != nil {
				out[n] = slot.active.version
			}
		}
	case resourcev3.RouteType:
		for n, r := range s.routes {
			out[n] = r.version
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
