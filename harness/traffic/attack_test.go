package traffic

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/meshchaos/meshchaos/results/respflags"
)

// faultServer answers 200, except inside injection windows measured from its first request,
// where it answers like a proxy would: 503 with a response flag. It counts what it injected.
type faultServer struct {
	windows []faultWindow
	mu      sync.Mutex
	first   time.Time
	flags   map[string]int64
	ok      int64
}

type faultWindow struct {
	from, to time.Duration
	flag     string
}

func (s *faultServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	if s.first.IsZero() {
		s.first = now
	}
	off := now.Sub(s.first)
	for _, win := range s.windows {
		if off >= win.from && off < win.to {
			s.flags[win.flag]++
			s.mu.Unlock()
			w.Header().Set(respflags.Header, win.flag)
			http.Error(w, "no cluster", http.StatusServiceUnavailable)
			return
		}
	}
	s.ok++
	s.mu.Unlock()
	w.Write([]byte("ok"))
}

// TestAttackMeasuresInjectedWindow: Vegeta against a local server injecting flagged 503s in known
// windows; the measured per-flag counts, codes and error window must match what was injected.
func TestAttackMeasuresInjectedWindow(t *testing.T) {
	srv := &faultServer{flags: map[string]int64{}, windows: []faultWindow{
		// Windows start mid-second so scheduling jitter cannot move them across a second boundary.
		{from: 2500 * time.Millisecond, to: 4500 * time.Millisecond, flag: respflags.NoClusterFound},
		{from: 6500 * time.Millisecond, to: 7500 * time.Millisecond, flag: respflags.NoHealthyUpstream},
	}}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	var dials atomic.Int64
	dialer := &net.Dialer{}
	results := filepath.Join(t.TempDir(), "traffic", "results.json")
	var progress atomic.Int64
	agg, err := Run(context.Background(), Options{
		Name:     "window",
		Targets:  []Target{{URL: ts.URL + "/"}},
		Rate:     200,
		Duration: 9 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		ResultsFile: results,
		Progress:    func(Progress) { progress.Add(1) },
	})
	require.NoError(t, err)
	assert.Positive(t, dials.Load(), "the dialer hook made the connections")
	assert.GreaterOrEqual(t, progress.Load(), int64(7), "progress reported about once a second")

	srv.mu.Lock()
	injected := srv.flags[respflags.NoClusterFound] + srv.flags[respflags.NoHealthyUpstream]
	first, ok := srv.first, srv.ok
	wantFlags := map[string]int64{respflags.NoClusterFound: srv.flags[respflags.NoClusterFound], respflags.NoHealthyUpstream: srv.flags[respflags.NoHealthyUpstream]}
	srv.mu.Unlock()

	chaos := first.Add(2500 * time.Millisecond)
	s := agg.Summary(map[string]time.Time{"chaos.injected": chaos})
	// Vegeta's pacer may drop a hit or two at the duration cutoff on a loaded machine.
	assert.InDelta(t, 1800, s.Requests, 10)
	assert.Equal(t, ok+injected, s.Requests, "every request the server answered was measured")
	assert.Equal(t, wantFlags, s.ByFlag)
	// The exact match is measured vs injected (above); these only say the windows were the
	// intended size, with room for Vegeta's pacer catching up on a loaded machine.
	assert.InDelta(t, 400, wantFlags[respflags.NoClusterFound], 20, "2 s of NC at 200 rps")
	assert.InDelta(t, 200, wantFlags[respflags.NoHealthyUpstream], 10, "1 s of UH at 200 rps")
	assert.Equal(t, map[string]int64{"200": ok, "503": injected}, s.ByCode)
	assert.Equal(t, injected, s.Errors)
	require.NotNil(t, s.ErrorWindow)
	assert.Equal(t, 2, s.ErrorWindow.FirstSecond)
	assert.Equal(t, 7, s.ErrorWindow.LastSecond)
	assert.Equal(t, 3, s.ErrorWindow.LongestRunSeconds, "seconds 2, 3, 4")
	assert.Equal(t, 2, s.ErrorWindow.LongestRunStart)
	assert.EqualValues(t, 6, s.ErrorWindowSeconds)
	rel := s.ErrorWindow.RelativeTo["chaos.injected"]
	// Request timestamps are send times; the server decides on receipt, a little later.
	assert.InDelta(t, 0, rel.StartAfterSeconds, 0.15, "errors begin when the fault does")
	assert.InDelta(t, 5.0, rel.EndAfterSeconds, 0.15, "and end when the second window closes")
	for _, sec := range s.Series {
		switch sec.T {
		case 0, 1, 5, 8:
			assert.Zero(t, sec.Errors, "second %d", sec.T)
		case 3:
			assert.Equal(t, sec.Requests, sec.Errors, "second 3 is wholly inside the NC window")
			assert.Equal(t, sec.Errors, sec.ByFlag[respflags.NoClusterFound])
		}
	}

	// The results file is Vegeta's JSON encoding: Vegeta's own decoder reads it back, and it
	// holds the same measurements.
	f, err := os.Open(results)
	require.NoError(t, err)
	defer f.Close()
	dec := vegeta.NewJSONDecoder(f)
	var m vegeta.Metrics
	for {
		var r vegeta.Result
		if dec.Decode(&r) != nil {
			break
		}
		m.Add(&r)
	}
	m.Close()
	assert.EqualValues(t, s.Requests, m.Requests)
	assert.EqualValues(t, ok, m.StatusCodes["200"])
	assert.EqualValues(t, injected, m.StatusCodes["503"])

	again, err := ReadResults(results, agg.start)
	require.NoError(t, err)
	s2 := again.Summary(map[string]time.Time{"chaos.injected": chaos})
	assert.Equal(t, s.ByFlag, s2.ByFlag)
	assert.Equal(t, s.ErrorWindow, s2.ErrorWindow)
	assert.Equal(t, s.LatencyMs, s2.LatencyMs)
}

func TestAttackStopsWithContext(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	begin := time.Now()
	agg, err := Run(ctx, Options{Targets: []Target{{URL: ts.URL}}, Rate: 50, Duration: time.Minute})
	require.NoError(t, err)
	assert.Less(t, time.Since(begin), 5*time.Second)
	assert.Positive(t, agg.Requests())
	assert.Less(t, agg.Requests(), int64(150), "a minute at 50 rps would be 3000")
}

func TestRunRejectsBadOptions(t *testing.T) {
	_, err := Run(context.Background(), Options{Rate: 1, Duration: time.Second})
	assert.ErrorContains(t, err, "no targets")
	_, err = Run(context.Background(), Options{Targets: []Target{{URL: "http://127.0.0.1:1"}}, Duration: time.Second})
	assert.ErrorContains(t, err, "rate")
}
