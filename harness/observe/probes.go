package observe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/internal/ads"
	"github.com/meshchaos/meshchaos/results"
)

// Probe is one active probe: Run does the thing once and returns a value it read (0 if none)
// or why it failed. The prober times it.
type Probe struct {
	Name string
	Run  func(ctx context.Context) (float64, error)
	// Timeout bounds one run (default 2 s): a probe that hangs is a failed probe.
	Timeout time.Duration
}

// Prober runs probes side by side at a fixed pace and keeps every sample as a time series
// (results.Probes): what a component actually served, second by second. Each sample runs in its
// own goroutine, so a probe that hangs until its timeout does not thin out the series: the
// pace is the same whether the target answers or not. Samples from elsewhere (e.g. how long a
// config change took to be served) join the series with Add.
type Prober struct {
	Probes []Probe
	// Every is the pace (default 500 ms).
	Every time.Duration
	// As is the role the probes follow.
	As Role

	mu      sync.Mutex
	started time.Time
	series  map[string][]results.ProbeSample
	window  *results.Window
	wg      sync.WaitGroup
}

// Name implements Measurement.
func (p *Prober) Name() string { return "probes" }

// Role implements Measurement.
func (p *Prober) Role() Role { return p.As }

// Start implements Measurement.
func (p *Prober) Start(ctx context.Context, sink Sink) error {
	every := p.Every
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	p.mu.Lock()
	p.started = time.Now()
	if p.series == nil {
		p.series = map[string][]results.ProbeSample{}
	}
	p.mu.Unlock()
	sink.Background(func(ctx context.Context) {
		t := time.NewTicker(every)
		defer t.Stop()
		defer p.wg.Wait()
		for {
			for _, pr := range p.Probes {
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					p.runOne(ctx, pr)
				}()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return nil
}

func (p *Prober) runOne(ctx context.Context, pr Probe) {
	timeout := pr.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	v, err := pr.Run(rctx)
	cancel()
	if ctx.Err() != nil {
		return // the run ended, not the target
	}
	s := results.ProbeSample{OK: err == nil, Ms: float64(time.Since(start).Microseconds()) / 1000, Value: v}
	if err != nil {
		s.Error = err.Error()
	}
	p.Add(pr.Name, start, s)
}

// Add records a sample of series name that began at t.
func (p *Prober) Add(name string, t time.Time, s results.ProbeSample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.series == nil {
		p.series = map[string][]results.ProbeSample{}
	}
	s.T = t.Sub(p.started).Seconds()
	p.series[name] = append(p.series[name], s)
}

// MarkStart and MarkEnd mark the fault's window on the series.
func (p *Prober) MarkStart(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.window = &results.Window{Start: t.Sub(p.started).Seconds()}
}

// MarkEnd closes the window MarkStart opened.
func (p *Prober) MarkEnd(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.window != nil {
		p.window.End = t.Sub(p.started).Seconds()
	}
}

// Gather implements Measurement: the series sorted by time.
func (p *Prober) Gather(s *results.Summary) {
	st := results.Measurement{Name: p.Name(), Role: string(p.As)}
	out := p.Snapshot()
	if out == nil {
		st.Error = "never started"
		status(s, st)
		return
	}
	for _, ss := range out.Series {
		st.Samples += len(ss)
	}
	st.OK = st.Samples > 0
	s.Probes = out
	status(s, st)
}

// Snapshot returns the series so far, sorted by time (nil before Start).
func (p *Prober) Snapshot() *results.Probes {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started.IsZero() {
		return nil
	}
	out := &results.Probes{StartedAt: p.started.UTC(), Series: map[string][]results.ProbeSample{}}
	if p.window != nil {
		w := *p.window
		out.Window = &w
	}
	for name, ss := range p.series {
		cp := append([]results.ProbeSample(nil), ss...)
		sort.Slice(cp, func(i, j int) bool { return cp[i].T < cp[j].T })
		out.Series[name] = cp
	}
	return out
}

// XDSProbe is a probe of an xDS server as a new proxy sees it: a new connection, a new ADS
// stream, a fresh subscription to typeURL (wildcard) under a node id of its own, and the first
// response. Its value is the number of resources received. Its node ids are of namespace ns
// ("" default). opts are added after the probe's own dial options (plaintext): transport
// credentials among them replace plaintext, e.g. oracle.Credentials' for a secure port, with a
// token of namespace ns.
func XDSProbe(addr, ns string, dial DialContext, typeURL string, opts ...grpc.DialOption) func(ctx context.Context) (float64, error) {
	if ns == "" {
		ns = "default"
	}
	var n int64
	var mu sync.Mutex
	return func(ctx context.Context) (float64, error) {
		mu.Lock()
		n++
		id := fmt.Sprintf("sidecar~10.0.0.1~xds-probe-%d.%s~%s.svc.cluster.local", n, ns, ns)
		mu.Unlock()
		conn, err := ads.Dial("passthrough:///"+addr, append([]grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return dial(ctx, "tcp", a) })}, opts...)...)
		if err != nil {
			return 0, fmt.Errorf("xds probe: %w", err)
		}
		defer conn.Close()
		s, err := ads.Open(ctx, conn, ads.Options{Node: &corev3.Node{Id: id, Cluster: "xds-probe." + ns}, Inline: true})
		if err != nil {
			return 0, fmt.Errorf("xds probe: %w", err)
		}
		defer s.Close()
		if err := s.Subscribe(typeURL); err != nil {
			return 0, fmt.Errorf("xds probe: subscribe: %w", err)
		}
		resp, err := s.Recv()
		if err != nil {
			// gRPC may end the stream at the deadline a moment before ctx says so.
			if errors.Is(ctx.Err(), context.DeadlineExceeded) || grpcstatus.Code(err) == codes.DeadlineExceeded {
				return 0, fmt.Errorf("xds probe: no response within the deadline")
			}
			return 0, fmt.Errorf("xds probe: %w", err)
		}
		return float64(len(resp.GetResources())), nil
	}
}

// CPURateProbe reads a cgroup's CPU use in CPUs since the previous call.
func CPURateProbe(g *cgroup.Group) func(context.Context) (float64, error) {
	var mu sync.Mutex
	var last time.Duration
	var at time.Time
	return func(context.Context) (float64, error) {
		mu.Lock()
		defer mu.Unlock()
		u, err := g.CPUUsage()
		if err != nil {
			return 0, err
		}
		now := time.Now()
		prevU, prevT := last, at
		last, at = u, now
		if prevT.IsZero() {
			return 0, errors.New("first reading")
		}
		return (u - prevU).Seconds() / now.Sub(prevT).Seconds(), nil
	}
}

// ThrottleProbe reads the share of CFS periods a cgroup was throttled in since the previous call.
func ThrottleProbe(g *cgroup.Group) func(context.Context) (float64, error) {
	var mu sync.Mutex
	var last *cgroup.CPUStat
	return func(context.Context) (float64, error) {
		mu.Lock()
		defer mu.Unlock()
		st, err := g.CPUStat()
		if err != nil {
			return 0, err
		}
		prev := last
		last = &st
		if prev == nil || st.Periods == prev.Periods {
			return 0, errors.New("no period since the previous reading")
		}
		return float64(st.ThrottledPeriods-prev.ThrottledPeriods) / float64(st.Periods-prev.Periods), nil
	}
}
