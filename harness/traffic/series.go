package traffic

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/results/respflags"
	"github.com/meshchaos/meshchaos/results/stats"
)

// IsError reports whether a Vegeta result counts as an error: no response (transport error,
// code 0), a status outside 200–399, or a failure reading the response.
func IsError(r *vegeta.Result) bool {
	return r.Code < 200 || r.Code >= 400 || r.Error != ""
}

// Flags returns the Envoy response flags a proxy put on the reply (respflags.Header). Envoy joins
// several flags with commas (e.g. "UF,URX"); each counts separately.
func Flags(r *vegeta.Result) []string {
	var out []string
	for _, v := range r.Headers.Values(respflags.Header) {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" && f != "-" {
				out = append(out, f)
			}
		}
	}
	return out
}

// Aggregator folds Vegeta results into per-second series and totals. Seconds count from Start;
// results may arrive in any order. It is safe for concurrent use, so a runner can snapshot a
// summary while the attack goes on. Percentiles are exact (nearest rank over every latency), which
// costs 8 bytes per request: 2.4 MB for five minutes at 1000 rps.
type Aggregator struct {
	mu       sync.Mutex
	start    time.Time
	rate     int
	seconds  map[int]*second
	all      []time.Duration
	requests int64
	errors   int64
	byCode   map[uint16]int64 // keyed by number: no string per request
	byFlag   map[string]int64
	firstErr time.Time
	lastErr  time.Time
}

type second struct {
	requests, errors int64
	byCode           map[uint16]int64
	byFlag           map[string]int64
	latencies        []time.Duration
}

// NewAggregator returns an aggregator whose second 0 begins at start.
func NewAggregator(start time.Time) *Aggregator {
	return &Aggregator{start: start, seconds: map[int]*second{}, byCode: map[uint16]int64{}, byFlag: map[string]int64{}}
}

// Add records one result.
func (a *Aggregator) Add(r *vegeta.Result) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := int(math.Floor(r.Timestamp.Sub(a.start).Seconds()))
	s := a.seconds[t]
	if s == nil {
		s = &second{byCode: map[uint16]int64{}, byFlag: map[string]int64{}}
		a.seconds[t] = s
	}
	s.requests++
	s.byCode[r.Code]++
	s.latencies = append(s.latencies, r.Latency)
	a.requests++
	a.byCode[r.Code]++
	a.all = append(a.all, r.Latency)
	for _, f := range Flags(r) {
		s.byFlag[f]++
		a.byFlag[f]++
	}
	if IsError(r) {
		s.errors++
		a.errors++
		if a.firstErr.IsZero() || r.Timestamp.Before(a.firstErr) {
			a.firstErr = r.Timestamp
		}
		if r.Timestamp.After(a.lastErr) {
			a.lastErr = r.Timestamp
		}
	}
}

// Requests and Errors are the running totals.
func (a *Aggregator) Requests() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.requests
}

// Errors is the running error count.
func (a *Aggregator) Errors() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.errors
}

// Start is the instant second 0 begins.
func (a *Aggregator) Start() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.start
}

func (a *Aggregator) begin(start time.Time, rate int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.start, a.rate = start, rate
}

// Summary returns the totals, the per-second series (every second from the first to the last
// result, empty seconds included so gaps show) and the error window. events names instants
// (e.g. "chaos.injected") to measure the error window from.
func (a *Aggregator) Summary(events map[string]time.Time) results.Traffic {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := results.Traffic{
		StartedAt: a.start,
		Rate:      float64(a.rate),
		Requests:  a.requests,
		Errors:    a.errors,
		ByCode:    codeMap(a.byCode),
		ByFlag:    copyMap(a.byFlag),
		LatencyMs: latency(a.all),
		Series:    []results.Second{},
	}
	if a.requests > 0 {
		t.ErrorRate = float64(a.errors) / float64(a.requests)
	}
	if len(a.seconds) == 0 {
		return t
	}
	first, last := math.MaxInt, math.MinInt
	for k := range a.seconds {
		first, last = min(first, k), max(last, k)
	}
	var errSeconds []int
	for k := first; k <= last; k++ {
		sec := results.Second{T: k}
		if s := a.seconds[k]; s != nil {
			sec.Requests, sec.Errors = s.requests, s.errors
			sec.ByCode, sec.LatencyMs = codeMap(s.byCode), latency(s.latencies)
			if len(s.byFlag) > 0 {
				sec.ByFlag = copyMap(s.byFlag)
			}
			if s.errors > 0 {
				errSeconds = append(errSeconds, k)
			}
		}
		t.Series = append(t.Series, sec)
	}
	if w := Window(errSeconds); w != nil {
		t.ErrorWindowSeconds = float64(w.LastSecond - w.FirstSecond + 1)
		for name, at := range events {
			if w.RelativeTo == nil {
				w.RelativeTo = map[string]results.RelativeWindow{}
			}
			w.RelativeTo[name] = results.RelativeWindow{
				StartAfterSeconds: roundMs(a.firstErr.Sub(at)),
				EndAfterSeconds:   roundMs(a.lastErr.Sub(at)),
			}
		}
		t.ErrorWindow = w
	}
	return t
}

// Window finds the error window in a sorted list of seconds that had errors: the first and last
// of them and the longest run of consecutive ones. Nil when there are none.
func Window(errSeconds []int) *results.ErrorWindow {
	if len(errSeconds) == 0 {
		return nil
	}
	w := &results.ErrorWindow{FirstSecond: errSeconds[0], LastSecond: errSeconds[len(errSeconds)-1]}
	runStart, runLen := errSeconds[0], 1
	w.LongestRunStart, w.LongestRunSeconds = runStart, 1
	for i := 1; i < len(errSeconds); i++ {
		if errSeconds[i] == errSeconds[i-1]+1 {
			runLen++
		} else {
			runStart, runLen = errSeconds[i], 1
		}
		if runLen > w.LongestRunSeconds {
			w.LongestRunStart, w.LongestRunSeconds = runStart, runLen
		}
	}
	return w
}

// Quantiles are the P50/P90/P99/max of ds in milliseconds (any durations, not only request
// latencies), by stats.Percentile's nearest rank.
func Quantiles(ds []time.Duration) results.Latency { return latency(ds) }

func latency(ds []time.Duration) results.Latency {
	if len(ds) == 0 {
		return results.Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	return results.Latency{P50: ms(stats.Percentile(s, 0.5)), P90: ms(stats.Percentile(s, 0.9)), P99: ms(stats.Percentile(s, 0.99)), Max: ms(s[len(s)-1])}
}

func roundMs(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

func codeMap(m map[uint16]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[strconv.Itoa(int(k))] = v
	}
	return out
}

func copyMap(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
