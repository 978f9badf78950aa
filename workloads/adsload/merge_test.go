package adsload_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/workloads/adsload"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// Two processes of one fleet (First 0 and First 3) give the control plane 3 + 4 distinct
// proxies, named as one process of 7 clients would name them, and their Stats add up to the
// fleet's; /stats says each process's resident memory.
func TestFleetProcessesAreDistinctProxies(t *testing.T) {
	xds := xdstest.Start(t)
	xds.Set(t, "1", mesh(2)...)
	var loads []*adsload.Load
	for _, o := range []adsload.Options{{First: 0, Clients: 3}, {First: 3, Clients: 4}} {
		o.XDSAddress, o.Namespace = xds.Addr, "ns"
		l, err := adsload.New(o)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { l.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		loads = append(loads, l)
	}
	require.Eventually(t, func() bool {
		return loads[0].Stats().ClientsAtVersion["rds"]["1"] == 3 && loads[1].Stats().ClientsAtVersion["rds"]["1"] == 4
	}, 10*time.Second, 10*time.Millisecond)

	nodes := map[string]bool{}
	for _, r := range xds.Requests() {
		if id := r.GetNode().GetId(); id != "" {
			nodes[id] = true
		}
	}
	assert.Len(t, nodes, 7, "seven distinct node ids")
	for _, want := range []string{"sidecar~10.100.0.0~adsload-0.ns~ns.svc.cluster.local", "sidecar~10.100.0.6~adsload-6.ns~ns.svc.cluster.local"} {
		assert.True(t, nodes[want], want)
	}

	a, b := loads[0].Stats(), loads[1].Stats()
	assert.Equal(t, 3, b.First)
	m := adsload.MergeStats(a, b)
	assert.Equal(t, 7, m.Clients)
	assert.EqualValues(t, 7, m.Connected)
	assert.EqualValues(t, 7, m.Configured)
	assert.Equal(t, a.ACKs+b.ACKs, m.ACKs)
	assert.EqualValues(t, 7*2, m.Resources["cds"])
	assert.Equal(t, 7, m.ClientsAtVersion["cds"]["1"])
	assert.Equal(t, a.Bytes["eds"]+b.Bytes["eds"], m.Bytes["eds"])
	for _, p := range m.Pushes {
		if p.Type == "cds" && p.Version == "1" {
			assert.Equal(t, 7, p.Clients, "a push's receipts over both processes")
		}
	}

	srv := httptest.NewServer(loads[1].Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/stats")
	require.NoError(t, err)
	var js adsload.Stats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&js))
	resp.Body.Close()
	assert.Equal(t, 3, js.First)
	assert.Positive(t, js.RSSBytes, "the process's RSS on /stats")

	_, err = adsload.New(adsload.Options{XDSAddress: xds.Addr, First: -1, Clients: 1})
	assert.ErrorContains(t, err, "want indexes from 0")
}

// A push's receipts merge over processes: its first receipt the earliest, its last the latest.
func TestMergeStatsPushes(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 21, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a := adsload.Stats{Clients: 2, RSSBytes: 10 << 20, Pushes: []adsload.Push{{Type: "eds", Version: "v2", Clients: 2, FirstAt: at(10), LastAt: at(30)}}}
	b := adsload.Stats{Clients: 3, First: 2, RSSBytes: 20 << 20, Pushes: []adsload.Push{
		{Type: "eds", Version: "v1", Clients: 3, FirstAt: at(0), LastAt: at(5)},
		{Type: "eds", Version: "v2", Clients: 3, FirstAt: at(5), LastAt: at(20)}}}
	m := adsload.MergeStats(a, b)
	assert.Equal(t, 5, m.Clients)
	assert.EqualValues(t, 30<<20, m.RSSBytes)
	require.Len(t, m.Pushes, 2)
	assert.Equal(t, "v1", m.Pushes[0].Version, "oldest first")
	assert.Equal(t, adsload.Push{Type: "eds", Version: "v2", Clients: 5, FirstAt: at(5), LastAt: at(30), ConvergenceMs: 25}, m.Pushes[1])
}

func TestMergeTracked(t *testing.T) {
	r := func(n int) []adsload.Receipt { return []adsload.Receipt{{Endpoints: n}} }
	m, err := adsload.MergeTracked(adsload.Tracked{Track: "flap", Clients: [][]adsload.Receipt{r(1), r(2)}},
		adsload.Tracked{Track: "flap", Clients: [][]adsload.Receipt{r(3)}})
	require.NoError(t, err)
	assert.Equal(t, adsload.Tracked{Track: "flap", Clients: [][]adsload.Receipt{r(1), r(2), r(3)}}, m)
	_, err = adsload.MergeTracked(adsload.Tracked{Track: "flap"}, adsload.Tracked{Track: "other"})
	assert.ErrorContains(t, err, "different clusters")
}
