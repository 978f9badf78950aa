package stats

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Hollander & Wolfe (1973), p. 69, the example of R's ?wilcox.test: permeability constants of the
// human chorioamnion at term (x) and between 12 and 26 weeks (y). R: wilcox.test(x, y,
// alternative = "greater") gives W = 35, p-value = 0.1272 (exact, no ties).
func TestMannWhitneyHollanderWolfe(t *testing.T) {
	x := []float64{0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46}
	y := []float64{1.15, 0.88, 0.90, 0.74, 1.21}
	r := MannWhitney(y, x) // the candidate is x
	assert.Equal(t, 35.0, r.U)
	assert.Equal(t, MethodExact, r.Method)
	assert.InDelta(t, 0.1272, r.PGreater, 5e-5)
	assert.InDelta(t, 2*0.1272, r.P, 1e-4)
	// The other direction: U' = n·m − U.
	assert.Equal(t, 15.0, MannWhitney(x, y).U)
	assert.InDelta(t, 0.1272, MannWhitney(x, y).PLess, 5e-5)
}

// SciPy's mannwhitneyu example (Conover): ages of male and female workers. U1 = 17 for the males;
// exact two-sided p = 0.1111 (14 of C(9,4) = 126 arrangements), normal approximation with
// continuity correction 0.11134688653314041.
func TestMannWhitneyConoverExactAndNormal(t *testing.T) {
	males := []float64{19, 22, 16, 29, 24}
	females := []float64{20, 11, 17, 12}
	r := MannWhitney(females, males)
	assert.Equal(t, 17.0, r.U)
	assert.InDelta(t, 14.0/126, r.P, 1e-12)
	n := normalMW(females, males, r.U)
	assert.InDelta(t, 0.11134688653314041, n.P, 1e-12)
}

// With ties the normal approximation's variance shrinks by Σ(t³−t)/(N(N−1)): base 1 2 2 3,
// candidate 2 3 3 4 have mid-ranks 1, 3 3 3, 6 6 6, 8; U = 23 − 10 = 13; mean 8; variance
// 16/12 · (9 − 48/56) = 10.857; z = (13 − 8 − ½)/3.2950 = 1.3657; 1 − Φ(z) = 0.0860169.
func TestMannWhitneyTieCorrection(t *testing.T) {
	base, cand := []float64{1, 2, 2, 3}, []float64{2, 3, 3, 4}
	r := normalMW(base, cand, MannWhitney(base, cand).U)
	assert.Equal(t, 13.0, r.U)
	assert.InDelta(t, 0.08601685446091148, r.PGreater, 1e-12)

	// The exact permutation distribution with mid-ranks: of the C(8,4) = 70 choices of the
	// candidate's four values, those with a rank sum ≥ 23.
	e := MannWhitney(base, cand)
	assert.Equal(t, MethodExact, e.Method)
	assert.InDelta(t, bruteForceGreater(base, cand), e.PGreater, 1e-12)
	assert.InDelta(t, 10.0/70, e.PGreater, 1e-12)
}

// bruteForceGreater enumerates every split of the pooled values into the two sides and counts the
// splits whose candidate U is at least the observed one (a second, naive implementation).
func bruteForceGreater(base, cand []float64) float64 {
	pooled := append(append([]float64{}, base...), cand...)
	u := func(b, c []float64) float64 {
		var s float64
		for _, x := range b {
			for _, y := range c {
				switch {
				case y > x:
					s++
				case y == x:
					s += 0.5
				}
			}
		}
		return s
	}
	obs := u(base, cand)
	var ge, all float64
	for mask := 0; mask < 1<<len(pooled); mask++ {
		var b, c []float64
		for i, v := range pooled {
			if mask&(1<<i) != 0 {
				c = append(c, v)
			} else {
				b = append(b, v)
			}
		}
		if len(c) != len(cand) {
			continue
		}
		all++
		if u(b, c) >= obs-1e-9 {
			ge++
		}
	}
	return ge / all
}

// Beyond exactLimit the normal approximation takes over; at the boundary both agree closely,
// ties included.
func TestMannWhitneyNormalAgreesWithExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base, cand := make([]float64, 30), make([]float64, 30)
	for i := range base {
		base[i] = float64(rng.IntN(8)) // many ties
		cand[i] = float64(rng.IntN(8) + 1)
	}
	e := MannWhitney(base, cand)
	require.Equal(t, MethodExact, e.Method)
	n := normalMW(base, cand, e.U)
	assert.InDelta(t, e.PGreater, n.PGreater, 0.005)
	assert.InDelta(t, e.PLess, n.PLess, 0.005)
	big := MannWhitney(append(base, base...), append(cand, cand...))
	assert.Equal(t, MethodNormal, big.Method)
	assert.Less(t, big.PGreater, e.PGreater, "twice the evidence")
}

func TestIdenticalDistributionsGiveNoEvidence(t *testing.T) {
	for _, xs := range [][]float64{{5}, {0, 0, 0}, {1, 2, 3}, {10.5, 9.8, 10.1, 10.3, 9.9}} {
		r, err := Compare(xs, xs, LowerIsBetter, Effect{}, Options{})
		require.NoError(t, err)
		assert.Equal(t, NoEvidence, r.Verdict, "%v: %s", xs, r.Why)
		assert.Equal(t, 0.0, r.Difference.Estimate)
		assert.Equal(t, 1.0, r.Test.P)
	}
}

// Samples drawn from one distribution alarm at most about as often as alpha says (each
// direction's one-sided test at 0.05): the verdicts are calibrated, not just plausible.
func TestNoiseAlarmRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	alarms := 0
	const trials = 400
	for range trials {
		base, cand := make([]float64, 8), make([]float64, 8)
		for i := range base {
			base[i], cand[i] = 100+10*rng.NormFloat64(), 100+10*rng.NormFloat64()
		}
		r, err := Compare(base, cand, LowerIsBetter, Effect{}, Options{Resamples: 200})
		require.NoError(t, err)
		if r.Verdict == Regression {
			alarms++
		}
	}
	assert.InDelta(t, 0.05, float64(alarms)/trials, 0.03, "false regressions on pure noise: %d of %d", alarms, trials)
}

func TestCompareVerdicts(t *testing.T) {
	o := Options{}
	for name, tc := range map[string]struct {
		base, cand []float64
		dir        Direction
		min        Effect
		want       Verdict
		basis      Basis
	}{
		// n = 3 + 3: complete separation is p = 1/20 = 0.05 ≤ α.
		"errors appear":           {[]float64{0, 0, 0}, []float64{1.2, 0.8, 2.5}, LowerIsBetter, Effect{Abs: 0.1}, Regression, Significant},
		"errors vanish":           {[]float64{1.2, 0.8, 2.5}, []float64{0, 0, 0}, LowerIsBetter, Effect{Abs: 0.1}, Improvement, Significant},
		"availability drops":      {[]float64{1, 1, 0.99}, []float64{0.5, 0.62, 0.55}, HigherIsBetter, Effect{Abs: 0.01}, Regression, Significant},
		"latency within min":      {[]float64{10, 10.1, 10.2}, []float64{10.4, 10.5, 10.6}, LowerIsBetter, Effect{Abs: 1, Rel: 0.1}, NoEvidence, ""},
		"overlap":                 {[]float64{10, 14, 30}, []float64{12, 20, 40}, LowerIsBetter, Effect{Abs: 1}, NoEvidence, ""},
		"one run each, separated": {[]float64{0}, []float64{3}, LowerIsBetter, Effect{Abs: 1}, Regression, Separated},
		"one run each, too close": {[]float64{0}, []float64{0.5}, LowerIsBetter, Effect{Abs: 1}, NoEvidence, ""},
		// Two runs each: smallest p 1/6; the medians differ by 5 but the gap is only 1.
		"two runs, gap within min": {[]float64{0, 4}, []float64{5, 9}, LowerIsBetter, Effect{Abs: 2}, NoEvidence, ""},
		"two runs, separated":      {[]float64{0, 1}, []float64{5, 9}, LowerIsBetter, Effect{Abs: 2}, Regression, Separated},
	} {
		r, err := Compare(tc.base, tc.cand, tc.dir, tc.min, o)
		require.NoError(t, err)
		assert.Equal(t, tc.want, r.Verdict, "%s: %s", name, r.Why)
		assert.Equal(t, tc.basis, r.Basis, name)
	}
}

func TestCompareRejects(t *testing.T) {
	_, err := Compare(nil, []float64{1}, LowerIsBetter, Effect{}, Options{})
	assert.Error(t, err)
	_, err = Compare([]float64{1}, []float64{1}, "sideways", Effect{}, Options{})
	assert.Error(t, err)
}

func TestBootstrapIntervals(t *testing.T) {
	base := []float64{100, 104, 98, 101, 99, 103, 97, 102}
	cand := make([]float64, len(base))
	for i, b := range base {
		cand[i] = b + 20
	}
	r, err := Compare(base, cand, LowerIsBetter, Effect{}, Options{Seed: 42})
	require.NoError(t, err)
	assert.Equal(t, 20.0, r.Difference.Estimate)
	assert.LessOrEqual(t, r.Difference.Low, 20.0)
	assert.GreaterOrEqual(t, r.Difference.High, 20.0)
	assert.Greater(t, r.Difference.Low, 10.0, "the shift is far beyond the spread")
	require.NotNil(t, r.Ratio)
	assert.InDelta(t, 1.2, r.Ratio.Estimate, 0.01)
	assert.Greater(t, r.Ratio.Low, 1.0)

	again, err := Compare(base, cand, LowerIsBetter, Effect{}, Options{Seed: 42})
	require.NoError(t, err)
	assert.Equal(t, r.Difference, again.Difference, "seeded: reproducible")
	// Resampling the medians of 8 values gives few distinct results; odd spacings show the seed.
	odd := []float64{1.13, 2.71, 3.14, 4.66, 5.02, 6.28, 7.77, 8.08, 9.81, 10.3, 11.9}
	a, err := Compare(odd, base, LowerIsBetter, Effect{}, Options{Seed: 42, Confidence: 0.9})
	require.NoError(t, err)
	b, err := Compare(odd, base, LowerIsBetter, Effect{}, Options{Seed: 43, Confidence: 0.9})
	require.NoError(t, err)
	assert.NotEqual(t, a.Ratio, b.Ratio, "the seed is used")

	// A base of zeros has no ratio.
	z, err := Compare([]float64{0, 0}, []float64{1, 2}, LowerIsBetter, Effect{}, Options{})
	require.NoError(t, err)
	assert.Nil(t, z.Ratio)
}

func TestMedian(t *testing.T) {
	assert.Equal(t, 2.0, Median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, Median([]float64{4, 1, 2, 3}), "the mean of the middle two, unlike Percentile(0.5)")
	assert.True(t, math.IsNaN(Median(nil)))
}

// TestPercentileNearestRank: sorted[⌈p·n⌉−1], always a measured value.
func TestPercentileNearestRank(t *testing.T) {
	var xs []float64
	for i := 1; i <= 100; i++ {
		xs = append(xs, float64(i))
	}
	for p, want := range map[float64]float64{0.5: 50, 0.9: 90, 0.99: 99, 0.991: 100, 0.01: 1, 0.011: 2, 1: 100} {
		assert.Equal(t, want, Percentile(xs, p), "p=%g", p)
	}
	// Between two values: the higher rank, not an interpolation (type 7 would give 1.3 and 2.5).
	four := []float64{1, 2, 3, 4}
	assert.Equal(t, 1.0, Percentile(four, 0.1))
	assert.Equal(t, 2.0, Percentile(four, 0.5))
	assert.Equal(t, 3.0, Percentile(four, 0.51))

	// Edges: p0 is the smallest, p100 the largest; p outside [0, 1] is clamped.
	assert.Equal(t, 1.0, Percentile(four, 0))
	assert.Equal(t, 4.0, Percentile(four, 1))
	assert.Equal(t, 1.0, Percentile(four, -0.5))
	assert.Equal(t, 4.0, Percentile(four, 1.5))
	assert.Equal(t, 1.0, Percentile(four, math.NaN()))

	// One value is every percentile; an empty sample gives the zero value.
	for _, p := range []float64{0, 0.5, 0.99, 1} {
		assert.Equal(t, 7*time.Millisecond, Percentile([]time.Duration{7 * time.Millisecond}, p), "p=%g", p)
		assert.Zero(t, Percentile([]time.Duration(nil), p), "p=%g", p)
		assert.Zero(t, Percentile([]float64{}, p), "p=%g", p)
	}
}
