// Package grpcclient is grpc-go as a data plane: proxyless gRPC clients that resolve
// xds:///HOST:PORT with grpc-go's own xDS resolver and balancers (not ours), bootstrapped as
// istiod's proxyless mode expects (node id sidecar~IP~POD.NS~NS.svc.cluster.local, metadata
// GENERATOR=grpc, as pilot-agent's grpcxds bootstrap writes it), and make health RPCs to the
// targets at a fixed rate. Each client is one xDS client (its own ADS stream and reconnect
// backoff, as each proxyless pod of a fleet has) with one channel per target.
//
// What it counts, served as JSON on /stats: per second, the RPCs that succeeded and the failed
// ones by status code; per channel, the spans without a usable config (from the first failed
// RPC after a successful one to the next success). /ready answers 200 once every channel has
// made a successful RPC: the control plane configured every client.
package grpcclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds" // the xds:/// resolver and the xDS balancers
	xdsbootstrap "google.golang.org/grpc/xds/bootstrap"

	"github.com/meshchaos/meshchaos/workloads/xdscred"
)

// Options configure the clients.
type Options struct {
	// XDSAddress is the control plane's ADS address (HOST:PORT).
	XDSAddress string
	// Credentials reach a secure xDS port as pilot-agent does (root certificate, token);
	// the zero value is plaintext.
	Credentials xdscred.Options
	// NodeID is the node id's form; "%d" in it, if any, is replaced by the client's index.
	// Default: sidecar~127.0.0.1~grpc-client-%d.default~default.svc.cluster.local.
	NodeID string
	// Metadata is the node metadata; GENERATOR is set to "grpc" (istiod's proxyless generator).
	Metadata map[string]any
	// Targets are the HOST:PORT every client dials as xds:///HOST:PORT.
	Targets []string
	// Clients is how many xDS clients (default 1).
	Clients int
	// Rate is the RPCs per second of the whole pod, spread over its channels.
	Rate float64
	// Timeout bounds each RPC (default 1 s).
	Timeout time.Duration
	// Keep is how many seconds of counts are kept (default 3600).
	Keep   int
	Logger *slog.Logger
	// now is the clock (tests).
	now func() time.Time
}

// Second is one second's RPCs, by the second they were made in.
type Second struct {
	// Unix is the second (Unix time).
	Unix int64 `json:"unix"`
	OK   int64 `json:"ok"`
	// Failed counts the failed RPCs by status code name (Unavailable, DeadlineExceeded, …).
	Failed map[string]int64 `json:"failed,omitempty"`
}

// Span is a time one channel had no usable config: from the first failed RPC after a
// successful one to the next success (End zero: still failing).
type Span struct {
	Channel string    `json:"channel"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end,omitzero"`
}

// Stats is what /stats serves.
type Stats struct {
	Clients  int `json:"clients"`
	Channels int `json:"channels"`
	// Ready is how many channels have made a successful RPC.
	Ready   int      `json:"ready"`
	Seconds []Second `json:"seconds"`
	// NoConfig are the spans without a usable config, by start.
	NoConfig []Span `json:"noConfig"`
	// Now is when the stats were taken: an open span lasts until then.
	Now time.Time `json:"now"`
}

// channel is one xds:/// channel's state.
type channel struct {
	name     string
	conn     *grpc.ClientConn
	everOK   bool
	failedAt time.Time // start of the span without config; zero while RPCs succeed
	logged   bool      // a failure before the first success was logged
}

// Clients are the running clients.
type Clients struct {
	o        Options
	mu       sync.Mutex
	chans    []*channel
	seconds  map[int64]*Second
	spans    []Span
	closers  []func()
	interval time.Duration
}

// channelCredsName is the bootstrap's channel_creds type for xdscred's credentials.
const channelCredsName = "meshchaos-xdscred"

// BootstrapNode is the node of a client's bootstrap, as pilot-agent's grpcxds writes it.
type BootstrapNode struct {
	ID       string         `json:"id"`
	Metadata map[string]any `json:"metadata"`
}

// Bootstrap is client i's xDS bootstrap JSON (gRFC A27): the control plane, how to reach it
// (insecure, or xdscred's TLS and token under channelCredsName) and the node.
func (o Options) Bootstrap(i int) ([]byte, error) {
	creds := []map[string]any{{"type": "insecure"}}
	if o.Credentials.Secure() {
		creds = []map[string]any{{"type": channelCredsName, "config": credsConfig{
			RootCertFile: o.Credentials.RootCertFile, TokenFile: o.Credentials.TokenFile, ServerName: o.Credentials.ServerName}}}
	}
	md := map[string]any{}
	for k, v := range o.Metadata {
		md[k] = v
	}
	md["GENERATOR"] = "grpc" // istiod's proxyless generator (pilot/pkg/xds: node metadata GENERATOR)
	id := o.NodeID
	if id == "" {
		id = "sidecar~127.0.0.1~grpc-client-%d.default~default.svc.cluster.local"
	}
	if strings.Contains(id, "%d") {
		id = strings.ReplaceAll(id, "%d", strconv.Itoa(i))
	}
	return json.Marshal(map[string]any{
		"xds_servers": []map[string]any{{"server_uri": o.XDSAddress, "channel_creds": creds, "server_features": []string{"xds_v3"}}},
		"node":        BootstrapNode{ID: id, Metadata: md},
	})
}

// credsConfig is the config of channelCredsName in a bootstrap.
type credsConfig struct {
	RootCertFile string `json:"root_cert_file"`
	TokenFile    string `json:"token_file,omitempty"`
	ServerName   string `json:"server_name,omitempty"`
}

// xdscredBuilder gives grpc-go's xDS client xdscred's credentials, the ones our sidecars use
// against istiod's secure port: grpc-go's own "tls" type has no bearer token.
type xdscredBuilder struct{}

func (xdscredBuilder) Name() string { return channelCredsName }

func (xdscredBuilder) Build(config json.RawMessage) (credentials.Bundle, func(), error) {
	var c credsConfig
	if err := json.Unmarshal(config, &c); err != nil {
		return nil, nil, fmt.Errorf("%s config: %w", channelCredsName, err)
	}
	o := xdscred.Options{RootCertFile: c.RootCertFile, TokenFile: c.TokenFile, ServerName: c.ServerName}
	tc, err := o.TransportCredentials()
	if err != nil {
		return nil, nil, err
	}
	b := bundle{tc: tc}
	if o.HasToken() {
		b.rpc = o.PerRPC()
	}
	return b, func() {}, nil
}

// bundle is a credentials.Bundle of fixed parts.
type bundle struct {
	tc  credentials.TransportCredentials
	rpc credentials.PerRPCCredentials
}

func (b bundle) TransportCredentials() credentials.TransportCredentials { return b.tc }
func (b bundle) PerRPCCredentials() credentials.PerRPCCredentials       { return b.rpc }
func (b bundle) NewWithMode(string) (credentials.Bundle, error) {
	return nil, errors.New("modes are not supported")
}

func init() { xdsbootstrap.RegisterChannelCredentials(xdscredBuilder{}) }

// New checks the options and dials every channel (dialling does not connect: the first RPC
// does).
func New(o Options) (*Clients, error) {
	if o.XDSAddress == "" {
		return nil, errors.New("grpc clients: no xDS address")
	}
	if len(o.Targets) == 0 {
		return nil, errors.New("grpc clients: no target")
	}
	for _, t := range o.Targets {
		if _, _, err := net.SplitHostPort(t); err != nil {
			return nil, fmt.Errorf("grpc clients: target %q: want HOST:PORT", t)
		}
	}
	if err := o.Credentials.Validate(); err != nil {
		return nil, err
	}
	if o.Clients == 0 {
		o.Clients = 1
	}
	if o.Rate <= 0 {
		return nil, fmt.Errorf("grpc clients: rate %g: want more than 0", o.Rate)
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if o.Keep == 0 {
		o.Keep = 3600
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.now == nil {
		o.now = time.Now
	}
	c := &Clients{o: o, seconds: map[int64]*Second{}}
	for i := range o.Clients {
		b, err := o.Bootstrap(i)
		if err != nil {
			c.Close()
			return nil, err
		}
		// One resolver per client: its own xDS client, ADS stream and backoff, as each
		// proxyless pod has with its own GRPC_XDS_BOOTSTRAP (grpc-go names this constructor
		// for tests; it is the only one that takes the bootstrap from memory).
		res, err := xds.NewXDSResolverWithConfigForTesting(b)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("grpc client %d: bootstrap: %w", i, err)
		}
		for _, t := range o.Targets {
			conn, err := grpc.NewClient("xds:///"+t, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithResolvers(res))
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("grpc client %d: dial xds:///%s: %w", i, t, err)
			}
			c.chans = append(c.chans, &channel{name: fmt.Sprintf("%d/%s", i, t), conn: conn})
		}
	}
	c.interval = time.Duration(float64(time.Second) * float64(len(c.chans)) / o.Rate)
	return c, nil
}

// Close closes every channel.
func (c *Clients) Close() {
	for _, ch := range c.chans {
		ch.conn.Close()
	}
}

// Run makes RPCs on every channel until ctx ends, each channel every len(channels)/Rate
// seconds, the channels' starts spread over one interval.
func (c *Clients) Run(ctx context.Context) error {
	defer c.Close()
	var wg sync.WaitGroup
	for i, ch := range c.chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offset := c.interval * time.Duration(i) / time.Duration(len(c.chans))
			c.loop(ctx, ch, offset)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

func (c *Clients) loop(ctx context.Context, ch *channel, offset time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(offset):
	}
	client := healthpb.NewHealthClient(ch.conn)
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		at := c.o.now()
		rctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
		// Fail fast, as an application's RPC: a channel without a usable config fails it.
		_, err := client.Check(rctx, &healthpb.HealthCheckRequest{})
		cancel()
		if ctx.Err() != nil {
			return
		}
		c.record(ch, at, err, c.o.now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// record counts one RPC made at at that ended at end with err.
func (c *Clients) record(ch *channel, at time.Time, err error, end time.Time) {
	code := status.Code(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	sec := at.Unix()
	s := c.seconds[sec]
	if s == nil {
		s = &Second{Unix: sec}
		c.seconds[sec] = s
		delete(c.seconds, sec-int64(c.o.Keep))
	}
	if code == codes.OK {
		s.OK++
		if !ch.failedAt.IsZero() {
			c.spans = append(c.spans, Span{Channel: ch.name, Start: ch.failedAt, End: end})
			c.o.Logger.Info("grpc channel served again", "channel", ch.name, "without config", end.Sub(ch.failedAt).String())
			ch.failedAt = time.Time{}
		}
		ch.everOK = true
		return
	}
	if s.Failed == nil {
		s.Failed = map[string]int64{}
	}
	s.Failed[code.String()]++
	switch {
	case ch.everOK && ch.failedAt.IsZero():
		ch.failedAt = at
		c.o.Logger.Info("grpc channel failing", "channel", ch.name, "error", err)
	case !ch.everOK && !ch.logged:
		// Once: why a channel is not served yet (the pod is not ready until every one is).
		ch.logged = true
		c.o.Logger.Info("grpc channel not served yet", "channel", ch.name, "error", err)
	}
}

// Stats returns the counts so far.
func (c *Clients) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Clients: c.o.Clients, Channels: len(c.chans), Seconds: make([]Second, 0, len(c.seconds)), NoConfig: append([]Span{}, c.spans...), Now: c.o.now()}
	for _, ch := range c.chans {
		if ch.everOK {
			st.Ready++
		}
		if !ch.failedAt.IsZero() {
			st.NoConfig = append(st.NoConfig, Span{Channel: ch.name, Start: ch.failedAt})
		}
	}
	for _, s := range c.seconds {
		cp := *s
		if s.Failed != nil {
			cp.Failed = map[string]int64{}
			for k, v := range s.Failed {
				cp.Failed[k] = v
			}
		}
		st.Seconds = append(st.Seconds, cp)
	}
	sort.Slice(st.Seconds, func(i, j int) bool { return st.Seconds[i].Unix < st.Seconds[j].Unix })
	sort.Slice(st.NoConfig, func(i, j int) bool { return st.NoConfig[i].Start.Before(st.NoConfig[j].Start) })
	return st
}

// Handler serves /stats (JSON Stats) and /ready (200 once every channel made a successful RPC).
func (c *Clients) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c.Stats())
	})
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		st := c.Stats()
		if st.Ready < st.Channels {
			http.Error(w, fmt.Sprintf("%d of %d channels have made a successful RPC", st.Ready, st.Channels), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}
