package xdsproxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/workloads/xdsproxy"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// slack covers scheduling and the failed connection itself on a busy 2-core machine.
const slack = 200 * time.Millisecond

// TestReconnectBackoffIsPerProxyJitteredAndBounded: two proxies lose the same control plane.
// Each retries on its own schedule of Envoy's jittered exponential backoff (uniform in
// [0, min(base·2^n, max))), a new connection per attempt, and nothing else delays an attempt:
// grpc-go's channel backoff (1 s, ×1.6, ±20 %) would allow about three attempts in 5 s and make
// many gateways reconnect nearly in step.
func TestReconnectBackoffIsPerProxyJitteredAndBounded(t *testing.T) {
	const base, maxBackoff = 50 * time.Millisecond, 400 * time.Millisecond
	const attempts = 7
	xds := xdstest.Start(t)
	xds.Set(t, "1", xdstest.EDSCluster("a", "a"), xdstest.CLA("a", "127.0.0.1:1"))
	var relays []*relay
	var proxies []*xdsproxy.Proxy
	for i := range 2 {
		r := startRelay(t, xds.Addr)
		p := startProxyWith(t, xdsproxy.Options{XDSAddress: r.Addr, NodeID: fmt.Sprintf("gateway-%d", i), BackoffBase: base, BackoffMax: maxBackoff})
		relays, proxies = append(relays, r), append(proxies, p)
	}
	for _, p := range proxies {
		eventually(t, "proxy ready", p.Ready)
	}

	stopped := time.Now()
	xds.Stop()
	require.Eventually(t, func() bool {
		return len(relays[0].acceptsSince(stopped)) >= attempts && len(relays[1].acceptsSince(stopped)) >= attempts
	}, wait, 10*time.Millisecond, "each proxy retries on its own backoff")

	ceiling := func(n int) time.Duration { return min(base<<n, maxBackoff) }
	var tries [2][]time.Time
	for i, r := range relays {
		tries[i] = r.acceptsSince(stopped)[:attempts]
		prev := stopped
		for n, at := range tries[i] {
			assert.Less(t, at.Sub(prev), ceiling(n)+slack, "proxy %d waited longer than backoff ceiling %v before attempt %d", i, ceiling(n), n)
			prev = at
		}
	}
	var apart time.Duration
	for n := 1; n < attempts; n++ {
		d := tries[0][n].Sub(tries[0][n-1]) - tries[1][n].Sub(tries[1][n-1])
		apart += max(d, -d)
	}
	for i := range tries {
		t.Logf("proxy %d attempts after the loss: %v", i, offsets(stopped, tries[i]))
	}
	// Independent uniform draws differ by a third of the ceiling on average (≈ 630 ms summed).
	assert.Greater(t, apart, 100*time.Millisecond, "the proxies retry at their own instants, not in step")

	// Once the server is back, each proxy is connected within one backoff ceiling.
	xds.Restart(t)
	restarted := time.Now()
	for i, p := range proxies {
		eventually(t, "reconnected", func() bool { return p.Stats()["control_plane.connected_state"] == 1 })
		assert.Less(t, time.Since(restarted), maxBackoff+slack, "proxy %d reconnect after the server returned", i)
	}
}

// TestFrozenControlPlaneIsDetectedByKeepalive: a control plane that stops answering without
// closing anything (SIGSTOP, a starved node) is noticed by the keepalive ping going unanswered
// within KeepaliveTime+KeepaliveTimeout; the proxy then reconnects and recovers once the server
// answers again.
func TestFrozenControlPlaneIsDetectedByKeepalive(t *testing.T) {
	const keepaliveTime, keepaliveTimeout = 10 * time.Second, 500 * time.Millisecond // 10 s: grpc-go's floor
	xds := xdstest.Start(t)
	xds.Set(t, "1", xdstest.EDSCluster("a", "a"), xdstest.CLA("a", "127.0.0.1:1"))
	r := startRelay(t, xds.Addr)
	p := startProxyWith(t, xdsproxy.Options{XDSAddress: r.Addr, KeepaliveTime: keepaliveTime, KeepaliveTimeout: keepaliveTimeout,
		BackoffBase: 50 * time.Millisecond, BackoffMax: 400 * time.Millisecond})
	eventually(t, "proxy ready", p.Ready)

	frozen := time.Now()
	r.freeze()
	require.Eventually(t, func() bool { return p.Stats()["control_plane.connected_state"] == 0 },
		keepaliveTime+keepaliveTimeout+slack, 10*time.Millisecond, "the unanswered keepalive ping ends the stream")
	t.Logf("frozen control plane detected after %v", time.Since(frozen).Round(time.Millisecond))
	eventually(t, "a new connection is attempted", func() bool { return len(r.acceptsSince(frozen)) > 0 })
	assert.True(t, p.Ready(), "the proxy keeps its configuration")

	r.unfreeze()
	eventually(t, "reconnected once the server answers", func() bool { return p.Stats()["control_plane.connected_state"] == 1 })
}

func offsets(from time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, at := range ts {
		out[i] = at.Sub(from).Round(time.Millisecond)
	}
	return out
}

// The proxy keeps receiving while its large EDS subscription waits to go out to a server that is
// writing a large push (istiod's connection loop does), and takes responses past gRPC's 4 MiB
// default (Envoy sets no limit): a proxy that sends from its receive loop stops for good there.
func TestLargePushesKeepArrivingWhileTheSubscriptionWaits(t *testing.T) {
	const pushes, clusters, step = 12, 20000, 2000
	srv := xdstest.StartPusher(t, pushes, clusters, step, 200)
	p := startProxyWith(t, xdsproxy.Options{XDSAddress: srv.Addr})
	require.Eventually(t, func() bool { return p.Stats()["cluster_manager.cds.update_success"] == pushes },
		time.Minute, 20*time.Millisecond, "CDS updates the proxy took")
	s := p.Stats()
	assert.EqualValues(t, clusters+(pushes-1)*step, s["cluster_manager.active_clusters"]+s["cluster_manager.warming_clusters"])
	assert.EqualValues(t, 0, s["cluster_manager.cds.update_rejected"])
}
