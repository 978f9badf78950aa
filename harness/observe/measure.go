package observe

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
)

// Role says whose behaviour a measurement follows: the control plane's restarts are not an
// app's restarts.
type Role string

// RoleHarness is the harness's own process.
const RoleHarness Role = "harness"

// RoleControlPlane is the control plane under test; any other role (e.g. "app", "gateway") is a
// workload.
const RoleControlPlane Role = "control-plane"

// Sink is what a running measurement reports to: the run's timeline and log, and the run's
// background work (which the run waits for before it writes its summary).
type Sink interface {
	RecordEvent(e results.Event)
	Logf(format string, args ...any)
	// Background runs fn until the measurement window ends (fn's ctx is then cancelled).
	Background(fn func(ctx context.Context))
}

// Measurement is one thing the harness measures during a run.
type Measurement interface {
	// Name and Role key the measurement in the summary.
	Name() string
	Role() Role
	// Start begins measuring; loops run through sink.Background, and anything else it starts
	// ends with ctx.
	Start(ctx context.Context, sink Sink) error
	// Gather writes what was measured so far into s, including its own health.
	Gather(s *results.Summary)
}

// PhaseHook is a measurement that also acts at phase boundaries (a profile after every phase).
type PhaseHook interface {
	PhaseEnded(ctx context.Context, phase string, sink Sink)
}

// cpStats returns s's control-plane stats, created on first use.
func cpStats(s *results.Summary) *results.ControlPlaneStats {
	if s.ControlPlaneStats == nil {
		s.ControlPlaneStats = &results.ControlPlaneStats{}
	}
	return s.ControlPlaneStats
}

// status sets the measurement's health entry in s (one per name and role).
// RecordStatus records a measurement's status in the summary, as observe's own measurements do
// (for measurements of an experiment's own, outside this package).
func RecordStatus(s *results.Summary, m results.Measurement) { status(s, m) }

func status(s *results.Summary, m results.Measurement) {
	for i := range s.Measurements {
		if s.Measurements[i].Name == m.Name && s.Measurements[i].Role == m.Role {
			s.Measurements[i] = m
			return
		}
	}
	s.Measurements = append(s.Measurements, m)
}

// Pods watches the pods of one role: restarts, OOM kills and readiness, on the timeline and in
// the summary (the control plane's stats, or the role's workload stats).
type Pods struct {
	Client              kubernetes.Interface
	Namespace, Selector string
	As                  Role
	w                   *PodWatcher
}

// Name implements Measurement.
func (p *Pods) Name() string { return "pods" }

// Role implements Measurement.
func (p *Pods) Role() Role { return p.As }

// Start implements Measurement: the informer's cache is synced when it returns.
func (p *Pods) Start(ctx context.Context, sink Sink) error {
	p.w = NewPodWatcher(p.Client, p.Namespace, p.Selector, sink.RecordEvent)
	if err := p.w.Start(ctx); err != nil {
		return fmt.Errorf("watch %s pods (%s in %s): %w", p.As, p.Selector, p.Namespace, err)
	}
	return nil
}

// Gather implements Measurement.
func (p *Pods) Gather(s *results.Summary) {
	if p.w == nil {
		status(s, results.Measurement{Name: p.Name(), Role: string(p.As), Error: "never started"})
		return
	}
	st := p.w.Stats()
	if p.As == RoleControlPlane {
		cp := cpStats(s)
		cp.Restarts, cp.OOMKills = st.Restarts, max(cp.OOMKills, st.OOMKills)
	} else {
		if s.Workloads == nil {
			s.Workloads = map[string]*results.WorkloadStats{}
		}
		s.Workloads[string(p.As)] = &results.WorkloadStats{Restarts: st.Restarts, OOMKills: st.OOMKills, Ready: st.Ready, NotReady: st.NotReady}
	}
	status(s, results.Measurement{Name: p.Name(), Role: string(p.As), OK: true})
}

// ControlPlaneMetrics scrapes the control plane's Prometheus endpoint and reads the measures the
// harness needs through the control plane's own metric names (subject.ControlPlane.Metrics):
// pushes by kind, heap. A measure that was never scraped stays absent, so a check on it gives
// verdict error instead of passing on a zero.
type ControlPlaneMetrics struct {
	URL      string
	Dial     DialContext
	Interval time.Duration
	Measures map[subject.Measure]subject.Metric

	s       *Scraper
	mu      sync.Mutex
	lastErr error
}

// Name implements Measurement.
func (m *ControlPlaneMetrics) Name() string { return "metrics" }

// Role implements Measurement.
func (m *ControlPlaneMetrics) Role() Role { return RoleControlPlane }

// Start implements Measurement.
func (m *ControlPlaneMetrics) Start(ctx context.Context, sink Sink) error {
	keep := map[string]bool{}
	for _, x := range m.Measures {
		keep[x.Name] = true
	}
	m.s = NewScraper(m.URL, m.Dial)
	m.s.Keep = func(name string) bool { return keep[name] }
	iv := m.Interval
	if iv <= 0 {
		iv = 500 * time.Millisecond
	}
	sink.Background(func(ctx context.Context) {
		m.s.Run(ctx, iv, func(err error) {
			m.mu.Lock()
			first := m.lastErr == nil
			m.lastErr = err
			m.mu.Unlock()
			if first {
				sink.Logf("scrape %s: %v (further failures are counted in the summary)", m.URL, err)
			}
		})
	})
	return nil
}

// Gather implements Measurement.
func (m *ControlPlaneMetrics) Gather(s *results.Summary) {
	st := results.Measurement{Name: m.Name(), Role: string(RoleControlPlane)}
	if m.s == nil {
		st.Error = "never started"
		status(s, st)
		return
	}
	series := m.s.Series()
	st.Samples, st.Failures = m.s.Scrapes(), m.s.Failures()
	m.mu.Lock()
	if m.lastErr != nil {
		st.Error = m.lastErr.Error()
	}
	m.mu.Unlock()
	st.OK = st.Samples > 0
	status(s, st)
	if !st.OK {
		return
	}
	cp := cpStats(s)
	cp.Metrics = series
	full, fullOK := m.increase(series, subject.FullPushes)
	eds, edsOK := m.increase(series, subject.EDSPushes)
	if fullOK && edsOK {
		cp.Pushes = &results.Pushes{Full: int64(full), EDS: int64(eds)}
		cp.PushRate = pushRate(series, m.Measures[subject.FullPushes], m.Measures[subject.EDSPushes])
	}
	if ref, ok := m.Measures[subject.PushTime]; ok {
		if h, ok := HistogramIncrease(series, ref); ok {
			cp.PushTime = h
		}
	}
	if cpu, ok := m.increase(series, subject.CPUSeconds); ok {
		cp.CPUSeconds = &cpu
	}
	if n, ok := m.increase(series, subject.XDSRejects); ok {
		rejects := int64(n)
		cp.XDSRejects = &rejects
	}
	if from, to, ok := phaseWindow(s, "chaos"); ok {
		w := Window(series, from, to)
		if ref, ok := m.Measures[subject.PushTime]; ok {
			if h, ok := HistogramIncrease(w, ref); ok {
				cp.ChaosPushTime = h
			}
		}
		if cpu, ok := m.increase(w, subject.CPUSeconds); ok {
			cp.ChaosCPUSeconds = &cpu
		}
		full, fullOK := m.increase(w, subject.FullPushes)
		eds, edsOK := m.increase(w, subject.EDSPushes)
		if fullOK && edsOK {
			cp.ChaosPushes = &results.Pushes{Full: int64(full), EDS: int64(eds)}
		}
		// A gauge's peak counts only scrapes inside the phase, not the baseline Window put first.
		inside := make([]results.Series, 0, len(w))
		for _, sr := range w {
			sr.Samples = sr.Samples[1:]
			inside = append(inside, sr)
		}
		if heap, ok := m.peak(inside, subject.HeapInUse); ok {
			peak := int64(heap)
			cp.ChaosPeakHeapBytes = &peak
		}
	}
	if heap, ok := m.peak(series, subject.HeapInUse); ok {
		cp.PeakHeapBytes = max(cp.PeakHeapBytes, int64(heap))
	}
}

// phaseWindow is when the named phase ran; false when it did not finish.
func phaseWindow(s *results.Summary, name string) (from, to time.Time, ok bool) {
	for _, p := range s.Phases {
		if p.Name == name && p.FinishedAt != nil {
			return p.StartedAt, *p.FinishedAt, true
		}
	}
	return time.Time{}, time.Time{}, false
}

// increase is how much a counter measure grew over series (summed over the matching ones; the
// whole run, or a phase after Window), and whether it was scraped at all.
func (m *ControlPlaneMetrics) increase(series []results.Series, measure subject.Measure) (float64, bool) {
	ref, ok := m.Measures[measure]
	if !ok {
		return 0, false
	}
	// A labelled counter is exported from its first increment on: a series that appears after
	// the first scrape started from zero in between.
	first := firstScrape(series)
	var total float64
	found := false
	for _, sr := range series {
		if ref.Matches(sr.Name, sr.Labels) && len(sr.Samples) > 0 {
			found = true
			total += seriesIncrease(sr, first)
		}
	}
	return total, found
}

func (m *ControlPlaneMetrics) peak(series []results.Series, measure subject.Measure) (float64, bool) {
	ref, ok := m.Measures[measure]
	if !ok {
		return 0, false
	}
	var peak float64
	found := false
	for _, sr := range series {
		if ref.Matches(sr.Name, sr.Labels) {
			for _, x := range sr.Samples {
				peak, found = max(peak, x.Value), true
			}
		}
	}
	return peak, found
}

// Last is the latest value of a gauge measure and whether it was scraped.
func Last(series []results.Series, ref subject.Metric) (float64, bool) {
	for _, sr := range series {
		if ref.Matches(sr.Name, sr.Labels) && len(sr.Samples) > 0 {
			return sr.Samples[len(sr.Samples)-1].Value, true
		}
	}
	return 0, false
}

// CounterIncrease is how much a counter grew over its samples. A drop means the process
// restarted and the counter began again from zero, so the new value is all increase.
func CounterIncrease(samples []results.Sample) float64 {
	var total float64
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1].Value, samples[i].Value
		if cur >= prev {
			total += cur - prev
		} else {
			total += cur
		}
	}
	return total
}

// Profiles captures pprof profiles (heap, goroutine, and CPU when asked) at every phase
// boundary, and a heap profile whenever Memory says the process nears its limit.
type Profiles struct {
	BaseURL string
	// Header is sent with every request (credentials a debug port asks for).
	Header http.Header
	RunDir string
	Dial   DialContext
	CPU    bool
	p      *Profiler
}

// Name implements Measurement.
func (p *Profiles) Name() string { return "pprof" }

// Role implements Measurement.
func (p *Profiles) Role() Role { return RoleControlPlane }

// Start implements Measurement.
func (p *Profiles) Start(ctx context.Context, sink Sink) error {
	p.p = NewProfiler(p.BaseURL, p.RunDir, p.Dial)
	p.p.Header = p.Header
	return nil
}

// PhaseEnded implements PhaseHook.
func (p *Profiles) PhaseEnded(ctx context.Context, phase string, sink Sink) {
	if _, err := p.p.CaptureSet(ctx, "after "+phase, p.CPU); err != nil {
		sink.Logf("profile after %s: %v", phase, err)
	}
}

// Capture takes one profile now (e.g. the heap before an OOM kill) and returns it.
func (p *Profiles) Capture(ctx context.Context, kind ProfileKind, reason string) (results.Profile, error) {
	if p.p == nil {
		return results.Profile{}, fmt.Errorf("profiles not started")
	}
	return p.p.Capture(ctx, kind, reason)
}

// Gather implements Measurement.
func (p *Profiles) Gather(s *results.Summary) {
	st := results.Measurement{Name: p.Name(), Role: string(RoleControlPlane)}
	if p.p == nil {
		st.Error = "never started"
		status(s, st)
		return
	}
	cp := cpStats(s)
	cp.Profiles = p.p.Profiles()
	for _, x := range cp.Profiles {
		cp.PeakHeapBytes = max(cp.PeakHeapBytes, x.InUseBytes)
	}
	st.Samples, st.OK = len(cp.Profiles), len(cp.Profiles) > 0
	if !st.OK {
		st.Error = "no profile could be captured"
	}
	status(s, st)
}

// Memory follows the control plane's memory from its cgroup into the memory series, counts the
// kernel's OOM kills in that cgroup, and when the working set crosses Fraction of the limit
// records an event and calls BeforeOOM (a heap profile, before the kernel strikes).
type Memory struct {
	Reader    MemoryReader
	Fraction  float64
	BeforeOOM func(ctx context.Context)

	mu      sync.Mutex
	samples []results.Sample
	limit   int64
	last    time.Time
	oom     int64
	reads   int
	err     error
}

// EventMemoryHigh is the timeline kind of a memory watch crossing its fraction.
const EventMemoryHigh = "cp.memory-high"

// Name implements Measurement.
func (m *Memory) Name() string { return "memory" }

// Role implements Measurement.
func (m *Memory) Role() Role { return RoleControlPlane }

// Start implements Measurement.
func (m *Memory) Start(ctx context.Context, sink Sink) error {
	oomBase, _ := readOOMKills(m.Reader)
	trig := &OOMTrigger{
		Memory:   m.Reader,
		Fraction: m.Fraction,
		Fire: func(ctx context.Context, u MemoryUsage) {
			if m.BeforeOOM != nil {
				m.BeforeOOM(ctx)
			}
			sink.RecordEvent(results.Event{At: time.Now().UTC(), Kind: EventMemoryHigh,
				Detail: fmt.Sprintf("%.1f MiB of %.1f MiB (%.0f %%)", float64(u.WorkingSet)/(1<<20), float64(u.Limit)/(1<<20), 100*u.Fraction())})
		},
		Sample: func(u MemoryUsage) {
			n, ok := readOOMKills(m.Reader)
			m.mu.Lock()
			defer m.mu.Unlock()
			m.reads++
			if ok {
				m.oom = max(m.oom, n-oomBase)
			}
			// Four samples a second are plenty for the chart; the trigger polls faster.
			if u.At.Sub(m.last) >= 250*time.Millisecond {
				m.last = u.At
				m.samples = append(m.samples, results.Sample{At: u.At.UTC(), Value: float64(u.WorkingSet)})
			}
			if u.Limit > 0 {
				m.limit = u.Limit
			}
		},
	}
	sink.Background(func(ctx context.Context) {
		if err := trig.Run(ctx); err != nil {
			m.mu.Lock()
			m.err = err
			m.mu.Unlock()
			sink.Logf("memory watch: %v", err)
		}
	})
	return nil
}

// Gather implements Measurement.
func (m *Memory) Gather(s *results.Summary) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := results.Measurement{Name: m.Name(), Role: string(RoleControlPlane), Samples: m.reads, OK: m.reads > 0}
	if m.err != nil {
		st.Error = m.err.Error()
	}
	status(s, st)
	if !st.OK {
		return
	}
	cp := cpStats(s)
	cp.Memory = append([]results.Sample(nil), m.samples...)
	cp.MemoryLimit = m.limit
	cp.OOMKills = max(cp.OOMKills, int(m.oom))
}
