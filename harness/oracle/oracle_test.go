package oracle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

func TestCompare(t *testing.T) {
	a, b, c := IstioCluster("a.mesh.test", 80), IstioCluster("b.mesh.test", 80), IstioCluster("c.mesh.test", 80)
	want := FromHosts(map[string][]string{
		"a.mesh.test": {"10.0.0.1:9000", "10.0.0.2:9001"},
		"b.mesh.test": {"10.0.0.3:8080"},
	}, 80, func(h string) bool { return strings.HasSuffix(h, ".mesh.test") })
	st := State{
		Clusters: map[string]bool{a: true, b: true, c: true, "outbound|80||kubernetes.default.svc.cluster.local": true},
		Endpoints: map[string][]string{
			a: {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.9:9009"}, // ports wrong, one stale endpoint
			b: {"10.0.0.3:8080"},
		},
	}
	assert.Equal(t, []Mismatch{
		{Cluster: a, Want: "10.0.0.1:9000", Got: "10.0.0.1:80"},
		{Cluster: a, Want: "10.0.0.2:9001", Got: "10.0.0.2:80"},
		{Cluster: a, Want: Absent, Got: "10.0.0.9:9009"},
		{Cluster: c, Want: Absent, Got: "cluster"},
	}, Compare(want, st))

	delete(st.Clusters, b)
	assert.Contains(t, Compare(want, st), Mismatch{Cluster: b, Want: "cluster", Got: Absent})
	st.Clusters[b] = true
	delete(st.Endpoints, b)
	assert.Contains(t, Compare(want, st), Mismatch{Cluster: b, Want: "endpoints", Got: "no endpoints received"})
	assert.Equal(t, "a.mesh.test", HostOf(a))
	assert.Equal(t, "", HostOf("BlackHoleCluster"))
}

// TestClientFollowsCDSAndEDS: against a plain go-control-plane server the client subscribes to
// every EDS cluster, follows a removal, and reconnects after a server restart.
func TestClientFollowsCDSAndEDS(t *testing.T) {
	srv := xdstest.Start(t)
	a, b := IstioCluster("a.mesh.test", 80), IstioCluster("b.mesh.test", 80)
	srv.Set(t, "1", xdstest.EDSCluster(a, a), xdstest.EDSCluster(b, b),
		xdstest.CLA(a, "10.0.0.1:9000", "10.0.0.2:9001"), xdstest.CLA(b, "10.0.0.3:8080"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &Client{Addr: srv.Addr}
	c.Start(ctx)
	want := FromHosts(map[string][]string{"a.mesh.test": {"10.0.0.1:9000", "10.0.0.2:9001"}, "b.mesh.test": {"10.0.0.3:8080"}}, 80, nil)
	require.True(t, c.Wait(ctx, 10*time.Second, func(st State) bool { return len(Compare(want, st)) == 0 }), "%v", c.Compare(want))

	srv.Set(t, "2", xdstest.EDSCluster(a, a), xdstest.CLA(a, "10.0.0.1:80"))
	want = FromHosts(map[string][]string{"a.mesh.test": {"10.0.0.1:9000"}}, 80, func(string) bool { return true })
	require.True(t, c.Wait(ctx, 10*time.Second, func(st State) bool { return !st.Clusters[b] && len(st.Endpoints[a]) == 1 }))
	assert.Equal(t, []Mismatch{{Cluster: a, Want: "10.0.0.1:9000", Got: "10.0.0.1:80"}}, c.Compare(want))

	srv.Stop()
	require.Eventually(t, func() bool { return c.Err() != nil }, 10*time.Second, 10*time.Millisecond, "the client saw the stream end")
	srv.Restart(t)
	srv.Set(t, "3", xdstest.EDSCluster(a, a), xdstest.CLA(a, "10.0.0.1:9000"))
	require.True(t, c.Wait(ctx, 20*time.Second, func(st State) bool { return len(Compare(want, st)) == 0 }), "reconnected: %v", c.Compare(want))
}

// A server writing a large push reads no requests until it is done; the client must keep
// receiving while its own large EDS subscription waits to go out, or both stop for good (istiod
// at 23664 ServiceEntries, whose config the oracle client then never held).
func TestClientKeepsReceivingWhileItsSendWaits(t *testing.T) {
	const pushes, clusters, step = 12, 20000, 2000
	srv := xdstest.StartPusher(t, pushes, clusters, step, 200)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &Client{Addr: srv.Addr}
	c.Start(ctx)
	last := srv.ClusterName(clusters + (pushes-1)*step - 1)
	var updates int
	ok := c.Wait(ctx, time.Minute, func(s State) bool { updates = s.Updates; return s.Clusters[last] })
	require.True(t, ok, "the client held %d of %d pushes (%d requests reached the server; stream error %v)", updates, pushes, srv.Requests(), c.Err())
	assert.Equal(t, pushes, updates, "every push arrived, on one stream")
}
