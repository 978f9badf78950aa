package adsload_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/workloads/adsload"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// mesh is n services, each a cluster with two endpoints, behind one listener and route config.
func mesh(n int) []types.Resource {
	var res []types.Resource
	var vhosts = xdstest.RouteConfig("80")
	for i := range n {
		name := fmt.Sprintf("outbound|80||svc-%d.default.svc.cluster.local", i)
		res = append(res, xdstest.EDSCluster(name, ""), xdstest.CLA(name, fmt.Sprintf("10.0.%d.1:8080", i), fmt.Sprintf("10.0.%d.2:8080", i)))
		vhosts.VirtualHosts = append(vhosts.VirtualHosts, xdstest.VirtualHost(name, []string{fmt.Sprintf("svc-%d", i)}, xdstest.PrefixRoute("/", name)))
	}
	return append(res, xdstest.HTTPListener("0.0.0.0_80", "0.0.0.0:80", "80"), vhosts)
}

func TestClientsACKAndRecordConvergence(t *testing.T) {
	xds := xdstest.Start(t)
	xds.Set(t, "1", mesh(5)...)
	const n = 20
	l, err := adsload.New(adsload.Options{XDSAddress: xds.Addr, Clients: n})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	atVersion := func(v string) bool {
		s := l.Stats()
		for _, typ := range []string{"cds", "eds", "lds", "rds"} {
			if s.ClientsAtVersion[typ][v] != n {
				return false
			}
		}
		return true
	}
	require.Eventually(t, func() bool { return atVersion("1") }, 10*time.Second, 10*time.Millisecond)
	s := l.Stats()
	assert.EqualValues(t, n, s.Connected)
	assert.EqualValues(t, n, s.Configured)
	assert.EqualValues(t, n*5, s.Resources["cds"])
	assert.EqualValues(t, n*5, s.Resources["eds"])
	assert.EqualValues(t, n*1, s.Resources["lds"])
	assert.EqualValues(t, n*1, s.Resources["rds"])
	assert.EqualValues(t, n*10, s.Endpoints)
	assert.Positive(t, s.Bytes["eds"])
	assert.Zero(t, s.NACKs)

	// Each client is its own node and ACKs with version and nonce.
	nodes := map[string]bool{}
	acks := 0
	for _, r := range xds.Requests() {
		if r.GetNode() != nil {
			nodes[r.GetNode().GetId()] = true
		}
		if r.GetVersionInfo() == "1" && r.GetResponseNonce() != "" && r.GetTypeUrl() == resourcev3.ClusterType {
			acks++
		}
	}
	assert.Len(t, nodes, n)
	assert.Equal(t, n, acks)

	// A push reaches every client; its fan-out is recorded.
	xds.Set(t, "2", mesh(6)...)
	require.Eventually(t, func() bool { return atVersion("2") }, 10*time.Second, 10*time.Millisecond)
	s = l.Stats()
	assert.EqualValues(t, n*6, s.Resources["cds"])
	var cds2 *adsload.Push
	for i := range s.Pushes {
		if s.Pushes[i].Type == "cds" && s.Pushes[i].Version == "2" {
			cds2 = &s.Pushes[i]
		}
	}
	require.NotNil(t, cds2)
	assert.Equal(t, n, cds2.Clients)
	assert.GreaterOrEqual(t, cds2.ConvergenceMs, 0.0)
	assert.False(t, cds2.LastAt.Before(cds2.FirstAt))

	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), fmt.Sprintf("adsload_clients_connected %d", n))
	assert.Contains(t, string(body), `adsload_resources{type="cds"} 120`)
	resp, err = srv.Client().Get(srv.URL + "/stats")
	require.NoError(t, err)
	var js adsload.Stats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&js))
	resp.Body.Close()
	assert.Equal(t, n, js.Clients)

	// Clients reconnect after the server restarts and resume from their versions.
	xds.Stop()
	require.Eventually(t, func() bool { s := l.Stats(); return s.Connected == 0 && s.Configured == 0 }, 5*time.Second, 10*time.Millisecond)
	xds.Restart(t)
	require.Eventually(t, func() bool { s := l.Stats(); return s.Connected == n && s.Configured == n }, 15*time.Second, 20*time.Millisecond)
}

// TestConfiguredMeansServed: a client is configured once its stream has received a response,
// not when the stream opens (a control plane may hold a stream unanswered); the pod is ready
// (/ready) once every client is.
func TestConfiguredMeansServed(t *testing.T) {
	xds := xdstest.Start(t) // no snapshot yet: streams open, nothing is answered
	const n = 5
	l, err := adsload.New(adsload.Options{XDSAddress: xds.Addr, Clients: n})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	ready := func() int {
		resp, err := srv.Client().Get(srv.URL + "/ready")
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Eventually(t, func() bool { return l.Stats().Connected == n }, 10*time.Second, 10*time.Millisecond)
	assert.Zero(t, l.Stats().Configured, "connected, nothing received")
	assert.Equal(t, http.StatusServiceUnavailable, ready(), "not ready: no client served")
	xds.Set(t, "1", mesh(2)...)
	require.Eventually(t, func() bool { return l.Stats().Configured == n }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, http.StatusOK, ready(), "ready: every client served")
}

func TestClientsRecordTrackedEndpointChanges(t *testing.T) {
	xds := xdstest.Start(t)
	flap := "outbound|80||flap.default.svc.cluster.local"
	withFlap := func(addrs ...string) []types.Resource {
		return append(mesh(2), xdstest.EDSCluster(flap, ""), xdstest.CLA(flap, addrs...))
	}
	xds.Set(t, "1", withFlap("10.1.0.1:8080")...)
	const n = 5
	l, err := adsload.New(adsload.Options{XDSAddress: xds.Addr, Clients: n, Track: "flap.default"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	receipts := func(want int) func() bool {
		return func() bool {
			for _, c := range l.Tracked().Clients {
				if len(c) != want {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, receipts(1), 10*time.Second, 10*time.Millisecond)
	// A push that leaves the tracked endpoints as they were records nothing.
	xds.Set(t, "2", append(withFlap("10.1.0.1:8080"), xdstest.EDSCluster("extra", ""), xdstest.CLA("extra", "10.2.0.1:80"))...)
	require.Eventually(t, func() bool { return l.Stats().ClientsAtVersion["eds"]["2"] == n }, 10*time.Second, 10*time.Millisecond)
	// An EDS response without the tracked assignment leaves it as it was, as in Envoy.
	xds.Set(t, "2b", append(mesh(2), xdstest.EDSCluster(flap, ""))...)
	require.Eventually(t, func() bool { return l.Stats().ClientsAtVersion["eds"]["2b"] == n }, 10*time.Second, 10*time.Millisecond)
	xds.Set(t, "3", withFlap()...)
	require.Eventually(t, receipts(2), 10*time.Second, 10*time.Millisecond)
	xds.Set(t, "4", withFlap("10.1.0.2:8080")...)
	require.Eventually(t, receipts(3), 10*time.Second, 10*time.Millisecond)
	// The endpoint still sent, marked UNHEALTHY (istiod's not-ready endpoint): no usable one.
	unhealthy := xdstest.CLA(flap, "10.1.0.2:8080")
	unhealthy.Endpoints[0].LbEndpoints[0].HealthStatus = corev3.HealthStatus_UNHEALTHY
	xds.Set(t, "5", append(mesh(2), xdstest.EDSCluster(flap, ""), unhealthy)...)
	require.Eventually(t, receipts(4), 10*time.Second, 10*time.Millisecond)

	tr := l.Tracked()
	assert.Equal(t, "flap.default", tr.Track)
	for _, c := range tr.Clients {
		assert.Equal(t, []int{1, 0, 1, 0}, []int{c[0].Endpoints, c[1].Endpoints, c[2].Endpoints, c[3].Endpoints})
		assert.True(t, c[0].At.Before(c[1].At) && c[1].At.Before(c[2].At) && c[2].At.Before(c[3].At))
	}
}

// Each client keeps receiving while its large EDS subscription waits to go out to a server that
// is writing a large push (as istiod does), and takes responses larger than gRPC's 4 MiB default
// (Envoy sets no limit): otherwise a mesh past a few thousand services never reaches it.
func TestClientsKeepReceivingLargePushes(t *testing.T) {
	const pushes, clusters, step = 12, 20000, 2000
	srv := xdstest.StartPusher(t, pushes, clusters, step, 200)
	l, err := adsload.New(adsload.Options{XDSAddress: srv.Addr, Clients: 2})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	last := fmt.Sprint(pushes)
	require.Eventually(t, func() bool { return l.Stats().ClientsAtVersion["cds"][last] == 2 },
		time.Minute, 50*time.Millisecond, "clients at the last push: %v (requests at the server %d)", l.Stats().ClientsAtVersion["cds"], srv.Requests())
	s := l.Stats()
	assert.EqualValues(t, 2*(clusters+(pushes-1)*step), s.Resources["cds"])
	assert.EqualValues(t, 2, s.Connected, "on the stream they started with")
}
