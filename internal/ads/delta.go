package ads

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// DeltaStream is one Delta (incremental) ADS stream. Its requests add up (a subscribe or an
// unsubscribe list is never replaced by a later request), so none is dropped from the queue.
type DeltaStream struct {
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	cancel context.CancelFunc
	out    *sender[*discoveryv3.DeltaDiscoveryRequest]
	node   *corev3.Node

	// Replied, if set before Run, is called with every response Run has replied to, and when
	// the reply was sent (Options.Inline) or queued.
	Replied func(resp *discoveryv3.DeltaDiscoveryResponse, at time.Time)

	mu       sync.Mutex
	subs     map[string]map[string]bool // type → names subscribed (empty: wildcard)
	nodeSent bool
}

// OpenDelta opens a Delta stream on conn; it ends with ctx or Close. Options.Versions is not
// used: a delta client says what it holds resource by resource.
func OpenDelta(ctx context.Context, conn grpc.ClientConnInterface, o Options) (*DeltaStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(sctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open delta ADS stream: %w", err)
	}
	s := &DeltaStream{stream: st, cancel: cancel, node: o.Node, subs: map[string]map[string]bool{}}
	s.out = newSender(sctx, o, st.Send, cancel)
	return s, nil
}

// Close ends the stream.
func (s *DeltaStream) Close() { s.cancel() }

// Subscribe adds names of typeURL to its subscription (none, as the type's first request: the
// wildcard).
func (s *DeltaStream) Subscribe(typeURL string, names ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.subs[typeURL]
	if set == nil {
		set = map[string]bool{}
		s.subs[typeURL] = set
	}
	for _, n := range names {
		set[n] = true
	}
	return s.put(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: slices.Clone(names)})
}

// Unsubscribe removes names of typeURL from its subscription.
func (s *DeltaStream) Unsubscribe(typeURL string, names ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		delete(s.subs[typeURL], n)
	}
	return s.put(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesUnsubscribe: slices.Clone(names)})
}

// Subscription is the names subscribed to of typeURL, sorted (none: the wildcard, or nothing),
// and whether the type was subscribed to.
func (s *DeltaStream) Subscription(typeURL string) ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set, ok := s.subs[typeURL]
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, ok
}

// put sends req, with the node if it is the stream's first; s.mu is held.
func (s *DeltaStream) put(req *discoveryv3.DeltaDiscoveryRequest) error {
	if !s.nodeSent {
		req.Node, s.nodeSent = s.node, true
	}
	return s.out.put("", req)
}

// Recv receives the next response.
func (s *DeltaStream) Recv() (*discoveryv3.DeltaDiscoveryResponse, error) {
	resp, err := s.stream.Recv()
	if err != nil {
		return nil, recvErr(s.out, err)
	}
	return resp, nil
}

// ACK accepts resp.
func (s *DeltaStream) ACK(resp *discoveryv3.DeltaDiscoveryResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()})
}

// NACK rejects resp for cause.
func (s *DeltaStream) NACK(resp *discoveryv3.DeltaDiscoveryResponse, cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(), ErrorDetail: errorDetail(cause)})
}

// Send sends req as it is, outside the stream's bookkeeping.
func (s *DeltaStream) Send(req *discoveryv3.DeltaDiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodeSent = s.nodeSent || req.GetNode() != nil
	return s.out.put("", req)
}

// Run receives responses until the stream ends, and returns why; handle's verdicts are as for
// Stream.Run.
func (s *DeltaStream) Run(handle func(*discoveryv3.DeltaDiscoveryResponse) error) error {
	return run(s.Recv, handle, s.ACK, s.NACK, func() error { return nil }, s.Replied)
}
