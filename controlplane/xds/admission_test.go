package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
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

// TestRequestLimitIsIstiods: the default new-stream rate is istiod's heuristic (the values its
// comment in pilot/pkg/features/tuning.go lists) with its burst of 1.
func TestRequestLimitIsIstiods(t *testing.T) {
	for procs, want := range map[int]float64{1: 20, 2: 25, 4: 35, 17: 100, 32: 100} {
		assert.Equal(t, want, RequestLimit(procs), "GOMAXPROCS %d", procs)
	}
	l := Limits{}.withDefaults()
	assert.Equal(t, RequestLimit(runtime.GOMAXPROCS(0)), l.NewStreamsPerSecond)
	assert.Equal(t, 1, l.NewStreamBurst)
}

// TestReconnectStormAdmittedAtIstiodsRate: streams opened all at once against the default
// limits are admitted at istiod's rate, not all at once: each waits up to a second for its turn
// and the rest are refused with ResourceExhausted (the proxy backs off and retries). Under the
// old defaults (200/s, burst 1000) every one of them was admitted at once.
func TestReconnectStormAdmittedAtIstiodsRate(t *testing.T) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	r.apply(t, "svc", "10.0.0.1")
	r.start(t)
	rate := RequestLimit(runtime.GOMAXPROCS(0))
	storm := int(3 * rate) // three times what a second's wait admits
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var (
		mu              sync.Mutex
		served, refused int
		other           []error
		wg              sync.WaitGroup
	)
	start := time.Now()
	for i := range storm {
		wg.Go(func() {
			// One connection carries at most MaxStreamsPerConn streams at once: a connection per
			// 50 streams keeps the storm from queueing in HTTP/2 instead of the limiter.
			c := conn
			if i >= 50 {
				cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					mu.Lock()
					other = append(other, err)
					mu.Unlock()
					return
				}
				defer cc.Close()
				c = cc
			}
			s, err := discovery.NewAggregatedDiscoveryServiceClient(c).StreamAggregatedResources(ctx)
			if err == nil {
				node := &core.Node{Id: fmt.Sprintf("sidecar~10.9.1.%d~storm-%d.ns~ns.svc.cluster.local", i%250, i)}
				err = s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType})
			}
			// A stream the server already ended (refused) fails Send with io.EOF; its status
			// comes from Recv (grpc-go's SendMsg contract).
			if s != nil && (err == nil || errors.Is(err, io.EOF)) {
				_, err = s.Recv()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				served++
			case status.Code(err) == codes.ResourceExhausted:
				refused++
			default:
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	require.Empty(t, other, "every stream was served or refused by the limiter")
	assert.Positive(t, refused, "a storm of %d streams, %g/s admitted: some refused", storm, rate)
	// The limiter admits its burst and then rate a second, for as long as the storm lasted.
	assert.LessOrEqual(t, float64(served), float64(RequestBurst)+rate*elapsed.Seconds()+1,
		"%d served in %v at %g/s", served, elapsed, rate)
	assert.Equal(t, float64(refused), testutil.ToFloat64(r.met.XDSLimited.WithLabelValues("new-streams")))
}
