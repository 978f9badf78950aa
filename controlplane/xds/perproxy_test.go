package xds

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/model"
)

func TestParseGeneration(t *testing.T) {
	for in, want := range map[string]Generation{"": PerScope, "per-scope": PerScope, "per-proxy": PerProxy} {
		got, err := ParseGeneration(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := ParseGeneration("per-pod")
	require.ErrorContains(t, err, `unknown generation mode "per-pod" (known: per-scope, per-proxy)`)
}

// perProxyTypes are the types a sidecar of the per-proxy tests watches, with its RDS names.
var perProxyTypes = map[string][]string{resourcev3.ClusterType: nil, resourcev3.ListenerType: nil, resourcev3.RouteType: {"80", "8080"}}

// generationRig is a started rig in mode gen with services s0…s(n-1) in namespace ns (ports
// 80 and 8080), and proxies sidecars of ns each watching CDS, LDS and RDS, synced.
func generationRig(t *testing.T, gen Generation, services, proxies int) (*rig, []*adsclient.Client) {
	r := newRigGeneration(t, Limits{}, gen, 10*time.Millisecond, time.Second)
	for i := range services {
		r.applyIn(t, "ns", fmt.Sprintf("s%d", i), fmt.Sprintf("10.0.0.%d", i+1))
	}
	r.start(t)
	var cs []*adsclient.Client
	for i := range proxies {
		c, err := adsclient.Dial(t.Context(), r.addr, fmt.Sprintf("sidecar~10.1.0.%d~p%d.ns~ns.svc.cluster.local", i, i))
		require.NoError(t, err)
		for typ, names := range perProxyTypes {
			require.NoError(t, c.SetNames(typ, names))
		}
		go c.Run()
		t.Cleanup(c.Close)
		cs = append(cs, c)
	}
	for _, c := range cs {
		waitConfig(t, c, services)
	}
	return r, cs
}

// waitConfig waits until c has the clusters of services, the listener and the route.
func waitConfig(t *testing.T, c *adsclient.Client, services int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d services' config", services), func() bool {
		return len(c.Resources(resourcev3.ClusterType)) == services &&
			len(c.Resources(resourcev3.ListenerType)) == 1 && len(c.Resources(resourcev3.RouteType)) == 1
	})
}

// encoded is a proxy's CDS, LDS and RDS resources as encoded: type → name → bytes.
func encoded(c *adsclient.Client) map[string]map[string]string {
	out := map[string]map[string]string{}
	for typ := range perProxyTypes {
		out[typ] = map[string]string{}
		for n, a := range c.Resources(typ) {
			out[typ][n] = string(a.GetValue())
		}
	}
	return out
}

func proxyGenerations(r *rig, short string) int {
	return int(testutil.ToFloat64(r.met.ProxyGenerations.WithLabelValues(short)))
}

// TestPerProxyGenerationGeneratesForEachProxy: in the per-proxy mode a full push generates and
// encodes each proxy's CDS, LDS and RDS once per proxy (the scope is still generated once), and
// every proxy gets, byte for byte, what the per-scope mode gives it.
func TestPerProxyGenerationGeneratesForEachProxy(t *testing.T) {
	const services, proxies = 3, 4
	scopeRig, scopeProxies := generationRig(t, PerScope, services, proxies)
	proxyRig, perProxy := generationRig(t, PerProxy, services, proxies)

	want := encoded(scopeProxies[0])
	require.Len(t, want[resourcev3.ClusterType], services)
	for i := range proxies {
		assert.Equal(t, want, encoded(scopeProxies[i]), "per-scope proxy %d", i)
		assert.Equal(t, want, encoded(perProxy[i]), "per-proxy proxy %d", i)
	}
	for _, short := range []string{"cds", "lds", "rds"} {
		assert.Equal(t, 0, proxyGenerations(scopeRig, short), "per-scope mode: no per-proxy generation (%s)", short)
		assert.Equal(t, proxies, proxyGenerations(proxyRig, short), "per-proxy mode: one %s generation per proxy's first response", short)
	}
	sc := proxyRig.caches.Scope("ns")
	scopeGens := sc.Pushes()

	// A full push (a new service): one more generation per proxy and type, one for the scope.
	for _, r := range []*rig{scopeRig, proxyRig} {
		r.applyIn(t, "ns", "new", "10.0.9.9")
	}
	for i := range proxies {
		waitConfig(t, scopeProxies[i], services+1)
		waitConfig(t, perProxy[i], services+1)
	}
	want = encoded(scopeProxies[0])
	for i := range proxies {
		assert.Equal(t, want, encoded(scopeProxies[i]), "per-scope proxy %d after the push", i)
		assert.Equal(t, want, encoded(perProxy[i]), "per-proxy proxy %d after the push", i)
	}
	for _, short := range []string{"cds", "lds", "rds"} {
		assert.Equal(t, 0, proxyGenerations(scopeRig, short), short)
		assert.Equal(t, 2*proxies, proxyGenerations(proxyRig, short), "per-proxy mode: one more %s generation per proxy", short)
	}
	assert.Equal(t, scopeGens+1, sc.Pushes(), "the scope itself is generated once per push")
}

// BenchmarkFullPushGeneration: a full push to 100 proxies (wildcard CDS, one scope) on 1000
// ServiceEntries × 10 endpoints, in each generation mode. Each iteration is a full push, timed
// per proxy from its start until the proxy has its new CDS; reports P50/P99 and the per-proxy
// CDS generations per push (0 per-scope, 100 per-proxy).
func BenchmarkFullPushGeneration(b *testing.B) {
	const services, proxies = 1000, 100
	for _, gen := range Generations {
		b.Run(string(gen), func(b *testing.B) {
			// The fleet connects at once: no new-stream rate (istiod's would admit 25 a second).
			r := newRigGeneration(b, Limits{NewStreamsPerSecond: -1, MaxStreams: -1}, gen, 100*time.Millisecond, 10*time.Second)
			fill(b, r.m, services, 10)
			r.start(b)
			var mu sync.Mutex
			var lat []time.Duration
			var start time.Time
			measuring := false
			wait := cdsFleet(b, r.addr, proxies, 1, func(resp adsclient.Response) {
				mu.Lock()
				if measuring {
					lat = append(lat, resp.At.Sub(start))
				}
				mu.Unlock()
			})
			wait() // the initial fetch
			before := proxyGenerations(r, "cds")
			b.ResetTimer()
			for range b.N {
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
			slices.Sort(lat)
			b.ReportMetric(percentileMs(lat, 0.5), "p50-ms")
			b.ReportMetric(percentileMs(lat, 0.99), "p99-ms")
			b.ReportMetric(float64(proxyGenerations(r, "cds")-before)/float64(b.N), "proxy-cds-generations/push")
		})
	}
}

// TestPerProxyGenerationProxyless: a proxyless gRPC client's API listeners (LDS by name) are
// generated for it too, and are those of the per-scope mode.
func TestPerProxyGenerationProxyless(t *testing.T) {
	got := map[Generation]map[string]string{}
	for _, gen := range Generations {
		r := newRigGeneration(t, Limits{}, gen, 10*time.Millisecond, time.Second)
		r.apply(t, "a", "10.0.0.1")
		r.start(t)
		g := grpcListeners(t, r, "a.test:80")
		eventually(t, "the API listener", func() bool { return len(g.Resources(resourcev3.ListenerType)) == 1 })
		got[gen] = map[string]string{}
		for n, a := range g.Resources(resourcev3.ListenerType) {
			got[gen][n] = string(a.GetValue())
		}
		want := 0
		if gen == PerProxy {
			want = 1
		}
		assert.Equal(t, want, proxyGenerations(r, "lds"), "%s: LDS generations for the proxyless client", gen)
	}
	assert.Equal(t, got[PerScope], got[PerProxy])
	assert.Contains(t, got[PerProxy], "a.test:80")
}
