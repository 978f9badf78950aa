package xds

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/results/stats"
)

// ackFunc sees one EDS response a client has ACKed: how many CLAs it carried, whether it carried
// the named one, and when the ACK was sent.
type ackFunc func(client, count int, has func(name string) bool, at time.Time)

// connectEDSFleet connects n ADS clients (SotW or Delta) to addr, each subscribed to wildcard CDS
// and to EDS for names, as an Envoy with those clusters; acked sees every EDS response each one
// has ACKed.
func connectEDSFleet(b *testing.B, addr string, n int, delta bool, names []string, acked ackFunc) {
	for c := 0; c < n; c++ {
		id := fmt.Sprintf("sidecar~10.1.%d.%d~p-%d.bench~bench.svc.cluster.local", c/256, c%256, c)
		if delta {
			cl, err := adsclient.DialDelta(context.Background(), addr, id)
			require.NoError(b, err)
			cl.OnAcked = func(r adsclient.DeltaResponse, at time.Time) {
				if r.TypeURL != resourcev3.EndpointType {
					return
				}
				acked(c, len(r.Resources), func(name string) bool {
					for _, res := range r.Resources {
						if res.GetName() == name {
							return true
						}
					}
					return false
				}, at)
			}
			require.NoError(b, cl.Subscribe(resourcev3.ClusterType))
			require.NoError(b, cl.Subscribe(resourcev3.EndpointType, names...))
			go cl.Run()
			b.Cleanup(cl.Close)
			continue
		}
		cl, err := adsclient.Dial(context.Background(), addr, id)
		require.NoError(b, err)
		cl.OnResponse = func(adsclient.Response) {}
		cl.OnAcked = func(r adsclient.Response, at time.Time) {
			if r.TypeURL != resourcev3.EndpointType {
				return
			}
			acked(c, len(r.Resources), func(name string) bool {
				for _, a := range r.Resources {
					var cla endpoint.ClusterLoadAssignment
					if a.UnmarshalTo(&cla) == nil && cla.GetClusterName() == name {
						return true
					}
				}
				return false
			}, at)
		}
		require.NoError(b, cl.SetNames(resourcev3.ClusterType, nil))
		require.NoError(b, cl.SetNames(resourcev3.EndpointType, names))
		go cl.Run()
		b.Cleanup(cl.Close)
	}
}

// percentileMs is the q-quantile of sorted durations (stats.Percentile, as the harness's
// figures), in milliseconds.
func percentileMs(sorted []time.Duration, q float64) float64 {
	return float64(stats.Percentile(sorted, q).Microseconds()) / 1000
}

// endpointChangeLatencies connects clients ADS clients (SotW, or Delta) to a control plane with
// wildcard CDS and EDS for every cluster of 1000 ServiceEntries × 10 endpoints, waits until each
// holds every CLA, then b.N times changes one service's endpoints and measures, per client, the
// change entering the control plane → the client has ACKed the new CLA, with the default 100 ms
// debounce in the path. It returns the latencies sorted.
func endpointChangeLatencies(b *testing.B, clients int, delta bool, timeout time.Duration) []time.Duration {
	const services = 1000
	r := newRig(b, 100*time.Millisecond, 10*time.Second)
	fill(b, r.m, services, 10)
	r.start(b)
	names := make([]string, services)
	for i := range names {
		names[i] = model.ClusterName(fmt.Sprintf("se-%d.bench.test", i), 80)
	}
	var mu sync.Mutex
	var target string
	var t0 time.Time
	var lat []time.Duration
	initial := make([]int, clients)
	ready := make(chan struct{}, clients)
	got := make(chan struct{}, clients)
	seen := make([]string, clients)
	connectEDSFleet(b, r.addr, clients, delta, names, func(c, count int, has func(string) bool, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if initial[c] < services {
			if initial[c] += count; initial[c] >= services {
				ready <- struct{}{}
			}
			return
		}
		if target == "" || seen[c] == target || !has(target) {
			return
		}
		seen[c] = target
		lat = append(lat, at.Sub(t0))
		got <- struct{}{}
	})
	for c := 0; c < clients; c++ {
		select {
		case <-ready:
		case <-time.After(5 * time.Minute):
			b.Fatalf("only %d of %d clients hold every CLA", c, clients)
		}
	}
	rng := rand.New(rand.NewSource(1))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		svc := rng.Intn(services)
		conv := movedEndpoints(b, svc, i)
		mu.Lock()
		target, t0 = names[svc], time.Now()
		mu.Unlock()
		r.pusher.Enqueue(r.m.SetServiceEntry("bench", fmt.Sprintf("se-%d", svc), time.Unix(0, 0), conv))
		for c := 0; c < clients; c++ {
			select {
			case <-got:
			case <-time.After(timeout):
				b.Fatalf("iteration %d: only %d of %d clients ACKed the change", i, c, clients)
			}
		}
		mu.Lock()
		target = ""
		mu.Unlock()
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat
}

// reportLatencies reports P50, P99 and max of sorted latencies.
func reportLatencies(b *testing.B, lat []time.Duration) {
	b.ReportMetric(percentileMs(lat, 0.5), "p50-ms")
	b.ReportMetric(percentileMs(lat, 0.99), "p99-ms")
	b.ReportMetric(percentileMs(lat, 1), "max-ms")
}

// BenchmarkEndpointChangeACKed1000: endpointChangeLatencies with 1000 clients, SotW and Delta
// (-benchtime 20x: 20 000 samples each).
func BenchmarkEndpointChangeACKed1000(b *testing.B) {
	for _, mode := range []string{"sotw", "delta"} {
		b.Run(mode, func(b *testing.B) {
			reportLatencies(b, endpointChangeLatencies(b, 1000, mode == "delta", 60*time.Second))
		})
	}
}

// BenchmarkFullPush1000Proxies: 1000 proxies (wildcard CDS) in 10 namespaces (10 scopes of 100
// proxies) on 5000 ServiceEntries × 10 endpoints. Each iteration is a full push, timed per proxy
// from the push's start until it has received its new CDS. Reports P50 and P99 over every proxy
// and iteration, the CDS bytes sent per push, and the scope generations per push divided by the
// scopes: 1 when config is generated once per scope, 100 if it were once per proxy.
func BenchmarkFullPush1000Proxies(b *testing.B) {
	const services, proxies, scopes = 5000, 1000, 10
	r := newRig(b, 100*time.Millisecond, 10*time.Second)
	fill(b, r.m, services, 10)
	r.start(b)
	var mu sync.Mutex
	var lat []time.Duration
	var bytes int64
	var start time.Time
	measuring := false
	wait := cdsFleet(b, r.addr, proxies, scopes, func(resp adsclient.Response) {
		mu.Lock()
		if measuring {
			lat = append(lat, resp.At.Sub(start))
			bytes += int64(resp.Size)
		}
		mu.Unlock()
	})
	wait() // the initial fetch
	require.Len(b, r.caches.Scopes(), scopes)
	gens := r.generations
	before := gens()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		mu.Lock()
		start, measuring = time.Now(), true
		mu.Unlock()
		r.pusher.Push(model.Change{Full: true})
		wait()
		mu.Lock()
		measuring = false
		mu.Unlock()
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(percentileMs(lat, 0.5), "p50-ms")
	b.ReportMetric(percentileMs(lat, 0.99), "p99-ms")
	b.ReportMetric(float64(bytes)/float64(b.N)/(1<<20), "MiB-sent/push")
	b.ReportMetric(float64(gens()-before)/float64(b.N)/scopes, "generations/scope")
}
