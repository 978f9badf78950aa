package stats

import (
	"math"
	"slices"
	"sort"
)

// exactLimit is the largest pooled sample size whose p-values are computed exactly; beyond it the
// normal approximation is good (and the exact distribution's table grows as N³).
const exactLimit = 60

// Methods of MannWhitneyResult.
const (
	// MethodExact is the exact permutation distribution of the rank sum given the pooled values
	// (ties take their mid-ranks), so it stays exact with ties.
	MethodExact = "exact"
	// MethodNormal is the normal approximation with tie correction and continuity correction.
	MethodNormal = "normal"
)

// MannWhitneyResult is a Mann-Whitney U (Wilcoxon rank-sum) test of a base and a candidate sample.
type MannWhitneyResult struct {
	// U is the candidate's statistic: the base–candidate pairs in which the candidate's value is
	// larger, ties counting one half (R's W for wilcox.test(cand, base)). It ranges 0 … n·m.
	U float64 `json:"u"`
	// PGreater is the one-sided p-value of "the candidate tends to be larger", PLess of "smaller",
	// P the two-sided one.
	PGreater float64 `json:"pGreater"`
	PLess    float64 `json:"pLess"`
	P        float64 `json:"p"`
	Method   string  `json:"method"`
}

// MannWhitney tests whether cand tends to give larger or smaller values than base. It is exact
// up to exactLimit values in all, and the normal approximation beyond.
func MannWhitney(base, cand []float64) MannWhitneyResult {
	ranks := midranks(base, cand)
	m := len(cand)
	var rc float64
	for _, r := range ranks[len(base):] {
		rc += r
	}
	u := rc - float64(m*(m+1))/2
	if len(base)+len(cand) <= exactLimit {
		return exactMW(ranks, m, u)
	}
	return normalMW(base, cand, u)
}

// midranks ranks the pooled sample (base first, then cand), ties taking the mean of their ranks.
func midranks(base, cand []float64) []float64 {
	pooled := append(slices.Clone(base), cand...)
	idx := make([]int, len(pooled))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return pooled[idx[a]] < pooled[idx[b]] })
	ranks := make([]float64, len(pooled))
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && pooled[idx[j]] == pooled[idx[i]] {
			j++
		}
		r := float64(i+j+1) / 2 // mean of ranks i+1 … j
		for k := i; k < j; k++ {
			ranks[idx[k]] = r
		}
		i = j
	}
	return ranks
}

// exactMW counts, over every way of choosing m of the pooled values as the candidate's, how often
// the candidate's rank sum is at least / at most the observed one. Mid-ranks are multiples of ½,
// so doubled they are integers and the sums can be tabulated.
func exactMW(ranks []float64, m int, u float64) MannWhitneyResult {
	total := 0
	for _, r := range ranks {
		total += int(2 * r)
	}
	// ways[k][s]: subsets of k values with doubled rank sum s.
	ways := make([][]float64, m+1)
	for k := range ways {
		ways[k] = make([]float64, total+1)
	}
	ways[0][0] = 1
	for _, r := range ranks {
		d := int(2 * r)
		for k := m; k >= 1; k-- {
			prev, cur := ways[k-1], ways[k]
			for s := total; s >= d; s-- {
				cur[s] += prev[s-d]
			}
		}
	}
	obs := int(math.Round(2 * (u + float64(m*(m+1))/2)))
	var all, ge, le float64
	for s, w := range ways[m] {
		all += w
		if s >= obs {
			ge += w
		}
		if s <= obs {
			le += w
		}
	}
	return finish(MannWhitneyResult{U: u, PGreater: ge / all, PLess: le / all, Method: MethodExact})
}

// normalMW is the normal approximation: U's mean n·m/2 and variance n·m/12·((N+1) − Σ(t³−t)/(N(N−1)))
// over the tie groups of size t, with a continuity correction of ½.
func normalMW(base, cand []float64, u float64) MannWhitneyResult {
	n, m := float64(len(base)), float64(len(cand))
	N := n + m
	pooled := append(slices.Clone(base), cand...)
	slices.Sort(pooled)
	var ties float64
	for i := 0; i < len(pooled); {
		j := i
		for j < len(pooled) && pooled[j] == pooled[i] {
			j++
		}
		t := float64(j - i)
		ties += t*t*t - t
		i = j
	}
	mean := n * m / 2
	sd := math.Sqrt(n * m / 12 * ((N + 1) - ties/(N*(N-1))))
	r := MannWhitneyResult{U: u, PGreater: 1, PLess: 1, Method: MethodNormal}
	if sd > 0 {
		r.PGreater = 1 - phi((u-mean-0.5)/sd)
		r.PLess = phi((u - mean + 0.5) / sd)
	}
	return finish(r)
}

func finish(r MannWhitneyResult) MannWhitneyResult {
	r.PGreater, r.PLess = math.Min(r.PGreater, 1), math.Min(r.PLess, 1)
	r.P = math.Min(1, 2*math.Min(r.PGreater, r.PLess))
	return r
}

// phi is the standard normal distribution function.
func phi(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }
