package adsclient

import (
	"context"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
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
	conn   *grpc.ClientConn
	stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node   *core.Node
	cancel context.CancelFunc
	sendMu sync.Mutex
	done   chan struct{}

	// OnResponse and OnAcked, if set before Run, see every response: on arrival, and once its
	// ACK has been sent (with the time it was).
	OnResponse func(DeltaResponse)
	OnAcked    func(DeltaResponse, time.Time)
}

// DialDelta opens a Delta ADS stream to addr as node id.
func DialDelta(ctx context.Context, addr, id string) (*DeltaClient, error) {
	conn, err := dial(addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(sctx)
	if err != nil {
		cancel()
		conn.Close()
		return nil, err
	}
	return &DeltaClient{conn: conn, stream: stream, node: &core.Node{Id: id, Cluster: "test"}, cancel: cancel,
		done: make(chan struct{})}, nil
}

// Subscribe adds names of typeURL to the subscription (none: wildcard).
func (c *DeltaClient) Subscribe(typeURL string, names ...string) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.Send(&discovery.DeltaDiscoveryRequest{Node: c.node, TypeUrl: typeURL, ResourceNamesSubscribe: names})
}

// Run receives and ACKs responses until the stream ends; returns the stream error.
func (c *DeltaClient) Run() error {
	defer close(c.done)
	for {
		resp, err := c.stream.Recv()
		if err != nil {
			return err
		}
		r := DeltaResponse{TypeURL: resp.GetTypeUrl(), Resources: resp.GetResources(), Removed: resp.GetRemovedResources(),
			At: time.Now(), Size: proto.Size(resp)}
		if c.OnResponse != nil {
			c.OnResponse(r)
		}
		c.sendMu.Lock()
		err = c.stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()})
		c.sendMu.Unlock()
		if err != nil {
			return err
		}
		if c.OnAcked != nil {
			c.OnAcked(r, time.Now())
		}
	}
}

// Close ends the stream and waits for Run to return.
func (c *DeltaClient) Close() {
	c.cancel()
	c.conn.Close()
	<-c.done
}
