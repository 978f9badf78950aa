// Package traffic drives constant-rate HTTP load with Vegeta (as a library) at a gateway or a
// sidecar, and measures it: per-second series of requests, status codes, Envoy response flags
// (respflags.Header) and latency quantiles, totals, and the error window relative to injected
// events. Raw results are kept in Vegeta's JSON result encoding, so `vegeta report` and
// `vegeta plot` read them.
package traffic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// DialContext dials a connection; the local substrate passes one that enters a pod's or a node's
// network namespace, so the load comes from inside the cluster network.
type DialContext = func(ctx context.Context, network, addr string) (net.Conn, error)

// Target is one request the attack sends, round-robin with the others.
type Target struct {
	Method string
	URL    string
	// Header is sent with the request; a "Host" entry sets the Host header (gateway routing).
	Header http.Header
	Body   []byte
}

// Options configure an attack.
type Options struct {
	// Name labels the attack in Vegeta's results.
	Name    string
	Targets []Target
	// Rate is requests per second, held constant (Vegeta's constant pacer).
	Rate int
	// Duration of the attack; the context can end it earlier.
	Duration time.Duration
	// Timeout per request (default 5 s).
	Timeout time.Duration
	// DialContext, when set, makes every connection (default: net.Dialer).
	DialContext DialContext
	// ResultsFile, when set, receives every result in Vegeta's JSON encoding (one per line).
	ResultsFile string
	// Progress, when set, is called about once per second with the running totals.
	Progress func(p Progress)
}

// Progress is a running view of an attack.
type Progress struct {
	Elapsed, Duration time.Duration
	Requests, Errors  int64
}

// Attack is one constant-rate attack. Its Aggregator exists from the moment Run starts, so
// callers can read running totals and snapshot summaries while it goes on.
type Attack struct {
	o      Options
	client *http.Client
	agg    *Aggregator
}

// New validates o and prepares an attack.
func New(o Options) (*Attack, error) {
	if len(o.Targets) == 0 {
		return nil, errors.New("traffic: no targets")
	}
	if o.Rate <= 0 {
		return nil, fmt.Errorf("traffic: rate %d must be positive", o.Rate)
	}
	if o.Duration <= 0 {
		return nil, fmt.Errorf("traffic: duration %s must be positive", o.Duration)
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	dial := o.DialContext
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	client := &http.Client{
		Timeout: o.Timeout,
		Transport: &http.Transport{
			DialContext:         dial,
			MaxIdleConnsPerHost: 1000,
			IdleConnTimeout:     30 * time.Second,
		},
		// A redirect is an answer worth recording, not following.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Attack{o: o, client: client, agg: NewAggregator(time.Time{})}, nil
}

// Run is New followed by Attack.Run.
func Run(ctx context.Context, o Options) (*Aggregator, error) {
	a, err := New(o)
	if err != nil {
		return nil, err
	}
	return a.Run(ctx)
}

// Aggregator is the running measurement; its Start is zero until Run begins.
func (a *Attack) Aggregator() *Aggregator { return a.agg }

// Run attacks until Duration passes or ctx ends, then returns what it measured. Stopping early
// through ctx is not an error: the results so far are returned.
func (a *Attack) Run(ctx context.Context) (*Aggregator, error) {
	o := a.o
	var vts []vegeta.Target
	for _, t := range o.Targets {
		m := t.Method
		if m == "" {
			m = http.MethodGet
		}
		vts = append(vts, vegeta.Target{Method: m, URL: t.URL, Header: t.Header, Body: t.Body})
	}
	atk := vegeta.NewAttacker(vegeta.Client(a.client), vegeta.MaxBody(0))

	var enc vegeta.Encoder
	if o.ResultsFile != "" {
		if err := os.MkdirAll(filepath.Dir(o.ResultsFile), 0o755); err != nil {
			return nil, fmt.Errorf("traffic: results file: %w", err)
		}
		f, err := os.Create(o.ResultsFile)
		if err != nil {
			return nil, fmt.Errorf("traffic: results file: %w", err)
		}
		defer f.Close()
		enc = vegeta.NewJSONEncoder(f)
	}

	start := time.Now()
	agg := a.agg
	agg.begin(start, o.Rate)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			atk.Stop()
		case <-done:
		}
	}()
	if o.Progress != nil {
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					o.Progress(Progress{Elapsed: time.Since(start), Duration: o.Duration, Requests: agg.Requests(), Errors: agg.Errors()})
				}
			}
		}()
	}
	var encErr error
	for r := range atk.Attack(vegeta.NewStaticTargeter(vts...), vegeta.ConstantPacer{Freq: o.Rate, Per: time.Second}, o.Duration, o.Name) {
		r.Body = nil
		agg.Add(r)
		if enc != nil && encErr == nil {
			encErr = enc.Encode(r)
		}
	}
	if encErr != nil {
		return agg, fmt.Errorf("traffic: write results: %w", encErr)
	}
	return agg, nil
}

// ReadResults folds a Vegeta results file (any encoding Vegeta writes: JSON, CSV, gob) into an
// aggregator whose second 0 is start (zero: the first result's time).
func ReadResults(path string, start time.Time) (*Aggregator, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	defer f.Close()
	dec := vegeta.DecoderFor(f)
	if dec == nil {
		return nil, fmt.Errorf("read results: %s is not in a Vegeta results encoding", path)
	}
	var rs []vegeta.Result
	for {
		var r vegeta.Result
		if err := dec.Decode(&r); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("read results %s: %w", path, err)
		}
		rs = append(rs, r)
	}
	if start.IsZero() && len(rs) > 0 {
		start = rs[0].Timestamp
		for _, r := range rs {
			if r.Timestamp.Before(start) {
				start = r.Timestamp
			}
		}
	}
	agg := NewAggregator(start)
	for i := range rs {
		agg.Add(&rs[i])
	}
	return agg, nil
}
