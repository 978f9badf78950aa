// Package observe watches the system under test while an experiment runs: pods and containers
// (restarts, OOM kills, readiness), the control plane's Prometheus metrics, its memory against its
// cgroup limit, and pprof profiles from its admin port — on a schedule, at phase boundaries and
// just before an OOM kill.
package observe

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"

	"github.com/meshchaos/meshchaos/results"
)

// DialContext dials a connection (e.g. into a network namespace).
type DialContext = func(ctx context.Context, network, addr string) (net.Conn, error)

// ProfileKind is a pprof profile type served under /debug/pprof/.
type ProfileKind string

// Profile kinds the profiler captures.
const (
	Heap      ProfileKind = "heap"
	Goroutine ProfileKind = "goroutine"
	CPU       ProfileKind = "cpu"
)

// Profiler captures pprof profiles from a process's admin port into a run directory's pprof/.
type Profiler struct {
	base   string
	runDir string
	client *http.Client
	// TopN is how many allocation sites a heap profile's summary keeps (default 10).
	TopN int
	// CPUSeconds is the CPU profile's duration (default 5).
	CPUSeconds int
	// Header is sent with every request (credentials a debug port asks for).
	Header http.Header

	mu   sync.Mutex
	seq  int
	took []results.Profile
}

// NewProfiler captures from baseURL (e.g. "http://127.0.0.1:15014", pprof under
// /debug/pprof/) into runDir/pprof. dial may be nil.
func NewProfiler(baseURL, runDir string, dial DialContext) *Profiler {
	tr := &http.Transport{}
	if dial != nil {
		tr.DialContext = dial
	}
	return &Profiler{
		base:   strings.TrimSuffix(baseURL, "/"),
		runDir: runDir,
		client: &http.Client{Transport: tr},
	}
}

// Profiles returns every profile captured so far, in capture order.
func (p *Profiler) Profiles() []results.Profile {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]results.Profile(nil), p.took...)
}

// Capture fetches one profile and saves it as pprof/<seq>-<kind>-<reason>.pb.gz. Heap profiles
// are parsed to summarise the top in-use allocation sites.
func (p *Profiler) Capture(ctx context.Context, kind ProfileKind, reason string) (results.Profile, error) {
	path := "/debug/pprof/" + string(kind)
	if kind == Heap {
		// Collect first: otherwise in-use figures date from the last GC, which on a growing heap
		// (GOGC=100) can be half of what is live now.
		path += "?gc=1"
	}
	timeout := 20 * time.Second
	if kind == CPU {
		secs := p.CPUSeconds
		if secs <= 0 {
			secs = 5
		}
		path = fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs)
		timeout += time.Duration(secs) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if kind == Heap {
		// Twice: sync.Pool keeps what it held at a GC in its victim cache until the next one, so
		// after one GC the in-use heap counts gRPC's and protobuf's pooled buffers, as many as
		// happened to be pooled. The reference's baseline heap spread over 0.9 MiB in seven
		// runs read after one GC, 0.3 MiB in eight after two. The first profile is only the
		// first collection.
		if _, err := p.fetch(ctx, kind, path); err != nil {
			return results.Profile{}, err
		}
	}
	at := time.Now().UTC()
	body, err := p.fetch(ctx, kind, path)
	if err != nil {
		return results.Profile{}, err
	}
	prof, err := profile.ParseData(body)
	if err != nil {
		return results.Profile{}, fmt.Errorf("capture %s profile from %s: not a pprof profile: %w", kind, p.base, err)
	}

	p.mu.Lock()
	p.seq++
	seq := p.seq
	p.mu.Unlock()
	rel := filepath.Join(results.PprofDir, fmt.Sprintf("%03d-%s-%s.pb.gz", seq, kind, fileSafe(reason)))
	if err := os.MkdirAll(filepath.Join(p.runDir, results.PprofDir), 0o755); err != nil {
		return results.Profile{}, fmt.Errorf("save %s profile: %w", kind, err)
	}
	// The handler already serves gzipped protobuf; keep its bytes as they came.
	if err := os.WriteFile(filepath.Join(p.runDir, rel), body, 0o644); err != nil {
		return results.Profile{}, fmt.Errorf("save %s profile: %w", kind, err)
	}
	out := results.Profile{File: rel, Kind: string(kind), Reason: reason, At: at}
	if kind == Heap {
		top := p.TopN
		if top <= 0 {
			top = 10
		}
		out.InUseBytes, out.Top = TopInUse(prof, top)
	}
	p.mu.Lock()
	p.took = append(p.took, out)
	p.mu.Unlock()
	return out, nil
}

// fetch GETs one profile and returns its bytes.
func (p *Profiler) fetch(ctx context.Context, kind ProfileKind, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	if err == nil {
		for k, v := range p.Header {
			req.Header[k] = v
		}
	}
	if err != nil {
		return nil, fmt.Errorf("capture %s profile: %w", kind, err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("capture %s profile from %s: %w", kind, p.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("capture %s profile from %s: %w", kind, p.base, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("capture %s profile from %s: %s: %s (is net/http/pprof served on the admin port?)", kind, p.base, resp.Status, bytes.TrimSpace(body[:min(len(body), 200)]))
	}
	return body, nil
}

// CaptureSet captures a heap and a goroutine profile (and a CPU profile when cpu is true) for one
// reason, e.g. a phase boundary. It returns what it captured and the first error.
func (p *Profiler) CaptureSet(ctx context.Context, reason string, cpu bool) ([]results.Profile, error) {
	kinds := []ProfileKind{Heap, Goroutine}
	if cpu {
		kinds = append(kinds, CPU)
	}
	var out []results.Profile
	var first error
	for _, k := range kinds {
		pr, err := p.Capture(ctx, k, reason)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		out = append(out, pr)
	}
	return out, first
}

// Every captures a heap and goroutine profile every interval until ctx ends. Failures (the
// process is restarting, say) are passed to onErr and do not stop the schedule.
func (p *Profiler) Every(ctx context.Context, interval time.Duration, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := p.CaptureSet(ctx, "scheduled", false); err != nil && onErr != nil && ctx.Err() == nil {
				onErr(err)
			}
		}
	}
}

// TopInUse sums a heap profile's inuse_space by the function that allocated (the leaf frame,
// "flat") and returns the total and the n heaviest sites.
func TopInUse(prof *profile.Profile, n int) (int64, []results.AllocSite) {
	idx := -1
	for i, st := range prof.SampleType {
		if st.Type == "inuse_space" {
			idx = i
		}
	}
	if idx < 0 {
		return 0, nil
	}
	var total int64
	byFunc := map[string]int64{}
	for _, s := range prof.Sample {
		v := s.Value[idx]
		total += v
		name := "(unknown)"
		if len(s.Location) > 0 && len(s.Location[0].Line) > 0 && s.Location[0].Line[0].Function != nil {
			// Line[0] is the innermost of inlined frames: the function that really allocated.
			name = s.Location[0].Line[0].Function.Name
		}
		byFunc[name] += v
	}
	sites := make([]results.AllocSite, 0, len(byFunc))
	for f, v := range byFunc {
		if v > 0 {
			sites = append(sites, results.AllocSite{Function: f, InUseBytes: v, Flat: true})
		}
	}
	sort.Slice(sites, func(i, j int) bool {
		if sites[i].InUseBytes != sites[j].InUseBytes {
			return sites[i].InUseBytes > sites[j].InUseBytes
		}
		return sites[i].Function < sites[j].Function
	})
	if len(sites) > n {
		sites = sites[:n]
	}
	return total, sites
}

func fileSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '-'
	}, s)
	if s == "" {
		return "profile"
	}
	return s
}
