package adsclient

import (
	"context"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/meshchaos/meshchaos/internal/ads"
)

// DeltaResponse is one received DeltaDiscoveryResponse, with its arrival time and encoded size.
type DeltaResponse struct {
	TypeURL   string
	Resources []*discovery.Resource
	Removed   []string
	At        time.Time
	Size      int
}

// DeltaClient is one Delta (incremental) ADS stream in callback mode: it keeps no state, hands
// every response to OnResponse, ACKs it, then calls OnAcked. For benchmarks.
type DeltaClient struct {
	conn *grpc.ClientConn
	s    *ads.DeltaStream
	done chan struct{}

	// OnResponse and OnAcked, if set before Run, see every response: on arrival, and once its
	// ACK has been sent (with the time it was).
	OnResponse func(DeltaResponse)
	OnAcked    func(DeltaResponse, time.Time)
}

// DialDelta opens a Delta ADS stream to addr as node id.
func DialDelta(ctx context.Context, addr, id string) (*DeltaClient, error) {
	conn, s, err := open(ctx, addr, id, ads.OpenDelta)
	if err != nil {
		return nil, err
	}
	return &DeltaClient{conn: conn, s: s, done: make(chan struct{})}, nil
}

// Subscribe adds names of typeURL to the subscription (none: wildcard).
func (c *DeltaClient) Subscribe(typeURL string, names ...string) error {
	return c.s.Subscribe(typeURL, names...)
}

// Run receives and ACKs responses until the stream ends; returns the stream error.
func (c *DeltaClient) Run() error {
	defer close(c.done)
	var last DeltaResponse
	c.s.Replied = func(_ *discovery.DeltaDiscoveryResponse, at time.Time) {
		if c.OnAcked != nil {
			c.OnAcked(last, at)
		}
	}
	return c.s.Run(func(resp *discovery.DeltaDiscoveryResponse) error {
		last = DeltaResponse{TypeURL: resp.GetTypeUrl(), Resources: resp.GetResources(), Removed: resp.GetRemovedResources(),
			At: time.Now(), Size: proto.Size(resp)}
		if c.OnResponse != nil {
			c.OnResponse(last)
		}
		return nil
	})
}

// Close ends the stream and waits for Run to return.
func (c *DeltaClient) Close() {
	c.s.Close()
	c.conn.Close()
	<-c.done
}
