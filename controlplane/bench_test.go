package controlplane_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/meshchaos/meshchaos/controlplane"
	"github.com/meshchaos/meshchaos/controlplane/internal/heapstat"
	"github.com/meshchaos/meshchaos/controlplane/regress"
)

// startAndWait starts a gated control plane and waits until it serves.
func startAndWait(b *testing.B, c *testCluster, sw ...regress.Switch) (*controlplane.ControlPlane, time.Duration) {
	cp := startCP(b, c.cfg, true, sw...)
	select {
	case <-cp.Gate.Done():
	case <-time.After(120 * time.Second):
		b.Fatal("gate did not open within 120 s")
	}
	_, forced, _, at := cp.Gate.State()
	if forced {
		b.Fatal("gate opened by max wait, not by sync")
	}
	return cp, at.Sub(cp.StartedAt())
}

// BenchmarkHeapPerEndpoint: live heap of a control plane (informer caches, model, generated
// resources, xDS caches) serving N ServiceEntries × 10 endpoints from a real kube-apiserver, for
// N = 500, 1000, 2500, 5000 (plain) and 500, 1000, 2500 (quadratic-scope). Reports bytes per
// endpoint and logs the growth exponent of heap against N.
func BenchmarkHeapPerEndpoint(b *testing.B) {
	c := startCluster(b)
	const eps = 10
	created := 0
	heaps := map[string]map[int]float64{}
	type variant struct {
		name string
		max  int
		sw   []regress.Switch
	}
	variants := []variant{{"plain", 5000, nil}, {"quadratic-scope", 2500, []regress.Switch{regress.QuadraticScope}}}
	sizes := []int{500, 1000, 2500, 5000}
	for _, n := range sizes {
		c.createSEs(b, "bulk", created, n, eps)
		created = n
		for _, tc := range variants {
			if n > tc.max {
				continue
			}
			if heaps[tc.name] == nil {
				heaps[tc.name] = map[int]float64{}
			}
			b.Run(tc.name+"/SE="+itoa(n), func(b *testing.B) {
				var perEP float64
				for i := 0; i < b.N; i++ {
					before := heapstat.Live()
					cp, _ := startAndWait(b, c, tc.sw...)
					// One scope's clusters, listeners and routes, as the first connected proxy
					// would create (scopes are generated on demand).
					cp.Caches.Scope("")
					hosts, endpoints := cp.Model.Stats()
					if hosts < n || endpoints < n*eps {
						b.Fatalf("model has %d hosts / %d endpoints, want %d / %d", hosts, endpoints, n, n*eps)
					}
					after := heapstat.Live()
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
					cp.Stop()
				}
				b.ReportMetric(perEP, "B/endpoint")
				b.ReportMetric(heaps[tc.name][n]/(1<<20), "heap-MiB")
			})
		}
	}
	for _, tc := range variants {
		lo, hi := sizes[0], tc.max
		if heaps[tc.name][lo] > 0 && heaps[tc.name][hi] > 0 {
			exp := math.Log(heaps[tc.name][hi]/heaps[tc.name][lo]) / math.Log(float64(hi)/float64(lo))
			b.Logf("%s: heap growth exponent %d→%d SEs: %.2f", tc.name, lo, hi, exp)
		}
	}
}

// BenchmarkGatedStartToServe5000: Start → sync gate open (informers synced, every event in the
// model, initial full push in the caches) with 5000 ServiceEntries × 10 endpoints.
func BenchmarkGatedStartToServe5000(b *testing.B) {
	c := startCluster(b)
	c.createSEs(b, "bulk", 0, 5000, 10)
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		cp, d := startAndWait(b, c)
		total += d
		b.StopTimer()
		cp.Stop()
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/start-to-serve")
}

func itoa(n int) string {
	const digits = "0123456789"
	if n == 0 {
		return "0"
	}
	var out []byte
	for n > 0 {
		out = append([]byte{digits[n%10]}, out...)
		n /= 10
	}
	return string(out)
}
