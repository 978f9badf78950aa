package observe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/meshchaos/meshchaos/harness/traffic"
	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/workloads/grpcclient"
)

// GRPCAttack names the proxyless gRPC clients' RPCs in the summary's attacks.
const GRPCAttack = "grpc"

// GRPCClients follows the proxyless gRPC clients' pod (workloads/grpcclient) through its
// /stats and puts its RPCs from the measurement's start on into the summary's attacks under
// GRPCAttack: per second, the successful and the failed ones by gRPC status code, and the
// longest time a channel had no usable config. The pod makes its RPCs on its own from its
// start; the measurement only reads them.
type GRPCClients struct {
	// URL is the pod's HTTP base URL.
	URL  string
	Dial DialContext
	// Every is how often /stats is read (default 1 s): a read at the end would come after
	// the cluster is gone.
	Every time.Duration

	mu           sync.Mutex
	start        time.Time
	last         *grpcclient.Stats
	reads, fails int
	lastErr      error
}

// Name implements Measurement.
func (g *GRPCClients) Name() string { return "rpcs" }

// Role implements Measurement.
func (g *GRPCClients) Role() Role { return "grpc-client" }

// Start implements Measurement.
func (g *GRPCClients) Start(ctx context.Context, sink Sink) error {
	if g.Every <= 0 {
		g.Every = time.Second
	}
	g.mu.Lock()
	g.start = time.Now()
	g.mu.Unlock()
	sink.Background(func(ctx context.Context) {
		client := &http.Client{Transport: &http.Transport{DialContext: g.Dial}, Timeout: 2 * time.Second}
		defer client.CloseIdleConnections()
		t := time.NewTicker(g.Every)
		defer t.Stop()
		for {
			st, err := readGRPCStats(ctx, client, g.URL+"/stats")
			g.mu.Lock()
			switch {
			case err == nil:
				g.reads++
				g.last = &st
			case ctx.Err() == nil:
				g.fails++
				g.lastErr = err
			}
			g.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return nil
}

func readGRPCStats(ctx context.Context, c *http.Client, url string) (grpcclient.Stats, error) {
	var st grpcclient.Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("%s: %w", url, err)
	}
	return st, nil
}

// Gather implements Measurement.
func (g *GRPCClients) Gather(s *results.Summary) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := results.Measurement{Name: g.Name(), Role: string(g.Role()), OK: g.reads > 0, Samples: g.reads, Failures: g.fails}
	if g.lastErr != nil {
		st.Error = g.lastErr.Error()
	}
	status(s, st)
	if g.last == nil {
		return
	}
	t := GRPCTraffic(*g.last, g.start)
	if t.Requests == 0 {
		return
	}
	if s.Attacks == nil {
		s.Attacks = map[string]*results.Traffic{}
	}
	s.Attacks[GRPCAttack] = &t
}

// GRPCTraffic is the gRPC clients' RPCs made from from on as traffic: totals, codes (gRPC
// status code names; OK for the successes), the per-second series from from's second, the
// error window and the longest span without a usable config (clipped to [from, st.Now]).
func GRPCTraffic(st grpcclient.Stats, from time.Time) results.Traffic {
	start := from.Truncate(time.Second)
	t := results.Traffic{StartedAt: start, ByCode: map[string]int64{}, ByFlag: map[string]int64{}, Series: []results.Second{}}
	var errSeconds []int
	for _, sec := range st.Seconds {
		if sec.Unix < start.Unix() {
			continue
		}
		out := results.Second{T: int(sec.Unix - start.Unix()), Requests: sec.OK, ByCode: map[string]int64{}}
		if sec.OK > 0 {
			out.ByCode["OK"] = sec.OK
		}
		for code, n := range sec.Failed {
			out.Requests += n
			out.Errors += n
			out.ByCode[code] += n
		}
		for code, n := range out.ByCode {
			t.ByCode[code] += n
		}
		t.Requests += out.Requests
		t.Errors += out.Errors
		if out.Errors > 0 {
			errSeconds = append(errSeconds, out.T)
		}
		t.Series = append(t.Series, out)
	}
	sort.Ints(errSeconds)
	if t.Requests > 0 {
		t.ErrorRate = float64(t.Errors) / float64(t.Requests)
	}
	if w := traffic.Window(errSeconds); w != nil {
		t.ErrorWindowSeconds = float64(w.LastSecond - w.FirstSecond + 1)
		t.ErrorWindow = w
	}
	longest := 0.0
	for _, sp := range st.NoConfig {
		end := sp.End
		if end.IsZero() {
			end = st.Now
		}
		if end.Before(from) {
			continue
		}
		longest = max(longest, end.Sub(maxTime(sp.Start, from)).Seconds())
	}
	t.NoConfigSeconds = &longest
	return t
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
