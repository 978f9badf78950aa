// Package stats compares two samples of a measure — the base's runs and the candidate's — the way
// an upgrade gate needs: both distributions, the difference with a bootstrap confidence interval,
// a Mann-Whitney U test, and a verdict (regression, improvement or no evidence) that takes the
// measure's direction and a minimum practical effect, so run-to-run noise does not alarm.
// It also holds the one percentile definition every figure uses (Percentile). It is plain
// arithmetic on samples and knows nothing of runs or summaries.
package stats

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Direction says which way a measure is better.
type Direction string

// Directions.
const (
	LowerIsBetter  Direction = "lower"  // error rate, latency, push time, heap
	HigherIsBetter Direction = "higher" // availability
)

// Effect is the smallest change of a measure that matters in practice: a change counts only when
// it exceeds both Abs (in the measure's unit) and Rel (a fraction of the base's median), so noise
// on tiny values (0.3 ms vs 0.4 ms) is not a 33 % regression and noise on large ones is not a
// regression of a few units.
type Effect struct {
	Abs float64 `json:"abs"`
	Rel float64 `json:"rel"`
}

// exceeds reports whether the change d from a base median of base is beyond the effect.
func (e Effect) exceeds(d, base float64) bool {
	d = math.Abs(d)
	return d > e.Abs && d > e.Rel*math.Abs(base)
}

// Verdict is what the statistics say about a measure.
type Verdict string

// Verdicts.
const (
	Regression  Verdict = "regression"
	Improvement Verdict = "improvement"
	NoEvidence  Verdict = "no evidence"
)

// Basis says on what a regression or improvement rests.
type Basis string

// Bases.
const (
	// Significant: the one-sided Mann-Whitney p is at most alpha and the change is beyond the
	// minimum effect.
	Significant Basis = "significant"
	// Separated: too few runs for the test to ever reach alpha, but every run of one side is
	// beyond every run of the other by more than the minimum effect. The minimum effect is then
	// the only noise allowance: more repeats turn this into a test.
	Separated Basis = "separated"
)

// Options are the statistics' settings; the zero value means the defaults.
type Options struct {
	// Alpha is the one-sided significance level of each direction's test (default 0.05).
	Alpha float64
	// Confidence is the confidence interval's level (default 0.95).
	Confidence float64
	// Resamples is the number of bootstrap resamples (default 10 000).
	Resamples int
	// Seed makes the bootstrap reproducible: the same samples and seed give the same interval.
	Seed uint64
}

func (o Options) withDefaults() Options {
	if o.Alpha == 0 {
		o.Alpha = 0.05
	}
	if o.Confidence == 0 {
		o.Confidence = 0.95
	}
	if o.Resamples == 0 {
		o.Resamples = 10000
	}
	return o
}

// Interval is an estimate with its confidence interval.
type Interval struct {
	Estimate float64 `json:"estimate"`
	Low      float64 `json:"low"`
	High     float64 `json:"high"`
}

// Result is the comparison of one measure's base and candidate samples.
type Result struct {
	// BaseMedian and CandMedian summarise each side.
	BaseMedian float64 `json:"baseMedian"`
	CandMedian float64 `json:"candidateMedian"`
	// Difference is candidate − base (of medians), with a bootstrap percentile interval.
	Difference Interval `json:"difference"`
	// Ratio is candidate / base (of medians); nil when a base value is not positive.
	Ratio *Interval `json:"ratio,omitempty"`
	// Test is the Mann-Whitney U test of the two samples.
	Test MannWhitneyResult `json:"test"`
	// PWorse and PBetter are the one-sided p-values of "the candidate is worse" and "the
	// candidate is better", given the measure's direction.
	PWorse  float64 `json:"pWorse"`
	PBetter float64 `json:"pBetter"`
	// Verdict and, for a regression or improvement, its Basis.
	Verdict Verdict `json:"verdict"`
	Basis   Basis   `json:"basis,omitempty"`
	// Why explains the verdict in a sentence.
	Why string `json:"why"`
}

// Compare compares the candidate's sample with the base's for a measure of direction dir with the
// minimum practical effect min. Both samples must be non-empty.
func Compare(base, cand []float64, dir Direction, min Effect, o Options) (Result, error) {
	if len(base) == 0 || len(cand) == 0 {
		return Result{}, fmt.Errorf("compare needs values on both sides (base %d, candidate %d)", len(base), len(cand))
	}
	if dir != LowerIsBetter && dir != HigherIsBetter {
		return Result{}, fmt.Errorf("unknown direction %q", dir)
	}
	o = o.withDefaults()
	r := Result{BaseMedian: Median(base), CandMedian: Median(cand)}
	r.Difference, r.Ratio = bootstrap(base, cand, o)
	r.Test = MannWhitney(base, cand)
	// Test.PGreater is "candidate tends to be larger".
	r.PWorse, r.PBetter = r.Test.PGreater, r.Test.PLess
	if dir == HigherIsBetter {
		r.PWorse, r.PBetter = r.PBetter, r.PWorse
	}
	diff := r.CandMedian - r.BaseMedian
	worse := diff > 0 == (dir == LowerIsBetter) && diff != 0
	// The smallest one-sided p the test can give with these sample sizes: at fewer runs than
	// that reaching alpha needs, a complete separation is the strongest evidence there can be.
	pmin := 1 / binomial(len(base)+len(cand), len(base))
	gap := separation(base, cand, diff > 0)
	switch {
	case diff == 0 || !min.exceeds(diff, r.BaseMedian):
		r.Verdict = NoEvidence
		r.Why = fmt.Sprintf("the change of the medians (%s) is within the minimum effect (%s)", num(diff), min)
	case worse && r.PWorse <= o.Alpha, !worse && r.PBetter <= o.Alpha:
		r.Verdict, r.Basis = verdict(worse), Significant
		r.Why = fmt.Sprintf("one-sided Mann-Whitney p = %.3g ≤ α = %g, change %s beyond the minimum effect (%s)", min2(r.PWorse, r.PBetter, worse), o.Alpha, num(diff), min)
	case pmin > o.Alpha && gap > 0 && min.exceeds(gap, r.BaseMedian):
		r.Verdict, r.Basis = verdict(worse), Separated
		r.Why = fmt.Sprintf("every candidate run is %s every base run by more than the minimum effect (%s; gap %s); with %d and %d runs the test cannot reach α = %g (smallest p %.3g): add repeats for a test",
			map[bool]string{true: "worse than", false: "better than"}[worse], min, num(gap), len(base), len(cand), o.Alpha, pmin)
	default:
		r.Verdict = NoEvidence
		r.Why = fmt.Sprintf("change %s, but one-sided p = %.3g > α = %g", num(diff), min2(r.PWorse, r.PBetter, worse), o.Alpha)
	}
	return r, nil
}

func verdict(worse bool) Verdict {
	if worse {
		return Regression
	}
	return Improvement
}

func min2(pw, pb float64, worse bool) float64 {
	if worse {
		return pw
	}
	return pb
}

// separation is how far the candidate's sample lies beyond the base's without overlap: up (the
// candidate is larger) min(cand) − max(base), else min(base) − max(cand). ≤ 0 when they overlap.
func separation(base, cand []float64, up bool) float64 {
	if up {
		return slices.Min(cand) - slices.Max(base)
	}
	return slices.Min(base) - slices.Max(cand)
}

func (e Effect) String() string {
	return fmt.Sprintf("> %s and > %s %%", num(e.Abs), num(100*e.Rel))
}

func num(v float64) string { return fmt.Sprintf("%.4g", v) }

// Median is the sample's median (the mean of the middle two for an even count).
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// bootstrap resamples each side with replacement (independently, o.Resamples times, from a PCG
// source seeded with o.Seed) and returns percentile intervals of the difference and, when every
// base value is positive, the ratio of medians.
func bootstrap(base, cand []float64, o Options) (Interval, *Interval) {
	rng := rand.New(rand.NewPCG(o.Seed, 0x6d657368636861)) // fixed stream: reproducible for a seed
	bm, cm := Median(base), Median(cand)
	diff := Interval{Estimate: cm - bm}
	positive := slices.Min(base) > 0
	var ratio *Interval
	if positive {
		ratio = &Interval{Estimate: cm / bm}
	}
	ds := make([]float64, o.Resamples)
	rs := make([]float64, o.Resamples)
	bb, cb := make([]float64, len(base)), make([]float64, len(cand))
	for i := range o.Resamples {
		for j := range bb {
			bb[j] = base[rng.IntN(len(base))]
		}
		for j := range cb {
			cb[j] = cand[rng.IntN(len(cand))]
		}
		b, c := Median(bb), Median(cb)
		ds[i] = c - b
		if positive {
			rs[i] = c / b
		}
	}
	tail := (1 - o.Confidence) / 2
	slices.Sort(ds)
	diff.Low, diff.High = Percentile(ds, tail), Percentile(ds, 1-tail)
	if positive {
		slices.Sort(rs)
		ratio.Low, ratio.High = Percentile(rs, tail), Percentile(rs, 1-tail)
	}
	return diff, ratio
}

// Percentile is the nearest-rank p-quantile of sorted (ascending): the smallest value with at
// least a share p of the sample at or below it, sorted[⌈p·n⌉−1]. It is meshchaos's one
// percentile definition — the traffic's latencies (latencyMs p50/p90/p99), startup times,
// convergence, probes' P99s, benchmarks' p99-ms and the bootstrap intervals' bounds — because a
// percentile so defined is always a value that was measured, never one between two. p is clamped
// to [0, 1]: 0 (or less, or NaN) gives the smallest value, 1 the largest. An empty sample gives
// T's zero value: callers report 0 when nothing was measured.
func Percentile[T cmp.Ordered](sorted []T, p float64) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	if !(p > 0) {
		return sorted[0]
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// binomial is n choose k as a float64.
func binomial(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}
