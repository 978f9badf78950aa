// Package adsclient is a minimal ADS client for tests and benchmarks: it opens a State of the
// World ADS stream (Dial) or a Delta one (DialDelta), subscribes to types, ACKs every response,
// and records what it received.
package adsclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshchaos/meshchaos/internal/ads"
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

// Client is one ADS stream (internal/ads's, its requests sent inline so OnAcked's time is the
// ACK's send) and what it received.
type Client struct {
	conn *grpc.ClientConn
	s    *ads.Stream

	mu       sync.Mutex
	latest   map[string]map[string]*anypb.Any // type → name → resource (SotW state)
	received []Response
	notify   chan Response
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
	conn, s, err := open(ctx, addr, id, ads.Open, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, s: s, latest: map[string]map[string]*anypb.Any{}, notify: make(chan Response, 4096),
		done: make(chan struct{})}, nil
}

// open dials addr and opens a stream of either kind on it as node id, its requests sent inline.
func open[S any](ctx context.Context, addr, id string, openStream func(context.Context, grpc.ClientConnInterface, ads.Options) (S, error),
	opts ...grpc.DialOption) (*grpc.ClientConn, S, error) {
	var zero S
	conn, err := ads.Dial(addr, opts...)
	if err != nil {
		return nil, zero, err
	}
	s, err := openStream(ctx, conn, ads.Options{Node: &core.Node{Id: id, Cluster: "test"}, Inline: true})
	if err != nil {
		conn.Close()
		return nil, zero, err
	}
	return conn, s, nil
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

// Subscribe asks for typeURL (names empty: wildcard), and keeps the names for its ACKs. It may be
// called before Run or after.
func (c *Client) Subscribe(typeURL string, names ...string) error {
	return c.s.Subscribe(typeURL, names...)
}

// SetNames is Subscribe with the names as a slice.
func (c *Client) SetNames(typeURL string, names []string) error {
	return c.s.Subscribe(typeURL, names...)
}

// Run receives, records and ACKs responses until the stream ends; returns the stream error.
func (c *Client) Run() error {
	defer close(c.done)
	if c.OnResponse != nil {
		// Callback mode (benchmarks): no state kept, no decoding here.
		var last Response
		c.s.Replied = func(_ *discovery.DiscoveryResponse, at time.Time) {
			if c.OnAcked != nil {
				c.OnAcked(last, at)
			}
		}
		return c.s.Run(func(resp *discovery.DiscoveryResponse) error {
			last = response(resp)
			last.Size = proto.Size(resp)
			c.OnResponse(last)
			return nil
		})
	}
	return c.s.Run(func(resp *discovery.DiscoveryResponse) error {
		r := response(resp)
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
		return nil
	})
}

func response(resp *discovery.DiscoveryResponse) Response {
	return Response{TypeURL: resp.GetTypeUrl(), Version: resp.GetVersionInfo(), Resources: resp.GetResources(), At: time.Now()}
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
	c.CloseNoRun()
	<-c.done
}

// CloseNoRun closes a client whose Run was never started.
func (c *Client) CloseNoRun() {
	c.s.Close()
	c.conn.Close()
}
