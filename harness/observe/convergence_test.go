package observe

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/workloads/adsload"
)

func TestConvergeMatchesEachChangeWithEachProxysReceipt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	synced := at(0)
	// The endpoint flaps 1 → 0 → 1 → 0 after the baseline.
	changes := []apiChange{{at(1000), 0}, {at(3000), 1}, {at(5000), 0}}
	r := func(ms, endpoints int) adsload.Receipt { return adsload.Receipt{At: at(ms), Endpoints: endpoints} }
	clients := [][]adsload.Receipt{
		// Fast: every change within 100 ms.
		{r(-500, 1), r(1100, 0), r(3050, 1), r(5020, 0)},
		// Received the first change before the harness saw it (early), missed the last one.
		{r(-500, 1), r(990, 0), r(3400, 1)},
		// Missed the 0 (coalesced): its next 0 belongs to the third change, not to the first.
		{r(-500, 1), r(5200, 0)},
	}
	c := converge("default/flap", synced, changes, clients, 100*time.Millisecond)
	assert.Equal(t, 3, c.Proxies)
	require.Len(t, c.Changes, 3)
	assert.Equal(t, []int{2, 2, 2}, []int{c.Changes[0].Received, c.Changes[1].Received, c.Changes[2].Received})
	assert.Equal(t, 3, c.Missed, "proxy 2 missed the last change, proxy 3 the first two")
	assert.Equal(t, 1, c.Early)
	assert.Equal(t, 100.0, c.Changes[0].MaxMs)
	assert.Equal(t, 400.0, c.Changes[1].MaxMs)
	assert.Equal(t, 200.0, c.Changes[2].MaxMs)
	assert.EqualValues(t, 6, c.Latency.Count)
	assert.Equal(t, 400.0, c.Latency.MaxMs)
	require.NotNil(t, c.Changes[0].FirstReceivedAt)
	assert.Equal(t, at(990), *c.Changes[0].FirstReceivedAt, "received before the harness saw it")
	assert.Equal(t, at(3050), *c.Changes[1].FirstReceivedAt)
	assert.Equal(t, 50.0, c.Latency.P50Ms)
}

// TestConvergeCoalescesAChangeUndoneWithinTheDebounce: the endpoint goes 1 → 0 → 1 with the
// return 46 ms after the drop (a flap stopped right after a NotReady): a control plane merges both
// in its debounce window, so no proxy sees them and none is missed; a drop undone 2 s later (a
// control plane that pushed nothing) is missed by every proxy.
func TestConvergeCoalescesAChangeUndoneWithinTheDebounce(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := func(ms, endpoints int) adsload.Receipt { return adsload.Receipt{At: at(ms), Endpoints: endpoints} }
	changes := []apiChange{{at(1000), 0}, {at(3000), 1}, {at(5000), 0}, {at(5046), 1}}
	clients := [][]adsload.Receipt{
		{r(-500, 1), r(1100, 0), r(3100, 1)},
		{r(-500, 1), r(1150, 0), r(3120, 1)},
	}
	c := converge("default/flap", at(0), changes, clients, 100*time.Millisecond)
	assert.Zero(t, c.Missed)
	assert.Equal(t, 2, c.Coalesced)
	assert.Equal(t, []bool{false, false, true, true}, []bool{c.Changes[0].Coalesced, c.Changes[1].Coalesced, c.Changes[2].Coalesced, c.Changes[3].Coalesced})
	assert.EqualValues(t, 4, c.Latency.Count)

	// Undone after 2 s: not a debounce; every proxy missed both.
	changes[3].at = at(7000)
	c = converge("default/flap", at(0), changes, clients, 100*time.Millisecond)
	assert.Equal(t, 4, c.Missed)
	assert.Zero(t, c.Coalesced)
}

func TestHistogramIncreaseAndQuantiles(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	series := func(le string, from, to float64) results.Series {
		return results.Series{Name: "push_time_bucket", Labels: map[string]string{"le": le, "type": "eds"},
			Samples: []results.Sample{{At: t0, Value: from}, {At: t0.Add(time.Second), Value: to}}}
	}
	h, ok := HistogramIncrease([]results.Series{
		series("0.01", 5, 55), series("0.1", 5, 95), series("1", 5, 105), series("+Inf", 5, 105),
	}, subject.Metric{Name: "push_time"})
	require.True(t, ok)
	assert.EqualValues(t, 100, h.Count)
	assert.Equal(t, []results.Bucket{{LeMs: 10, Count: 50}, {LeMs: 100, Count: 90}, {LeMs: 1000, Count: 100}, {LeMs: -1, Count: 100}}, h.Buckets)
	assert.InDelta(t, 10, h.P50Ms, 1e-9, "the 50th of 100 is the top of the first bucket")
	assert.InDelta(t, 100+900*0.9, h.P99Ms, 1e-9, "linear within (100, 1000]")
	_, ok = HistogramIncrease(nil, subject.Metric{Name: "push_time"})
	assert.False(t, ok, "never scraped is absent, not zero")
	assert.Equal(t, 0.0, BucketQuantile(0.5, nil))
	assert.Equal(t, 1000.0, BucketQuantile(0.99, []results.Bucket{{LeMs: 1000, Count: 1}, {LeMs: -1, Count: 10}}), "in +Inf: the highest finite bound")
	assert.False(t, math.IsNaN(BucketQuantile(0.5, []results.Bucket{{LeMs: 10, Count: 0}, {LeMs: -1, Count: 0}})))
}

func TestExactHistogram(t *testing.T) {
	h := ExactHistogram([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond, 200 * time.Millisecond}, []float64{2, 100})
	assert.EqualValues(t, 4, h.Count)
	assert.Equal(t, 2.0, h.P50Ms)
	assert.Equal(t, 200.0, h.P99Ms)
	assert.Equal(t, 200.0, h.MaxMs)
	assert.Equal(t, []results.Bucket{{LeMs: 2, Count: 2}, {LeMs: 100, Count: 3}, {LeMs: -1, Count: 4}}, h.Buckets)
}

func TestPushRateAndAttribution(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	full := subject.Metric{Name: "pushes", Labels: map[string]string{"kind": "full"}}
	eds := subject.Metric{Name: "pushes", Labels: map[string]string{"kind": "eds"}}
	series := []results.Series{
		{Name: "pushes", Labels: map[string]string{"kind": "eds"}, Samples: []results.Sample{
			{At: at(0), Value: 1}, {At: at(500), Value: 1}, {At: at(1500), Value: 2}, {At: at(2500), Value: 4}}},
		// Appeared after the first scrape: it started from zero.
		{Name: "pushes", Labels: map[string]string{"kind": "full"}, Samples: []results.Sample{
			{At: at(1500), Value: 1}, {At: at(2500), Value: 1}}},
	}
	assert.Equal(t, []results.PushSecond{{At: at(1000), Full: 1, EDS: 1}, {At: at(2000), EDS: 2}}, pushRate(series, full, eds))

	changes := []results.EndpointChange{{At: at(400), Ready: 0}, {At: at(2000), Ready: 1}}
	attributePushes(changes, series, map[subject.Measure]subject.Metric{subject.FullPushes: full, subject.EDSPushes: eds})
	require.NotNil(t, changes[0].Pushes)
	assert.Equal(t, results.Pushes{Full: 1, EDS: 1}, *changes[0].Pushes, "scrapes up to 2 s")
	assert.Equal(t, results.Pushes{Full: 0, EDS: 2}, *changes[1].Pushes)

	// A change a proxy received before the harness saw it starts at that receipt.
	early := at(1200)
	changes = []results.EndpointChange{{At: at(400), Ready: 0}, {At: at(2000), Ready: 1, FirstReceivedAt: &early}}
	attributePushes(changes, series, map[subject.Measure]subject.Metric{subject.FullPushes: full, subject.EDSPushes: eds})
	assert.Equal(t, results.Pushes{Full: 0, EDS: 0}, *changes[0].Pushes)
	assert.Equal(t, results.Pushes{Full: 1, EDS: 3}, *changes[1].Pushes)
}

// A failed latest read of the receipts (a pod of the fleet out of reach) leaves the convergence
// unmeasured (its checks: error), never measured on the receipts read before it, where the
// latest changes would count as missed; a read that works again measures it.
func TestConvergenceStaleReceiptsAreNoMeasurement(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now().Add(-time.Minute)
	tracked := &adsload.Tracked{Clients: [][]adsload.Receipt{{{At: t0, Endpoints: 1}}}}
	var fail error
	c := &Convergence{Namespace: "default", Service: "flap", As: "adsload",
		Receipts: func(context.Context) (*adsload.Tracked, error) { return tracked, fail }}
	_, err := c.fetch(ctx)
	require.NoError(t, err)
	c.syncedAt = t0.Add(time.Second)
	var s results.Summary
	c.Gather(&s)
	require.NotNil(t, s.Convergence)
	assert.True(t, s.Measurements[0].OK)

	fail = errors.New("adsload pod adsload-1: connection refused")
	_, err = c.fetch(ctx)
	require.Error(t, err)
	s = results.Summary{}
	c.Gather(&s)
	assert.Nil(t, s.Convergence, "no convergence from stale receipts")
	require.Len(t, s.Measurements, 1)
	assert.False(t, s.Measurements[0].OK)
	assert.Contains(t, s.Measurements[0].Error, "adsload pod adsload-1: connection refused")

	fail = nil
	_, err = c.fetch(ctx)
	require.NoError(t, err)
	s = results.Summary{}
	c.Gather(&s)
	assert.NotNil(t, s.Convergence)
}
