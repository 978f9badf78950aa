package xdstest

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// Pusher is an ADS server shaped like istiod's connection loop, for the one thing that shape
// tests: a client that sends from its receive loop. Each stream's requests are read by a
// goroutine into a one-request buffer, and one loop sends a run of large CDS pushes back to
// back, each with more EDS clusters than the last (so every push changes the client's EDS
// subscription), reading the buffered request between pushes as istiod does. A client that
// blocks on its own send while the server is writing a push never receives the rest.
type Pusher struct {
	// Addr is the server's loopback address.
	Addr string
	// Pushes is how many CDS responses each stream is sent.
	Pushes int
	// Clusters is the clusters in the first push; each later push has Step more.
	Clusters, Step int
	// NamePad lengthens every cluster name, which makes the responses and the EDS subscriptions
	// large without making many clusters.
	NamePad int

	requests atomic.Int64
}

// StartPusher serves on loopback until the test ends.
func StartPusher(t testing.TB, pushes, clusters, step, namePad int) *Pusher {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("xdstest: listen: %v", err)
	}
	p := &Pusher{Addr: ln.Addr().String(), Pushes: pushes, Clusters: clusters, Step: step, NamePad: namePad}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(1 << 30))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, p)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return p
}

// ClusterName is the name of cluster i of a Pusher's pushes.
func (p *Pusher) ClusterName(i int) string {
	return fmt.Sprintf("outbound|80||svc-%d.%s.mesh.test", i, strings.Repeat("p", p.NamePad))
}

// Requests is how many requests the server has read, on all streams.
func (p *Pusher) Requests() int64 { return p.requests.Load() }

// StreamAggregatedResources implements the ADS service.
func (p *Pusher) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	reqs := make(chan *discoveryv3.DiscoveryRequest, 1)
	go func() {
		defer close(reqs)
		for {
			req, err := stream.Recv()
			if err != nil {
				return
			}
			p.requests.Add(1)
			select {
			case reqs <- req:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	// The first request opens the stream, as istiod waits for the node before it pushes.
	select {
	case <-reqs:
	case <-stream.Context().Done():
		return nil
	}
	for i := range p.Pushes {
		select {
		case _, ok := <-reqs:
			if !ok {
				return nil
			}
		default:
		}
		resp := &discoveryv3.DiscoveryResponse{TypeUrl: resourcev3.ClusterType, VersionInfo: fmt.Sprint(i + 1), Nonce: fmt.Sprint(i + 1)}
		for c := range p.Clusters + i*p.Step {
			name := p.ClusterName(c)
			a, err := anypb.New(EDSCluster(name, name))
			if err != nil {
				return err
			}
			resp.Resources = append(resp.Resources, a)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
	// Keep reading, as a server does, until the client goes.
	for range reqs {
	}
	return nil
}

// DeltaAggregatedResources is not served.
func (p *Pusher) DeltaAggregatedResources(discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return fmt.Errorf("xdstest: the pusher serves State of the World only")
}
