package observe

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/results/stats"
)

// HistogramIncrease is how much a Prometheus histogram (in seconds) grew over the run, summed
// over its matching series, as cumulative buckets in milliseconds; false when it was never
// scraped.
func HistogramIncrease(series []results.Series, ref subject.Metric) (*results.Histogram, bool) {
	bucket := subject.Metric{Name: ref.Name + "_bucket", Labels: ref.Labels}
	first := firstScrape(series)
	byLe := map[float64]float64{}
	found := false
	for _, sr := range series {
		if !bucket.Matches(sr.Name, sr.Labels) || len(sr.Samples) == 0 {
			continue
		}
		le, err := strconv.ParseFloat(sr.Labels["le"], 64)
		if err != nil {
			continue
		}
		found = true
		byLe[le] += seriesIncrease(sr, first)
	}
	if !found {
		return nil, false
	}
	les := make([]float64, 0, len(byLe))
	for le := range byLe {
		les = append(les, le)
	}
	sort.Float64s(les)
	h := &results.Histogram{}
	for _, le := range les {
		ms := le * 1000
		if math.IsInf(le, 1) {
			ms = -1
		}
		h.Buckets = append(h.Buckets, results.Bucket{LeMs: ms, Count: int64(math.Round(byLe[le]))})
	}
	if n := len(h.Buckets); n > 0 {
		h.Count = h.Buckets[n-1].Count
	}
	h.P50Ms, h.P99Ms = BucketQuantile(0.5, h.Buckets), BucketQuantile(0.99, h.Buckets)
	return h, true
}

// BucketQuantile estimates quantile q from cumulative buckets as Prometheus's
// histogram_quantile does: linear within the bucket that holds it, the lower bound of the
// +Inf bucket when it falls there; 0 without observations.
func BucketQuantile(q float64, buckets []results.Bucket) float64 {
	if len(buckets) == 0 || buckets[len(buckets)-1].Count == 0 {
		return 0
	}
	rank := q * float64(buckets[len(buckets)-1].Count)
	lower, below := 0.0, int64(0)
	for _, b := range buckets {
		if float64(b.Count) >= rank {
			if b.LeMs < 0 { // +Inf: nothing better than the highest finite bound
				return lower
			}
			in := b.Count - below
			if in == 0 {
				return b.LeMs
			}
			return lower + (b.LeMs-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = b.LeMs, b.Count
	}
	return lower
}

// ExactHistogram is the exact distribution of durations (nearest-rank quantiles, as the
// traffic's latencies), with buckets at bounds (ms).
func ExactHistogram(ds []time.Duration, bounds []float64) results.Histogram {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	h := results.Histogram{Count: int64(len(sorted))}
	if len(sorted) == 0 {
		return h
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	h.P50Ms, h.P99Ms, h.MaxMs = ms(stats.Percentile(sorted, 0.5)), ms(stats.Percentile(sorted, 0.99)), ms(sorted[len(sorted)-1])
	for _, b := range append(append([]float64{}, bounds...), -1) {
		n := sort.Search(len(sorted), func(i int) bool { return ms(sorted[i]) > b })
		if b < 0 {
			n = len(sorted)
		}
		h.Buckets = append(h.Buckets, results.Bucket{LeMs: b, Count: int64(n)})
	}
	return h
}

// firstScrape is the time of the earliest sample of any series: a labelled series that appears
// later started from zero in between.
func firstScrape(series []results.Series) time.Time {
	var first time.Time
	for _, sr := range series {
		if len(sr.Samples) > 0 && (first.IsZero() || sr.Samples[0].At.Before(first)) {
			first = sr.Samples[0].At
		}
	}
	return first
}

// Window restricts scraped series to the interval (from, to] so that the increases computed from
// the result are those inside it: every series starts with one sample at from, holding its last
// value at or before from (its baseline) or 0 when it was first seen inside the interval (labelled
// counters appear on their first increment). Series with no sample at or before to are dropped.
// It assumes scraping began before from.
func Window(series []results.Series, from, to time.Time) []results.Series {
	out := make([]results.Series, 0, len(series))
	for _, sr := range series {
		base := results.Sample{At: from}
		var in []results.Sample
		for _, x := range sr.Samples {
			if x.At.After(to) {
				break
			}
			if x.At.After(from) {
				in = append(in, x)
			} else {
				base.Value = x.Value
			}
		}
		if len(in) == 0 && base.Value == 0 && (len(sr.Samples) == 0 || sr.Samples[0].At.After(from)) {
			continue
		}
		w := sr
		w.Samples = append([]results.Sample{base}, in...)
		out = append(out, w)
	}
	return out
}

// seriesIncrease is a counter series' growth over the run, counting a series that appeared
// after the first scrape from zero.
func seriesIncrease(sr results.Series, first time.Time) float64 {
	total := CounterIncrease(sr.Samples)
	if len(sr.Samples) > 0 && sr.Samples[0].At.After(first) {
		total += sr.Samples[0].Value
	}
	return total
}

// pushRate bins the growth of the full and EDS push counters between scrapes into the second of
// the later scrape; seconds without pushes are left out.
func pushRate(series []results.Series, full, eds subject.Metric) []results.PushSecond {
	first := firstScrape(series)
	bins := map[time.Time]*results.PushSecond{}
	add := func(ref subject.Metric, set func(b *results.PushSecond, n int64)) {
		for _, sr := range series {
			if !ref.Matches(sr.Name, sr.Labels) || len(sr.Samples) == 0 {
				continue
			}
			prev := 0.0
			if !sr.Samples[0].At.After(first) {
				prev = sr.Samples[0].Value
			}
			for _, x := range sr.Samples {
				d := x.Value - prev
				if d < 0 { // restarted from zero
					d = x.Value
				}
				prev = x.Value
				if n := int64(math.Round(d)); n > 0 {
					sec := x.At.UTC().Truncate(time.Second)
					if bins[sec] == nil {
						bins[sec] = &results.PushSecond{At: sec}
					}
					set(bins[sec], n)
				}
			}
		}
	}
	add(full, func(b *results.PushSecond, n int64) { b.Full += n })
	add(eds, func(b *results.PushSecond, n int64) { b.EDS += n })
	out := make([]results.PushSecond, 0, len(bins))
	for _, b := range bins {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}
