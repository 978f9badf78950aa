package xds

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"istio.io/api/networking/v1alpha3"

	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/model"
)

// fill adds n ServiceEntries "se-i.bench.test" with eps endpoints each.
func fill(b testing.TB, m *model.Model, n, eps int) {
	for i := 0; i < n; i++ {
		spec := &v1alpha3.ServiceEntry{Hosts: []string{fmt.Sprintf("se-%d.bench.test", i)}, Resolution: v1alpha3.ServiceEntry_STATIC,
			Ports: []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080}}}
		for j := 0; j < eps; j++ {
			spec.Endpoints = append(spec.Endpoints, &v1alpha3.WorkloadEntry{Address: fmt.Sprintf("10.%d.%d.%d", 1+j, i/256%256, i%256),
				Labels: map[string]string{"app": fmt.Sprintf("se-%d", i)}})
		}
		conv, _, err := model.ConvertServiceEntry("bench", fmt.Sprintf("se-%d", i), spec)
		require.NoError(b, err)
		m.SetServiceEntry("bench", fmt.Sprintf("se-%d", i), time.Unix(0, 0), conv)
	}
}

// movedEndpoints is ServiceEntry se-svc of fill with its 10 endpoints at new addresses (iteration
// i's): an endpoint-only change.
func movedEndpoints(b *testing.B, svc, i int) *model.ConvertedServiceEntry {
	spec := &v1alpha3.ServiceEntry{Hosts: []string{fmt.Sprintf("se-%d.bench.test", svc)}, Resolution: v1alpha3.ServiceEntry_STATIC,
		Ports: []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080}}}
	for j := 0; j < 10; j++ {
		spec.Endpoints = append(spec.Endpoints, &v1alpha3.WorkloadEntry{Address: fmt.Sprintf("10.%d.%d.%d", 100+i%100, j, svc%256),
			Labels: map[string]string{"app": fmt.Sprintf("se-%d", svc)}})
	}
	conv, _, err := model.ConvertServiceEntry("bench", fmt.Sprintf("se-%d", svc), spec)
	require.NoError(b, err)
	return conv
}

// BenchmarkFullPush5000 is the time of one full push (generate + validate + hand to the caches)
// of 5000 ServiceEntries × 10 endpoints, into one scope, with no proxies connected.
func BenchmarkFullPush5000(b *testing.B) {
	r := newRig(b, 100*time.Millisecond, 10*time.Second)
	fill(b, r.m, 5000, 10)
	r.start(b)
	r.caches.Scope("") // scopes are generated on demand: one, as for proxies of one namespace
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.pusher.Push(model.Change{Full: true})
	}
}

// BenchmarkEDSConvergence100Clients: endpointChangeLatencies with 100 SotW clients (wildcard CDS
// + EDS for every cluster, as Envoy): change entering the control plane → each client has ACKed
// the new CLA, with the default 100 ms debounce. Reports P50, P99 and max.
func BenchmarkEDSConvergence100Clients(b *testing.B) {
	reportLatencies(b, endpointChangeLatencies(b, 100, false, 30*time.Second))
}

// BenchmarkFullPushScopes: 100 proxies (wildcard CDS) on 1000 ServiceEntries × 10 endpoints, in
// 1, 10 or 100 namespaces (scopes). Each iteration is a full push for every proxy, timed from
// its start until every proxy has received its new CDS. Generation is once per scope, sending
// once per proxy, as istiod's: reports the generations per push and the time per push.
func BenchmarkFullPushScopes(b *testing.B) {
	const services, proxies = 1000, 100
	for _, scopes := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("scopes=%d", scopes), func(b *testing.B) {
			r := newRigLimited(b, fleetLimits, 100*time.Millisecond, 10*time.Second)
			fill(b, r.m, services, 10)
			r.start(b)
			wait := cdsFleet(b, r.addr, proxies, scopes, nil)
			wait() // the initial fetch
			gens := r.generations
			before := gens()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r.pusher.Push(model.Change{Full: true})
				wait()
			}
			b.StopTimer()
			b.ReportMetric(float64(gens()-before)/float64(b.N), "generations/push")
			b.ReportMetric(float64(len(r.caches.Scopes())), "scopes")
		})
	}
}

// cdsFleet connects n proxies (wildcard CDS), proxy c in namespace ns-<c mod scopes>; onCDS
// (if not nil) sees every CDS response as it arrives. wait returns once n more CDS responses have
// arrived: one per proxy, per push.
//
// A benchmark whose fleet connects all at once runs its server with fleetLimits: istiod's
// new-stream rate would refuse most of it (what is measured is a connected fleet's pushes).
func cdsFleet(b *testing.B, addr string, n, scopes int, onCDS func(adsclient.Response)) (wait func()) {
	got := make(chan struct{}, n*4)
	connectCDSFleet(b, addr, n, scopes, func(_ int, resp adsclient.Response) {
		if onCDS != nil {
			onCDS(resp)
		}
		got <- struct{}{}
	})
	return func() {
		for c := 0; c < n; c++ {
			select {
			case <-got:
			case <-time.After(5 * time.Minute):
				b.Fatalf("only %d of %d proxies got CDS", c, n)
			}
		}
	}
}

// connectCDSFleet connects n proxies (wildcard CDS) to addr, proxy c in namespace
// ns-<c mod scopes>; onCDS sees every CDS response of each, with the proxy's number.
func connectCDSFleet(tb testing.TB, addr string, n, scopes int, onCDS func(proxy int, resp adsclient.Response)) {
	for c := 0; c < n; c++ {
		ns := fmt.Sprintf("ns-%d", c%scopes)
		cl, err := adsclient.Dial(context.Background(), addr, fmt.Sprintf("sidecar~10.0.%d.%d~p-%d.%s~%s.svc.cluster.local", c/256, c%256, c, ns, ns))
		require.NoError(tb, err)
		cl.OnResponse = func(resp adsclient.Response) {
			if resp.TypeURL == resourcev3.ClusterType {
				onCDS(c, resp)
			}
		}
		require.NoError(tb, cl.SetNames(resourcev3.ClusterType, nil))
		go cl.Run()
		tb.Cleanup(cl.Close)
	}
}

// generations sums the generations written into every scope's caches.
func (r *rig) generations() int {
	n := 0
	for _, sc := range r.caches.Scopes() {
		n += sc.Pushes()
	}
	return n
}

// BenchmarkScopedChange5000: 5000 ServiceEntries × 10 endpoints in 10 namespaces, each with a
// Sidecar "./*", and 100 proxies (10 per namespace). Each iteration adds a ServiceEntry in one
// namespace (a full push): only that namespace's scope is regenerated and only its 10 proxies
// get CDS. Reports the CDS responses and scope generations per change.
func BenchmarkScopedChange5000(b *testing.B) {
	const services, scopes, proxies = 5000, 10, 100
	r := newRigLimited(b, fleetLimits, 10*time.Millisecond, 10*time.Second)
	se := func(ns string, i int) {
		spec := &v1alpha3.ServiceEntry{Hosts: []string{fmt.Sprintf("se-%d.%s.test", i, ns)}, Resolution: v1alpha3.ServiceEntry_STATIC,
			Ports: []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080}}}
		for j := 0; j < 10; j++ {
			spec.Endpoints = append(spec.Endpoints, &v1alpha3.WorkloadEntry{Address: fmt.Sprintf("10.%d.%d.%d", 1+j, i/256%256, i%256)})
		}
		conv, _, err := model.ConvertServiceEntry(ns, fmt.Sprintf("se-%d", i), spec)
		require.NoError(b, err)
		r.pusher.Enqueue(r.m.SetServiceEntry(ns, fmt.Sprintf("se-%d", i), time.Unix(0, 0), conv))
	}
	for i := 0; i < services; i++ {
		se(fmt.Sprintf("ns-%d", i%scopes), i)
	}
	for s := 0; s < scopes; s++ {
		ns := fmt.Sprintf("ns-%d", s)
		r.m.SetSidecar(ns, "default", &model.Sidecar{Namespace: ns, Name: "default", Hosts: []string{"./*"}})
	}
	r.start(b)
	got := make([]chan struct{}, scopes)
	for s := range got {
		got[s] = make(chan struct{}, proxies)
	}
	for c := 0; c < proxies; c++ {
		s := c % scopes
		ns := fmt.Sprintf("ns-%d", s)
		cl, err := adsclient.Dial(b.Context(), r.addr, fmt.Sprintf("sidecar~10.0.0.%d~p-%d.%s~%s.svc.cluster.local", c, c, ns, ns))
		require.NoError(b, err)
		cl.OnResponse = func(resp adsclient.Response) {
			if resp.TypeURL == resourcev3.ClusterType {
				got[s] <- struct{}{}
			}
		}
		require.NoError(b, cl.SetNames(resourcev3.ClusterType, nil))
		go cl.Run()
		b.Cleanup(cl.Close)
	}
	wait := func(s, n int) {
		for c := 0; c < n; c++ {
			select {
			case <-got[s]:
			case <-time.After(60 * time.Second):
				b.Fatalf("scope %d: only %d of %d proxies got CDS", s, c, n)
			}
		}
	}
	for s := 0; s < scopes; s++ {
		wait(s, proxies/scopes) // initial fetch
	}
	gens := r.generations
	cds0, gens0 := testutil.ToFloat64(r.met.XDSPushes.WithLabelValues("cds")), gens()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := i % scopes
		se(fmt.Sprintf("ns-%d", s), services+i)
		wait(s, proxies/scopes)
	}
	b.StopTimer()
	b.ReportMetric((testutil.ToFloat64(r.met.XDSPushes.WithLabelValues("cds"))-cds0)/float64(b.N), "cds-responses/change")
	b.ReportMetric(float64(gens()-gens0)/float64(b.N), "generations/change")
}

// fleetLimits are a benchmark server's limits for a fleet that connects all at once: no
// new-stream admission, no stream cap.
var fleetLimits = Limits{NewStreamsPerSecond: -1, MaxStreams: -1}
