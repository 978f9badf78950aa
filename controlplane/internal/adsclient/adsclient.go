// Package adsclient is a minimal ADS client for tests and benchmarks: it opens a State of the
// World ADS stream (Dial) or a Delta one (DialDelta), subscribes to types, ACKs every response,
// and records what it received.
package adsclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Response is one received DiscoveryResponse, with its arrival time.
type Response struct {
	TypeURL   string
	Version   string
	Resources []*anypb.Any
	At        time.Time
	// Size is the response's encoded size in bytes.
	Size int
}

// Client is one ADS stream.
type Client struct {
	conn   *grpc.ClientConn
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *core.Node
	cancel context.CancelFunc

	mu       sync.Mutex
	latest   map[string]map[string]*anypb.Any // type → name → resource (SotW state)
	received []Response
	subs     map[string][]string
	notify   chan Response
	sendMu   sync.Mutex
	err      error
	done     chan struct{}

	// OnResponse, if set before Run, is called with every response as it arrives.
	OnResponse func(Response)
	// OnAcked, if set before Run with OnResponse, is called with every response once its ACK
	// has been sent, and the time it was.
	OnAcked func(Response, time.Time)
}

// Dial opens an ADS stream to addr as node id. The returned error is the stream's first error
// (e.g. codes.Unavailable while the control plane's sync gate is closed). opts are added to the
// gRPC dial options (e.g. a dialer into a network namespace).
func Dial(ctx context.Context, addr, id string, opts ...grpc.DialOption) (*Client, error) {
	conn, err := dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		cancel()
		conn.Close()
		return nil, err
	}
	c := &Client{conn: conn, stream: stream, node: &core.Node{Id: id, Cluster: "test"}, cancel: cancel,
		latest: map[string]map[string]*anypb.Any{}, notify: make(chan Response, 4096), done: make(chan struct{})}
	return c, nil
}

// DialSecure opens an ADS stream to a secure xDS port as a sidecar does: TLS verified against
// roots under serverName, and token (when set) as the bearer the control plane authenticates.
func DialSecure(addr, id string, roots *x509.CertPool, serverName, token string) (*Client, error) {
	ctx := context.Background()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return Dial(ctx, addr, id, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: serverName})))
}

// dial connects over plaintext, accepting responses up to 256 MiB (a full CDS at scale).
func dial(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256 << 20))}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}

// Subscribe asks for typeURL (names empty: wildcard). It must be called before Run... or after:
// requests are sent on the stream directly.
func (c *Client) Subscribe(typeURL string, names ...string) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.Send(&discovery.DiscoveryRequest{Node: c.node, TypeUrl: typeURL, ResourceNames: names})
}

// Run receives, records and ACKs responses until the stream ends; returns the stream error.
// If follow is set, after a CDS response it subscribes to EDS for every EDS cluster (as Envoy).
func (c *Client) Run() error {
	defer close(c.done)
	for {
		resp, err := c.stream.Recv()
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return err
		}
		r := Response{TypeURL: resp.GetTypeUrl(), Version: resp.GetVersionInfo(), Resources: resp.GetResources(), At: time.Now()}
		if c.OnResponse != nil {
			// Callback mode (benchmarks): no state kept, no decoding here.
			r.Size = proto.Size(resp)
			c.OnResponse(r)
			if err := c.ack(resp); err != nil {
				return err
			}
			if c.OnAcked != nil {
				c.OnAcked(r, time.Now())
			}
			continue
		}
		c.mu.Lock()
		m := map[string]*anypb.Any{}
		if old := c.latest[r.TypeURL]; old != nil && !fullState(r.TypeURL) {
			for k, v := range old {
				m[k] = v
			}
		}
		for _, a := range r.Resources {
			m[resourceName(a)] = a
		}
		c.latest[r.TypeURL] = m
		c.received = append(c.received, r)
		c.mu.Unlock()
		select {
		case c.notify <- r:
		default:
		}
		if err := c.ack(resp); err != nil {
			return err
		}
	}
}

func (c *Client) ack(resp *discovery.DiscoveryResponse) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.Send(&discovery.DiscoveryRequest{Node: c.node, TypeUrl: resp.GetTypeUrl(),
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: c.names(resp.GetTypeUrl())})
}

// names keeps the subscription for ACKs: the requested names are stored per type.
func (c *Client) names(typeURL string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[typeURL]
}

// SetNames records the names to keep subscribed to for typeURL (used in ACKs) and sends them.
func (c *Client) SetNames(typeURL string, names []string) error {
	c.mu.Lock()
	if c.subs == nil {
		c.subs = map[string][]string{}
	}
	c.subs[typeURL] = names
	c.mu.Unlock()
	return c.Subscribe(typeURL, names...)
}

func fullState(typeURL string) bool {
	return typeURL == "type.googleapis.com/envoy.config.cluster.v3.Cluster" ||
		typeURL == "type.googleapis.com/envoy.config.listener.v3.Listener"
}

// Notify delivers every response (dropped if nobody reads and 4096 are buffered).
func (c *Client) Notify() <-chan Response { return c.notify }

// Resources returns the client's current state of typeURL.
func (c *Client) Resources(typeURL string) map[string]*anypb.Any {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]*anypb.Any{}
	for k, v := range c.latest[typeURL] {
		out[k] = v
	}
	return out
}

// Received returns every response so far (none when OnResponse is set).
func (c *Client) Received() []Response {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Response(nil), c.received...)
}

// Close ends the stream.
func (c *Client) Close() {
	c.cancel()
	c.conn.Close()
	<-c.done
}

// CloseNoRun closes a client whose Run was never started.
func (c *Client) CloseNoRun() {
	c.cancel()
	c.conn.Close()
}
