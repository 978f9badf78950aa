package controlplane_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshchaos/meshchaos/controlplane"
	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/internal/heapstat"
	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/harness/mesh"
)

// startAndWait starts a gated control plane and waits until it serves.
func startAndWait(b *testing.B, c *testCluster, sw ...regress.Switch) (*controlplane.ControlPlane, time.Duration) {
	cp := startCP(b, c.cfg, true, sw...)
	select {
	case <-cp.Gate.Done():
	case <-time.After(300 * time.Second):
		b.Fatal("gate did not open within 300 s")
	}
	_, forced, _, at := cp.Gate.State()
	if forced {
		b.Fatal("gate opened by max wait, not by sync")
	}
	return cp, at.Sub(cp.StartedAt())
}

// progressf prints at once (a benchmark's b.Logf waits for the end of the benchmark): creating
// 50 000 ServiceEntries takes minutes.
func progressf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

// grow brings the "bulk" namespace to n ServiceEntries × eps endpoints through the harness's own
// bulk-create path (mesh.ServiceEntries.Create), from the created ones on.
func (c *testCluster) grow(b *testing.B, created, n, eps int) {
	if n <= created {
		return
	}
	g := mesh.ServiceEntries{Count: n - created, From: created, Namespace: "bulk", Endpoints: eps, Workers: 32}
	if _, err := g.Create(context.Background(), c.cfg, nil, progressf); err != nil {
		b.Fatalf("create ServiceEntries %d..%d: %v", created, n, err)
	}
}

// scaleSizes are the plain control plane's sizes (ServiceEntries × 10 endpoints); the issue's
// targets are at 5000 and 50 000. MESHCHAOS_BENCH_MAX_SE lowers the largest for a quick run.
func scaleSizes() []int {
	sizes := []int{500, 1000, 5000, 50000}
	if v, err := strconv.Atoi(os.Getenv("MESHCHAOS_BENCH_MAX_SE")); err == nil && v > 0 {
		var out []int
		for _, s := range sizes {
			if s <= v {
				out = append(out, s)
			}
		}
		return out
	}
	return sizes
}

// selfCPU is this process's (the control plane's) user + system CPU time so far.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time kube-apiserver and etcd have used so far.
func (c *testCluster) serverCPU(b *testing.B) time.Duration {
	etcd, api, err := c.server.CPU()
	if err != nil {
		b.Fatal(err)
	}
	return etcd + api
}

// loadavg is the 1, 5 and 15 min load averages.
func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:min(3, len(f))], " ")
}

// median is the middle of ds (the upper middle of an even count).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// growth is the exponent k of heap ∝ n^k between two sizes.
func growth(heaps map[int]float64, lo, hi int) float64 {
	return math.Log(heaps[hi]/heaps[lo]) / math.Log(float64(hi)/float64(lo))
}

// BenchmarkHeapPerEndpoint: live heap of a control plane (informer caches, model, generated
// resources, xDS caches) serving N ServiceEntries × 10 endpoints from a real kube-apiserver, for
// N = 500, 1000, 5000, 50 000 (plain) and 500, 1000 (quadratic-scope, which must still blow up:
// ≈ n², so never run large). Reports bytes per endpoint per size, and the growth exponent of heap
// against N (plain 5000→50 000, quadratic-scope 500→1000) as sub-benchmarks ".../growth".
//
// The same control planes give the gated start-to-serve time (Start → sync gate open: informers
// synced, every event in the model, the initial full push in the caches), reported as
// s/start-to-gate, and s/start-to-serve: until a proxy that connects the moment the gate opens
// holds its first complete CDS (every cluster: its scope generated on demand and sent). The times
// reported are the medians of the -benchtime Nx starts at each size.
func BenchmarkHeapPerEndpoint(b *testing.B) {
	c := startCluster(b)
	const eps = 10
	created := 0
	heaps := map[string]map[int]float64{"plain": {}, "quadratic-scope": {}}
	type variant struct {
		name string
		max  int
		sw   []regress.Switch
	}
	variants := []variant{{"plain", 1 << 30, nil}, {"quadratic-scope", 1000, []regress.Switch{regress.QuadraticScope}}}
	sizes := scaleSizes()
	for _, n := range sizes {
		c.grow(b, created, n, eps)
		created = n
		for _, tc := range variants {
			if n > tc.max {
				continue
			}
			b.Run(tc.name+"/SE="+strconv.Itoa(n), func(b *testing.B) {
				var perEP float64
				var gates, serves, cpCPUs, apiCPUs []time.Duration
				for i := 0; i < b.N; i++ {
					progressf("%s/SE=%d: starting a control plane", tc.name, n)
					before := heapstat.Live()
					self0, api0 := selfCPU(b), c.serverCPU(b)
					cp, gate := startAndWait(b, c, tc.sw...)
					// One scope's clusters, listeners and routes, as the first connected proxy
					// creates them (scopes are generated on demand).
					serve, proxy := firstCompleteCDS(b, cp, n)
					cpCPU, apiCPU := selfCPU(b)-self0, c.serverCPU(b)-api0
					gates, serves = append(gates, gate), append(serves, serve)
					cpCPUs, apiCPUs = append(cpCPUs, cpCPU), append(apiCPUs, apiCPU)
					hosts, endpoints := cp.Model.Stats()
					if hosts < n || endpoints < n*eps {
						b.Fatalf("model has %d hosts / %d endpoints, want %d / %d", hosts, endpoints, n, n*eps)
					}
					// With the proxy still connected: its scope is dropped when its last
					// stream ends.
					after := heapstat.Live()
					if len(cp.Caches.Scopes()) != 1 {
						b.Fatalf("%d scopes held while measuring, want the proxy's one", len(cp.Caches.Scopes()))
					}
					heap := float64(after) - float64(before)
					perEP = heap / float64(endpoints)
					heaps[tc.name][n] = heap
					if dir := os.Getenv("MESHCHAOS_HEAP_PROFILE_DIR"); dir != "" {
						f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%s-%d.pb.gz", tc.name, n)))
						if err == nil {
							_ = pprof.Lookup("heap").WriteTo(f, 0)
							f.Close()
						}
					}
					proxy.Close()
					cp.Stop()
					progressf("%s/SE=%d: %.0f B/endpoint, gate after %s, first complete CDS after %s (CPU: control plane %s, apiserver+etcd %s; load %s)",
						tc.name, n, perEP, gate, serve, cpCPU, apiCPU, loadavg())
				}
				b.ReportMetric(perEP, "B/endpoint")
				b.ReportMetric(heaps[tc.name][n]/(1<<20), "heap-MiB")
				if tc.sw == nil {
					// Medians of the starts (-benchtime Nx): one start's time swings with the
					// apiserver's CPU (its GC) and the machine's load.
					b.ReportMetric(median(gates).Seconds(), "s/start-to-gate")
					b.ReportMetric(median(serves).Seconds(), "s/start-to-serve")
					// Where the time went: on a shared machine the wall time depends on the
					// load; the CPU used does not.
					b.ReportMetric(median(cpCPUs).Seconds(), "cp-cpu-s/start-to-serve")
					b.ReportMetric(median(apiCPUs).Seconds(), "apiserver-cpu-s/start-to-serve")
				}
			})
		}
	}
	for _, tc := range variants {
		lo, hi := 5000, 50000
		if tc.sw != nil {
			lo, hi = 500, tc.max
		}
		if heaps[tc.name][lo] > 0 && heaps[tc.name][hi] > 0 {
			exp := growth(heaps[tc.name], lo, hi)
			b.Run(tc.name+"/growth", func(b *testing.B) {
				b.ReportMetric(exp, "exponent")
			})
			b.Logf("%s: heap growth exponent %d→%d SEs: %.2f", tc.name, lo, hi, exp)
		}
	}
}

// firstCompleteCDS connects one Envoy-like proxy (wildcard CDS) the moment the gate is open and
// returns the time from the control plane's start until it holds every one of the n clusters,
// and the proxy, still connected (the caller closes it).
func firstCompleteCDS(b *testing.B, cp *controlplane.ControlPlane, n int) (time.Duration, *adsclient.Client) {
	b.Helper()
	done := make(chan time.Time, 1)
	cl, err := adsclient.Dial(context.Background(), cp.XDSAddr(), "sidecar~10.0.0.1~bench-0.bulk~bulk.svc.cluster.local")
	if err != nil {
		b.Fatalf("dial the control plane: %v", err)
	}
	cl.OnResponse = func(r adsclient.Response) {
		if r.TypeURL == resourcev3.ClusterType && len(r.Resources) >= n {
			select {
			case done <- r.At:
			default:
			}
		}
	}
	if err := cl.SetNames(resourcev3.ClusterType, nil); err != nil {
		b.Fatalf("subscribe to CDS: %v", err)
	}
	go cl.Run()
	select {
	case at := <-done:
		return at.Sub(cp.StartedAt()), cl
	case <-time.After(120 * time.Second):
		cl.Close()
		b.Fatalf("no CDS with %d clusters within 120 s", n)
		return 0, nil
	}
}
