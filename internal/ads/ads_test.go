package ads_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/meshchaos/meshchaos/internal/ads"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

const wait = 10 * time.Second

func node(id string) *corev3.Node { return &corev3.Node{Id: id, Cluster: "ads-test"} }

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, _ := dialRecording(t, addr)
	return conn
}

// dialRecording dials addr and records every message the client sends, as it sends it (the
// server's record is of what it made of a request: go-control-plane fills in the node).
func dialRecording(t *testing.T, addr string) (*grpc.ClientConn, func() []proto.Message) {
	t.Helper()
	var mu sync.Mutex
	var sent []proto.Message
	conn, err := ads.Dial(addr, grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
		method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		return recorder{cs, func(m any) {
			mu.Lock()
			sent = append(sent, proto.Clone(m.(proto.Message)))
			mu.Unlock()
		}}, err
	}))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn, func() []proto.Message {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sent)
	}
}

type recorder struct {
	grpc.ClientStream
	record func(any)
}

func (r recorder) SendMsg(m any) error {
	r.record(m)
	return r.ClientStream.SendMsg(m)
}

// responses runs s and hands every response over; Run's end goes to the returned error channel.
func responses[R any](t *testing.T, run func(func(R) error) error, verdict func(R) error) (<-chan R, <-chan error) {
	t.Helper()
	got, ended := make(chan R, 100), make(chan error, 1)
	go func() {
		ended <- run(func(r R) error {
			got <- r
			return verdict(r)
		})
	}()
	return got, ended
}

func next[R any](t *testing.T, ch <-chan R) R {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(wait):
		t.Fatal("no response")
	}
	var zero R
	return zero
}

// request waits for the server to have read a request that match accepts (from all, its record
// of one kind), and returns it.
func request[R any](t *testing.T, all func() []R, match func(R) bool) R {
	t.Helper()
	var found R
	require.Eventually(t, func() bool {
		for _, r := range all() {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	}, wait, 5*time.Millisecond)
	return found
}

func sotwRequest(t *testing.T, srv *xdstest.Server, match func(*discoveryv3.DiscoveryRequest) bool) *discoveryv3.DiscoveryRequest {
	t.Helper()
	return request(t, srv.Requests, match)
}

func acks(typeURL, nonce string) func(*discoveryv3.DiscoveryRequest) bool {
	return func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetTypeUrl() == typeURL && r.GetResponseNonce() == nonce
	}
}

// Every response is ACKed with its own version and nonce, and the subscription's names; the
// node goes on the first request only.
func TestACKCarriesVersionNonceAndNames(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			srv := xdstest.Start(t)
			srv.Set(t, "1", xdstest.CLA("a", "10.0.0.1:80"), xdstest.CLA("b", "10.0.0.2:80"))
			conn, sent := dialRecording(t, srv.Addr)
			s, err := ads.Open(t.Context(), conn, ads.Options{Node: node("n1"), Inline: inline})
			require.NoError(t, err)
			defer s.Close()
			require.NoError(t, s.Subscribe(resourcev3.EndpointType, "a"))
			got, _ := responses(t, s.Run, func(*discoveryv3.DiscoveryResponse) error { return nil })

			r1 := next(t, got)
			assert.Equal(t, "1", r1.GetVersionInfo())
			assert.Len(t, r1.GetResources(), 1, "only the name subscribed to")
			ack := sotwRequest(t, srv, acks(resourcev3.EndpointType, r1.GetNonce()))
			assert.Equal(t, "1", ack.GetVersionInfo())
			assert.Equal(t, []string{"a"}, ack.GetResourceNames())
			assert.Nil(t, ack.GetErrorDetail())

			srv.Set(t, "2", xdstest.CLA("a", "10.0.0.3:80"))
			r2 := next(t, got)
			ack = sotwRequest(t, srv, acks(resourcev3.EndpointType, r2.GetNonce()))
			assert.Equal(t, "2", ack.GetVersionInfo())
			assert.Equal(t, "2", s.Version(resourcev3.EndpointType))

			reqs := sent()
			require.GreaterOrEqual(t, len(reqs), 3)
			assert.Equal(t, "n1", reqs[0].(*discoveryv3.DiscoveryRequest).GetNode().GetId(), "the first request carries the node")
			for _, r := range reqs[1:] {
				assert.Nil(t, r.(*discoveryv3.DiscoveryRequest).GetNode(), "later requests do not")
			}
		})
	}
}

// A rejected response is NACKed with its nonce, the version still held and the reason; the next
// accepted one is ACKed as usual.
func TestNACKKeepsTheAcceptedVersion(t *testing.T) {
	srv := xdstest.Start(t)
	srv.Set(t, "1", xdstest.EDSCluster("a", ""))
	s, err := ads.Open(t.Context(), dial(t, srv.Addr), ads.Options{Node: node("n1")})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Subscribe(resourcev3.ClusterType))
	bad := errors.New("cluster b is not acceptable")
	got, _ := responses(t, s.Run, func(r *discoveryv3.DiscoveryResponse) error {
		if r.GetVersionInfo() == "2" {
			return ads.Reject(bad)
		}
		return nil
	})
	next(t, got)
	srv.Set(t, "2", xdstest.EDSCluster("a", ""), xdstest.EDSCluster("b", ""))
	r2 := next(t, got)
	nack := sotwRequest(t, srv, acks(resourcev3.ClusterType, r2.GetNonce()))
	assert.Equal(t, "1", nack.GetVersionInfo(), "a NACK names the version still held")
	assert.Equal(t, bad.Error(), nack.GetErrorDetail().GetMessage())
	assert.Equal(t, "1", s.Version(resourcev3.ClusterType))

	srv.Set(t, "3", xdstest.EDSCluster("a", ""))
	r3 := next(t, got)
	for r3.GetVersionInfo() != "3" { // the server may send version 2 again first
		r3 = next(t, got)
	}
	ack := sotwRequest(t, srv, acks(resourcev3.ClusterType, r3.GetNonce()))
	assert.Equal(t, "3", ack.GetVersionInfo())
	assert.Nil(t, ack.GetErrorDetail())
}

// A subscription changed in the handler goes out after the response's ACK, with its type's
// version and nonce; the same subscription again sends nothing; a new stream resumes from the
// versions held.
func TestResubscriptionFollowsTheACK(t *testing.T) {
	srv := xdstest.Start(t)
	srv.Set(t, "1", xdstest.EDSCluster("a", ""), xdstest.CLA("a", "10.0.0.1:80"), xdstest.CLA("b", "10.0.0.2:80"))
	s, err := ads.Open(t.Context(), dial(t, srv.Addr), ads.Options{Node: node("n1")})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Subscribe(resourcev3.ClusterType))
	got, _ := responses(t, s.Run, func(r *discoveryv3.DiscoveryResponse) error {
		if r.GetTypeUrl() == resourcev3.ClusterType {
			var names []string
			for _, a := range r.GetResources() {
				var c clusterv3.Cluster
				if err := a.UnmarshalTo(&c); err != nil {
					return err
				}
				names = append(names, c.GetName())
			}
			return s.Subscribe(resourcev3.EndpointType, names...)
		}
		return nil
	})
	cds := next(t, got)
	eds := next(t, got)
	require.Equal(t, resourcev3.EndpointType, eds.GetTypeUrl())
	assert.Len(t, eds.GetResources(), 1)
	reqs := srv.Requests()
	require.GreaterOrEqual(t, len(reqs), 3, "subscribe, ACK, follow-up (and the EDS ACK, if read yet)")
	assert.Equal(t, cds.GetNonce(), reqs[1].GetResponseNonce(), "the ACK goes first")
	assert.Equal(t, []string{"a"}, reqs[2].GetResourceNames())
	edsACK := sotwRequest(t, srv, acks(resourcev3.EndpointType, eds.GetNonce()))
	assert.Equal(t, []string{"a"}, edsACK.GetResourceNames())

	// Another name: the request carries the version and nonce held of EDS.
	before := len(srv.Requests())
	require.NoError(t, s.Subscribe(resourcev3.EndpointType, "a"), "unchanged: nothing sent")
	require.NoError(t, s.Subscribe(resourcev3.EndpointType, "a", "b"))
	eds2 := next(t, got)
	assert.Len(t, eds2.GetResources(), 2)
	reqs = srv.Requests()
	sub := reqs[before]
	assert.Equal(t, []string{"a", "b"}, sub.GetResourceNames(), "the first request after the unchanged one is the new subscription")
	assert.Equal(t, "1", sub.GetVersionInfo())
	assert.Equal(t, eds.GetNonce(), sub.GetResponseNonce())
	names, ok := s.Subscription(resourcev3.EndpointType)
	assert.True(t, ok)
	assert.Equal(t, []string{"a", "b"}, names)

	// A new stream that resumes: its subscription starts from the version held.
	s2, err := ads.Open(t.Context(), dial(t, srv.Addr), ads.Options{Node: node("n2"),
		Versions: map[string]string{resourcev3.ClusterType: s.Version(resourcev3.ClusterType)}})
	require.NoError(t, err)
	defer s2.Close()
	require.NoError(t, s2.Subscribe(resourcev3.ClusterType))
	first := sotwRequest(t, srv, func(r *discoveryv3.DiscoveryRequest) bool { return r.GetNode().GetId() == "n2" })
	assert.Equal(t, "1", first.GetVersionInfo())
	assert.Empty(t, first.GetResponseNonce())
}

// Run ends with the stream: when the server goes, when the client closes it, and with the
// handler's own error.
func TestRunEndsWithTheStream(t *testing.T) {
	srv := xdstest.Start(t)
	srv.Set(t, "1", xdstest.EDSCluster("a", ""))
	conn := dial(t, srv.Addr)
	open := func() (*ads.Stream, <-chan *discoveryv3.DiscoveryResponse, <-chan error) {
		s, err := ads.Open(t.Context(), conn, ads.Options{Node: node("n1")})
		require.NoError(t, err)
		require.NoError(t, s.Subscribe(resourcev3.ClusterType))
		got, ended := responses(t, s.Run, func(*discoveryv3.DiscoveryResponse) error { return nil })
		next(t, got)
		return s, got, ended
	}

	s, _, ended := open()
	s.Close()
	assert.ErrorContains(t, next(t, ended), "Canceled")

	boom := errors.New("boom")
	s, err := ads.Open(t.Context(), conn, ads.Options{Node: node("n1")})
	require.NoError(t, err)
	require.NoError(t, s.Subscribe(resourcev3.ClusterType))
	_, ended = responses(t, s.Run, func(*discoveryv3.DiscoveryResponse) error { return boom })
	assert.ErrorIs(t, next(t, ended), boom)
	s.Close()

	_, _, ended = open()
	srv.Stop()
	assert.Error(t, next(t, ended))

	// A stream on a connection to nothing fails at its first receive.
	s, err = ads.Open(t.Context(), conn, ads.Options{Node: node("n1")})
	if err == nil {
		defer s.Close()
		_, err = s.Recv()
	}
	assert.Error(t, err)
}

func deltaRequest(t *testing.T, srv *xdstest.Server, match func(*discoveryv3.DeltaDiscoveryRequest) bool) *discoveryv3.DeltaDiscoveryRequest {
	t.Helper()
	return request(t, srv.DeltaRequests, match)
}

func names(rs []*discoveryv3.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GetName())
	}
	return out
}

// Delta: subscribe adds names, unsubscribe removes them, a resource gone from the server comes
// as a removal, every response is ACKed with its nonce and a rejected one NACKed.
func TestDeltaSubscribeUnsubscribeAndRemoval(t *testing.T) {
	srv := xdstest.Start(t)
	srv.Set(t, "1", xdstest.CLA("a", "10.0.0.1:80"), xdstest.CLA("b", "10.0.0.2:80"), xdstest.CLA("c", "10.0.0.3:80"))
	conn, sent := dialRecording(t, srv.Addr)
	s, err := ads.OpenDelta(t.Context(), conn, ads.Options{Node: node("d1")})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Subscribe(resourcev3.EndpointType, "a"))
	bad := errors.New("no")
	got, _ := responses(t, s.Run, func(r *discoveryv3.DeltaDiscoveryResponse) error {
		if len(r.GetResources()) > 0 && r.GetResources()[0].GetName() == "c" {
			return ads.Reject(bad)
		}
		return nil
	})

	r1 := next(t, got)
	assert.Equal(t, []string{"a"}, names(r1.GetResources()))
	ack := deltaRequest(t, srv, func(r *discoveryv3.DeltaDiscoveryRequest) bool { return r.GetResponseNonce() == r1.GetNonce() })
	assert.Nil(t, ack.GetErrorDetail())
	assert.Equal(t, "d1", srv.DeltaRequests()[0].GetNode().GetId())

	require.NoError(t, s.Subscribe(resourcev3.EndpointType, "b"))
	r2 := next(t, got)
	assert.Equal(t, []string{"b"}, names(r2.GetResources()), "only what was added")

	require.NoError(t, s.Unsubscribe(resourcev3.EndpointType, "a"))
	sub, ok := s.Subscription(resourcev3.EndpointType)
	assert.True(t, ok)
	assert.Equal(t, []string{"b"}, sub)
	deltaRequest(t, srv, func(r *discoveryv3.DeltaDiscoveryRequest) bool {
		return len(r.GetResourceNamesUnsubscribe()) == 1 && r.GetResourceNamesUnsubscribe()[0] == "a"
	})

	// b goes from the server: a removal. a changes, unsubscribed: nothing of it.
	srv.Set(t, "2", xdstest.CLA("a", "10.0.0.9:80"), xdstest.CLA("c", "10.0.0.3:80"))
	r3 := next(t, got)
	assert.Empty(t, r3.GetResources())
	assert.Equal(t, []string{"b"}, r3.GetRemovedResources())

	require.NoError(t, s.Subscribe(resourcev3.EndpointType, "c"))
	r4 := next(t, got)
	assert.Equal(t, []string{"c"}, names(r4.GetResources()))
	nack := deltaRequest(t, srv, func(r *discoveryv3.DeltaDiscoveryRequest) bool { return r.GetResponseNonce() == r4.GetNonce() })
	assert.Equal(t, bad.Error(), nack.GetErrorDetail().GetMessage())
	reqs := sent()
	assert.Equal(t, "d1", reqs[0].(*discoveryv3.DeltaDiscoveryRequest).GetNode().GetId())
	for _, r := range reqs[1:] {
		assert.Nil(t, r.(*discoveryv3.DeltaDiscoveryRequest).GetNode(), "the node goes on the first request only")
	}
}

// Send and Recv reach the stream as they are, for clients that misbehave on purpose: a NACK of a
// nonce sent twice arrives twice.
func TestSendAndRecvAreRaw(t *testing.T) {
	srv := xdstest.Start(t)
	srv.Set(t, "1", xdstest.EDSCluster("a", ""))
	s, err := ads.Open(context.Background(), dial(t, srv.Addr), ads.Options{Node: node("raw"), Inline: true})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Send(&discoveryv3.DiscoveryRequest{Node: node("raw"), TypeUrl: resourcev3.ClusterType}))
	resp, err := s.Recv()
	require.NoError(t, err)
	nack := &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: resp.GetNonce()}
	require.NoError(t, s.Send(nack))
	require.NoError(t, s.Send(nack))
	require.Eventually(t, func() bool {
		n := 0
		for _, r := range srv.Requests() {
			if r.GetResponseNonce() == resp.GetNonce() {
				n++
			}
		}
		return n == 2
	}, wait, 5*time.Millisecond)
	assert.Equal(t, "raw", srv.Requests()[0].GetNode().GetId())
}
