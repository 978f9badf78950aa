// Package soak is the soak experiment's own code below its registration (experiments/soak.go):
// the recorder that follows the control plane's and the harness's memory and goroutines over a
// long run, and the trends fitted to them (results.Soak holds what it records). The rule
// (docs/DESIGN.md): an experiment's measurement that no other experiment uses lives in
// experiments/NAME/.
package soak

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/results"
)

// Control-plane metric names the soak reads: the Go runtime's and the process collector's,
// which every Go control plane built on the Prometheus client exports.
const (
	metricHeapAlloc    = "go_memstats_heap_alloc_bytes"
	metricGoroutines   = "go_goroutines"
	metricProcessStart = "process_start_time_seconds"
)

// Recorder follows the memory and goroutines of the control plane (through its metrics) and
// of the harness's own process over a long run, keeps the faults the experiment reports, and
// fits the trends when gathered into the summary (results.Soak).
type Recorder struct {
	// MetricsURL is the control plane's Prometheus endpoint; Dial reaches it.
	MetricsURL string
	Dial       observe.DialContext
	// Interval is the sampling period (default 10 s).
	Interval time.Duration
	// FaultEvery is the fault cycle's period, for the report.
	FaultEvery time.Duration

	scraper *observe.Scraper
	mu      sync.Mutex
	soak    results.Soak
	reads   int
	fails   int
	lastErr error
}

// Name implements observe.Measurement.
func (r *Recorder) Name() string { return "soak" }

// Role implements observe.Measurement.
func (r *Recorder) Role() observe.Role { return observe.RoleHarness }

// Start implements observe.Measurement: a sample now and then every Interval.
func (r *Recorder) Start(ctx context.Context, sink observe.Sink) error {
	r.scraper = observe.NewScraper(r.MetricsURL, r.Dial)
	r.scraper.Keep = func(name string) bool {
		return name == metricHeapAlloc || name == metricGoroutines || name == metricProcessStart
	}
	r.soak.FaultEverySeconds = r.FaultEvery.Seconds()
	iv := r.Interval
	if iv <= 0 {
		iv = 10 * time.Second
	}
	r.add(&r.soak.Samples, r.sample(ctx, false))
	sink.Background(func(ctx context.Context) {
		t := time.NewTicker(iv)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.add(&r.soak.Samples, r.sample(ctx, false))
			}
		}
	})
	return nil
}

// Settle takes a sample of what is live: the control plane is made to collect first (the caller
// passes collect, e.g. a heap profile with ?gc=1, which runs a GC in the control plane), and the
// harness runs a GC itself. The trends are fitted to these samples. It also keeps the traffic's
// last minute (the steady state before the next fault).
func (r *Recorder) Settle(ctx context.Context, collect func(ctx context.Context) error, traffic *results.Traffic) results.SoakSample {
	var collectErr error
	if collect != nil {
		collectErr = collect(ctx)
	}
	x := r.sample(ctx, true)
	x.RecentRequests, x.RecentErrors = results.RecentTraffic(traffic, 60)
	if collectErr != nil {
		// Without the collection the control plane's heap holds garbage: not a settled figure.
		x.ControlPlaneOK = false
	}
	r.add(&r.soak.Settled, x)
	return x
}

// Fault records a fault of the cycle.
func (r *Recorder) Fault(f results.SoakFault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.soak.Faults = append(r.soak.Faults, f)
}

// Goroutines records the comparison of the goroutine profiles of the control plane and of the
// harness (either may be nil).
func (r *Recorder) Goroutines(cp, harness *results.GoroutineDelta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.soak.ControlPlaneGoroutines, r.soak.HarnessGoroutines = cp, harness
}

func (r *Recorder) add(to *[]results.SoakSample, x results.SoakSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*to = append(*to, x)
}

// sample reads both processes now.
func (r *Recorder) sample(ctx context.Context, gc bool) results.SoakSample {
	x := results.SoakSample{At: time.Now().UTC()}
	heap, g := observe.OwnMemory(gc)
	x.HarnessHeapBytes, x.HarnessGoroutines = heap, g
	// The harness's live heap on every sample: a GC here costs milliseconds, and the trend
	// fitted to a sample every Interval is one a short soak can judge.
	x.HarnessLiveBytes = heap
	if !gc {
		x.HarnessLiveBytes, _ = observe.OwnMemory(true)
	}
	err := r.scraper.Scrape(ctx)
	if err == nil {
		h, okH := r.scraper.Last(metricHeapAlloc, nil)
		n, okG := r.scraper.Last(metricGoroutines, nil)
		st, okS := r.scraper.Last(metricProcessStart, nil)
		if okH && okG && okS {
			x.ControlPlaneOK = true
			x.ControlPlaneHeapBytes, x.ControlPlaneGoroutines, x.ControlPlaneStart = int64(h), int(n), st
		} else {
			err = fmt.Errorf("%s lacks %s, %s or %s", r.MetricsURL, metricHeapAlloc, metricGoroutines, metricProcessStart)
		}
	}
	r.mu.Lock()
	r.reads++
	if err != nil {
		r.fails++
		r.lastErr = err
	}
	r.mu.Unlock()
	return x
}

// Gather implements observe.Measurement: the samples, the faults, and the trends fitted to the settled
// samples (the control plane's by process lifetime).
func (r *Recorder) Gather(s *results.Summary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := results.Measurement{Name: r.Name(), Role: string(r.Role()), Samples: r.reads, Failures: r.fails, OK: r.reads > r.fails}
	if r.lastErr != nil {
		st.Error = r.lastErr.Error()
	}
	observe.RecordStatus(s, st)
	out := r.soak
	out.Faults = append([]results.SoakFault(nil), r.soak.Faults...)
	out.Samples = append([]results.SoakSample(nil), r.soak.Samples...)
	out.Settled = append([]results.SoakSample(nil), r.soak.Settled...)
	out.ControlPlaneHeap, out.HarnessHeap = Trends(out.Samples, out.Settled)
	s.Soak = &out
}

// Trends fits the live heaps against time: the control plane's over the settled samples
// where it was read, one segment per process lifetime; the harness's over the periodic and
// settled samples' live heap from the first settled sample on (before it the run is still
// starting: traffic ramps up, the steady period), one segment. nil where too few points remain.
func Trends(samples, settled []results.SoakSample) (cp, harness *results.Growth) {
	if len(settled) == 0 {
		return nil, nil
	}
	t0 := settled[0].At
	var cx, cy, cseg, hx, hy, hseg []float64
	for _, x := range settled {
		if x.ControlPlaneOK {
			cx, cy, cseg = append(cx, x.At.Sub(t0).Hours()), append(cy, float64(x.ControlPlaneHeapBytes)), append(cseg, x.ControlPlaneStart)
		}
	}
	for _, x := range append(append([]results.SoakSample(nil), samples...), settled...) {
		if x.At.Before(t0) || x.HarnessLiveBytes == 0 {
			continue
		}
		hx, hy, hseg = append(hx, x.At.Sub(t0).Hours()), append(hy, float64(x.HarnessLiveBytes)), append(hseg, 0)
	}
	if t, err := results.FitGrowth(cx, cy, cseg); err == nil {
		cp = &t
	}
	if t, err := results.FitGrowth(hx, hy, hseg); err == nil {
		harness = &t
	}
	return cp, harness
}
