package xds

import (
	"context"
	"fmt"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// slowConsumer opens an ADS stream over a connection of its own with 64 KiB flow-control
// windows, subscribes to every cluster and endpoint, and never reads.
func slowConsumer(t *testing.T, addr string, i int) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	node := &core.Node{Id: fmt.Sprintf("sidecar~10.9.0.%d~slow-%d.ns~ns.svc.cluster.local", i, i)}
	require.NoError(t, stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}))
	require.NoError(t, stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType}))
}

// TestSlowConsumersLoseTheirConnections: a proxy that reads nothing has its stream given up on
// (by the send timeout, or by the stalled-send budget when others stall longer), and its
// connection ends with it. Ending only the stream would leave gRPC holding the responses queued
// on it, behind the proxy's closed flow-control window, for as long as the proxy stays
// connected: with enough slow consumers, any amount of memory. A proxy that reads keeps
// getting its pushes throughout.
func TestSlowConsumersLoseTheirConnections(t *testing.T) {
	r := newRigLimited(t, Limits{SendTimeout: 2 * time.Second, MaxStalledSends: 2}, 10*time.Millisecond, time.Second)
	// 1500 clusters: CDS and EDS responses of a few hundred KB, far over a 64 KiB window.
	for i := range 1500 {
		r.apply(t, fmt.Sprintf("svc-%d", i), "10.0.0.1")
	}
	r.start(t)
	good := r.client(t, "sidecar~10.1.0.1~good.ns~ns.svc.cluster.local")
	eventually(t, "the good proxy's CDS", func() bool { return len(good.Resources(resourcev3.ClusterType)) == 1500 })
	require.Equal(t, 1, r.server.conns.open())

	limited := func(reason string) float64 { return testutil.ToFloat64(r.met.XDSLimited.WithLabelValues(reason)) }
	for i := range 4 {
		slowConsumer(t, r.addr, i)
	}
	// Four stall, two may: the two stalled longest are closed at once, the other two by the
	// send timeout. Every one of them loses its connection; the good proxy keeps its own.
	eventually(t, "the slow consumers' connections closed", func() bool {
		return limited("stalled") >= 2 && limited("send-timeout") >= 2 && r.server.conns.open() == 1
	})
	r.apply(t, "svc-new", "10.0.0.2")
	eventually(t, "the good proxy still served", func() bool { return len(good.Resources(resourcev3.ClusterType)) == 1501 })
	assert.Equal(t, 1, r.server.conns.open(), "only the good proxy's connection is left")
}

// TestSubscriptionNamesBounded: a subscription naming far more resources than the control
// plane has ever served (SotW or Delta, the Delta one built up over requests) is refused before
// any watch is made; one naming every cluster served, and a few it does not know, is served.
func TestSubscriptionNamesBounded(t *testing.T) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	for i := range 10 {
		r.apply(t, fmt.Sprintf("svc-%d", i), "10.0.0.1")
	}
	r.start(t)
	eventually(t, "the initial push", func() bool { return r.caches.MostServed() == 10 })
	most := 2*10 + DefaultLimits.NameSlack
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("outbound|80||svc-%d.test", i)
		}
		return out
	}
	limited := func() float64 { return testutil.ToFloat64(r.met.XDSLimited.WithLabelValues("names")) }
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	node := &core.Node{Id: "sidecar~10.9.0.1~p.ns~ns.svc.cluster.local"}

	sotw := func(n int) error {
		s, err := ads.StreamAggregatedResources(context.Background())
		require.NoError(t, err)
		defer s.CloseSend()
		require.NoError(t, s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: names(n)}))
		_, err = s.Recv()
		return err
	}
	require.NoError(t, sotw(most), "every cluster served and the slack: served")
	require.Zero(t, limited())
	assert.Equal(t, codes.ResourceExhausted, status.Code(sotw(most+1)))
	assert.Equal(t, 1.0, limited())

	// Delta: each request adds names; the one that takes the subscription over the bound ends it.
	d, err := ads.DeltaAggregatedResources(context.Background())
	require.NoError(t, err)
	require.NoError(t, d.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: names(10)}))
	_, err = d.Recv()
	require.NoError(t, err)
	more := make([]string, most)
	for i := range more {
		more[i] = fmt.Sprintf("nowhere-%d", i)
	}
	require.NoError(t, d.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: more}))
	_, err = d.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Equal(t, 2.0, limited())
}

// TestUnansweredResponsesEndTheConnection: a proxy that never reads, sent responses small
// enough that no send blocks (they fit gRPC's write quota), is caught by answering none of them
// (no ACK, no NACK) within the send timeout: its connection ends, and what was queued for it is
// freed. A proxy that answers keeps its connection.
func TestUnansweredResponsesEndTheConnection(t *testing.T) {
	r := newRigLimited(t, Limits{SendTimeout: time.Second}, 10*time.Millisecond, time.Second)
	r.apply(t, "svc", "10.0.0.1")
	r.start(t)
	good := r.client(t, "sidecar~10.1.0.1~good.ns~ns.svc.cluster.local")
	eventually(t, "the good proxy's CDS", func() bool { return len(good.Resources(resourcev3.ClusterType)) == 1 })
	for i := range 3 {
		slowConsumer(t, r.addr, i)
	}
	eventually(t, "the slow consumers connected", func() bool { return r.server.conns.open() == 4 })
	limited := func(reason string) float64 { return testutil.ToFloat64(r.met.XDSLimited.WithLabelValues(reason)) }
	eventually(t, "the slow consumers' connections closed", func() bool {
		return limited("unanswered") == 3 && r.server.conns.open() == 1
	})
	assert.Zero(t, limited("send-timeout"), "no send blocked: the responses fit the write quota")
	assert.Zero(t, limited("stalled"))
	r.apply(t, "svc2", "10.0.0.2")
	eventually(t, "the good proxy still served", func() bool { return len(good.Resources(resourcev3.ClusterType)) == 2 })
	assert.Equal(t, 1, r.server.conns.open())
}
