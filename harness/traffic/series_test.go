package traffic

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/results/respflags"
)

func TestWindow(t *testing.T) {
	assert.Nil(t, Window(nil))
	assert.Equal(t, &results.ErrorWindow{FirstSecond: 5, LastSecond: 5, LongestRunSeconds: 1, LongestRunStart: 5}, Window([]int{5}))
	assert.Equal(t, &results.ErrorWindow{FirstSecond: 1, LastSecond: 12, LongestRunSeconds: 3, LongestRunStart: 7},
		Window([]int{1, 2, 4, 7, 8, 9, 12}))
	// The first of equally long runs wins.
	assert.Equal(t, &results.ErrorWindow{FirstSecond: 0, LastSecond: 4, LongestRunSeconds: 2, LongestRunStart: 0},
		Window([]int{0, 1, 3, 4}))
}

func TestQuantilesAreNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted: Quantiles sorts a copy
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, results.Latency{P50: 50, P90: 90, P99: 99, Max: 100}, Quantiles(ds))
	assert.Equal(t, 100*time.Millisecond, ds[0], "the caller's slice is left as it was")
	assert.Equal(t, results.Latency{}, Quantiles(nil))
	assert.Equal(t, results.Latency{P50: 7, P90: 7, P99: 7, Max: 7}, Quantiles([]time.Duration{7 * time.Millisecond}))
}

func TestFlags(t *testing.T) {
	h := http.Header{}
	assert.Empty(t, Flags(&vegeta.Result{Headers: h}))
	h.Set(respflags.Header, "UF,URX")
	h.Add(respflags.Header, "NC")
	assert.Equal(t, []string{"UF", "URX", "NC"}, Flags(&vegeta.Result{Headers: h}))
	h.Set(respflags.Header, "-") // Envoy's "no flag"
	assert.Empty(t, Flags(&vegeta.Result{Headers: h}))
}

func TestIsError(t *testing.T) {
	assert.True(t, IsError(&vegeta.Result{Code: 0, Error: "connection refused"}))
	assert.True(t, IsError(&vegeta.Result{Code: 503}))
	assert.True(t, IsError(&vegeta.Result{Code: 404}))
	assert.False(t, IsError(&vegeta.Result{Code: 200}))
	assert.False(t, IsError(&vegeta.Result{Code: 302}))
	assert.True(t, IsError(&vegeta.Result{Code: 200, Error: "unexpected EOF"}))
}

func TestAggregatorSeries(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	agg := NewAggregator(start)
	add := func(off time.Duration, code uint16, lat time.Duration, flag string) {
		r := &vegeta.Result{Timestamp: start.Add(off), Code: code, Latency: lat, Headers: http.Header{}}
		if flag != "" {
			r.Headers.Set(respflags.Header, flag)
		}
		agg.Add(r)
	}
	// second 0: 4 ok; second 1: nothing; second 2: 2 NC 503 + 2 ok; second 3: 1 UH 503 + 1 ok.
	for i := 0; i < 4; i++ {
		add(time.Duration(i)*200*time.Millisecond, 200, time.Duration(i+1)*time.Millisecond, "")
	}
	add(2100*time.Millisecond, 503, time.Millisecond, "NC")
	add(2200*time.Millisecond, 200, 10*time.Millisecond, "")
	add(2300*time.Millisecond, 503, time.Millisecond, "NC")
	add(2900*time.Millisecond, 200, 20*time.Millisecond, "")
	add(3500*time.Millisecond, 503, 2*time.Millisecond, "UH")
	add(3600*time.Millisecond, 200, 3*time.Millisecond, "")

	injected := start.Add(2 * time.Second)
	s := agg.Summary(map[string]time.Time{"chaos.injected": injected})
	assert.EqualValues(t, 10, s.Requests)
	assert.EqualValues(t, 3, s.Errors)
	assert.InDelta(t, 0.3, s.ErrorRate, 1e-9)
	assert.Equal(t, map[string]int64{"200": 7, "503": 3}, s.ByCode)
	assert.Equal(t, map[string]int64{"NC": 2, "UH": 1}, s.ByFlag)
	require.Len(t, s.Series, 4, "empty second 1 is kept so gaps show")
	assert.Equal(t, 1, s.Series[1].T)
	assert.Zero(t, s.Series[1].Requests)
	assert.EqualValues(t, 4, s.Series[2].Requests)
	assert.EqualValues(t, 2, s.Series[2].Errors)
	assert.Equal(t, map[string]int64{"NC": 2}, s.Series[2].ByFlag)
	assert.Equal(t, results.Latency{P50: 2, P90: 4, P99: 4, Max: 4}, s.Series[0].LatencyMs)
	assert.Equal(t, results.Latency{P50: 1, P90: 20, P99: 20, Max: 20}, s.Series[2].LatencyMs)
	assert.EqualValues(t, 2, s.ErrorWindowSeconds)
	require.NotNil(t, s.ErrorWindow)
	assert.Equal(t, 2, s.ErrorWindow.FirstSecond)
	assert.Equal(t, 3, s.ErrorWindow.LastSecond)
	assert.Equal(t, 2, s.ErrorWindow.LongestRunSeconds)
	assert.Equal(t, results.RelativeWindow{StartAfterSeconds: 0.1, EndAfterSeconds: 1.5}, s.ErrorWindow.RelativeTo["chaos.injected"])
	assert.Equal(t, results.Latency{P50: 2, P90: 10, P99: 20, Max: 20}, s.LatencyMs)
}

func TestAggregatorNoErrors(t *testing.T) {
	start := time.Now()
	agg := NewAggregator(start)
	agg.Add(&vegeta.Result{Timestamp: start, Code: 200, Latency: time.Millisecond})
	s := agg.Summary(map[string]time.Time{"x": start})
	assert.Nil(t, s.ErrorWindow)
	assert.Zero(t, s.ErrorWindowSeconds)
	assert.Zero(t, s.ErrorRate)
}
