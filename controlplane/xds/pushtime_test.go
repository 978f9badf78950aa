package xds

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestPushTimeIsEachResponsesOwnTime: pilot_xds_push_time has istiod's meaning (pushXds: t0
// before the response is generated, recorded once it is sent): one sample per response sent,
// a proxy's initial fetches included, by type; a response's wait for a push-throttle slot is
// not in it (that is pilot_proxy_queue_time). The push's latency at the proxy, pushes only,
// is the reference's own push delivery time.
func TestPushTimeIsEachResponsesOwnTime(t *testing.T) {
	r := newRigWith(t, 1, 10*time.Millisecond, time.Second)
	r.applyIn(t, "a", "a1", "10.0.0.1")
	r.start(t)
	pushTime := func(typ string) (uint64, float64) {
		h := histogram(t, r.met, "pilot_xds_push_time", typ)
		return h.GetSampleCount(), h.GetSampleSum()
	}
	sent := func(typ string) uint64 { return uint64(testutil.ToFloat64(r.met.XDSPushes.WithLabelValues(typ))) }

	p := r.client(t, "sidecar~10.1.0.1~p1.a~a.svc.cluster.local", "outbound|80||a1.test")
	eventually(t, "the initial fetch", func() bool { return endpointsOf(t, p, "outbound|80||a1.test") == 1 })
	for _, typ := range []string{"cds", "eds"} {
		eventually(t, "the initial "+typ+" timed", func() bool { n, _ := pushTime(typ); return n == sent(typ) })
		n, _ := pushTime(typ)
		assert.Equal(t, uint64(1), n, "the initial %s fetch is timed, as istiod's", typ)
	}
	assert.Zero(t, histogram(t, r.met, "meshchaos_controlplane_push_delivery_seconds", "eds").GetSampleCount(),
		"push delivery: pushes only")

	// Hold the only send slot: the EDS push's response waits for it (the push delivery time
	// shows the response reached the stream), then is sent once the slot is free.
	r.server.sends.slots <- struct{}{}
	r.applyIn(t, "a", "a1", "10.0.0.1", "10.0.0.2")
	eventually(t, "the push's response at the throttle", func() bool {
		return histogram(t, r.met, "meshchaos_controlplane_push_delivery_seconds", "eds").GetSampleCount() == 1
	})
	_, before := pushTime("eds")
	queuedBefore := histogram(t, r.met, "pilot_proxy_queue_time").GetSampleSum()
	const held = 300 * time.Millisecond
	time.Sleep(held) // the wait for the slot, which the push time leaves out
	<-r.server.sends.slots
	eventually(t, "the EDS push at the proxy", func() bool { return endpointsOf(t, p, "outbound|80||a1.test") == 2 })
	eventually(t, "the push timed", func() bool { n, _ := pushTime("eds"); return n == 2 })
	_, after := pushTime("eds")
	assert.GreaterOrEqual(t, histogram(t, r.met, "pilot_proxy_queue_time").GetSampleSum()-queuedBefore, held.Seconds(),
		"the wait is the queue time")
	assert.Less(t, after-before, held.Seconds(), "and not the push time")
	assert.Equal(t, sent("eds"), uint64(2), "one push time per response sent")
}

// TestDeltaInitialFetchIsTimed: a Delta stream's responses are timed too, its initial fetch
// included.
func TestDeltaInitialFetchIsTimed(t *testing.T) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	r.apply(t, "a", "10.0.0.1")
	r.start(t)
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(context.Background())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "sidecar~delta"}, TypeUrl: resourcev3.ClusterType}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, resourcev3.ClusterType, resp.GetTypeUrl())
	eventually(t, "the delta CDS response timed", func() bool {
		return histogram(t, r.met, "pilot_xds_push_time", "cds").GetSampleCount() == 1
	})
}
