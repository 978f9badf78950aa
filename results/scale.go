package results

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Scale is what a scale experiment measured step by step: memory against the amount of config,
// the fitted growth, the correctness oracle's mismatches and a capacity projection.
type Scale struct {
	// Baseline is the control plane before the first step (no generated config).
	Baseline ScaleStep   `json:"baseline"`
	Steps    []ScaleStep `json:"steps"`
	// Fit is heap above the baseline against endpoints, log-log (absent with fewer than 2 steps).
	Fit *PowerFit `json:"fit,omitempty"`
	// RSSFit is the same for the resident memory: what a memory budget is about.
	RSSFit *PowerFit `json:"rssFit,omitempty"`
	// Projection is the capacity under a memory budget (absent without a budget).
	Projection *Projection `json:"projection,omitempty"`
	// MismatchCount counts the oracle's mismatches by scenario (e.g. "config", "endpoint-port",
	// "workload-entry"); Mismatches lists the first few of them.
	MismatchCount map[string]int `json:"mismatchCount"`
	Mismatches    []Mismatch     `json:"mismatches,omitempty"`
}

// ScaleStep is one step: how much config, how fast it was applied and delivered, and the
// memory it took.
type ScaleStep struct {
	ServiceEntries int `json:"serviceEntries"`
	Endpoints      int `json:"endpoints"`
	// ApplySeconds and ApplyPerSecond: creating this step's ServiceEntries through the API.
	ApplySeconds   float64 `json:"applySeconds"`
	ApplyPerSecond float64 `json:"applyPerSecond"`
	// PushSeconds is the control plane's own time spent in full pushes during the step (its push
	// histogram's increase), PushCount how many; PushMeasured is false when the histogram could
	// not be read (then both are 0, not measured).
	PushMeasured bool    `json:"pushMeasured"`
	PushSeconds  float64 `json:"pushSeconds"`
	PushCount    int     `json:"pushCount"`
	// ConvergeSeconds is from the end of the apply until the oracle client held the complete
	// expected config (or the wait ended); Converged says whether it did.
	ConvergeSeconds float64 `json:"convergeSeconds"`
	Converged       bool    `json:"converged"`
	// HeapBytes is the in-use heap the process reports right after the forced GCs of a heap
	// profile; Profile is that profile's file, ProfileInUseBytes its (sampled) in-use total and
	// Top its heaviest allocation sites.
	HeapBytes         int64       `json:"heapBytes"`
	Profile           string      `json:"profile,omitempty"`
	ProfileInUseBytes int64       `json:"profileInUseBytes,omitempty"`
	Top               []AllocSite `json:"top,omitempty"`
	// RSSBytes is the control plane's resident memory from its cgroup (0: not read).
	RSSBytes int64 `json:"rssBytes"`
	// BytesPerEndpoint is (HeapBytes − baseline heap) / Endpoints.
	BytesPerEndpoint float64 `json:"bytesPerEndpoint"`
	// APIServerRSSBytes is kube-apiserver's resident memory (its own metric); EtcdDBBytes is the
	// etcd database size the apiserver reports (0: not read).
	APIServerRSSBytes int64 `json:"apiserverRssBytes"`
	EtcdDBBytes       int64 `json:"etcdDbBytes"`
	// Mismatches is how many oracle mismatches this step had.
	Mismatches int `json:"mismatches"`
	// Verify marks the step added to verify a projection.
	Verify bool `json:"verify,omitempty"`
	// PushP99Ms is the P99 of the full pushes during the step, from the increase of the control
	// plane's push-time histogram (0 when PushMeasured is false or the step had no push).
	PushP99Ms float64 `json:"pushP99Ms,omitempty"`
	// Proxies is the fleet of ADS clients connected during the step (0: the oracle client
	// only). FleetConvergeSeconds is from the end of the apply until every one of them held at
	// least the step's generated clusters (CDS; never less than the oracle client's
	// time: it is read after it); FleetConverged says whether they did within the wait, and
	// FleetMeasured whether the fleet was read at all.
	Proxies              int     `json:"proxies,omitempty"`
	FleetMeasured        bool    `json:"fleetMeasured,omitempty"`
	FleetConverged       bool    `json:"fleetConverged,omitempty"`
	FleetConvergeSeconds float64 `json:"fleetConvergeSeconds,omitempty"`
}

// PowerFit is y = Coeff · x^Exponent fitted by least squares on log y against log x.
type PowerFit struct {
	Exponent float64 `json:"exponent"`
	// StdErr is the exponent's standard error (0 with two points: a line through both).
	StdErr float64 `json:"stdErr"`
	Coeff  float64 `json:"coeff"`
	Points int     `json:"points"`
	// Resolution is how far the measurement's own jitter could move the exponent (see
	// ExponentResolution); 0 when not known.
	Resolution float64 `json:"resolution,omitempty"`
}

// At is the fitted y at x.
func (f PowerFit) At(x float64) float64 { return f.Coeff * math.Pow(x, f.Exponent) }

// Inverse is the x at which the fit reaches y.
func (f PowerFit) Inverse(y float64) float64 { return math.Pow(y/f.Coeff, 1/f.Exponent) }

// FitPower fits y = c·x^k to the points with x, y > 0 (others are skipped: a step whose heap
// did not rise above the baseline says nothing about growth).
func FitPower(xs, ys []float64) (PowerFit, error) {
	px, py := positivePoints(xs, ys)
	lx, ly := make([]float64, len(px)), make([]float64, len(py))
	for i := range px {
		lx[i], ly[i] = math.Log(px[i]), math.Log(py[i])
	}
	n := float64(len(lx))
	if len(lx) < 2 {
		return PowerFit{}, fmt.Errorf("fit: %d usable points, want at least 2", len(lx))
	}
	var mx, my float64
	for i := range lx {
		mx, my = mx+lx[i], my+ly[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for i := range lx {
		sxx += (lx[i] - mx) * (lx[i] - mx)
		sxy += (lx[i] - mx) * (ly[i] - my)
	}
	if sxx == 0 {
		return PowerFit{}, errors.New("fit: every point has the same x")
	}
	k := sxy / sxx
	f := PowerFit{Exponent: k, Coeff: math.Exp(my - k*mx), Points: len(lx)}
	if len(lx) > 2 {
		var sse float64
		for i := range lx {
			r := ly[i] - (my + k*(lx[i]-mx))
			sse += r * r
		}
		f.StdErr = math.Sqrt(sse / (n - 2) / sxx)
	}
	return f, nil
}

// ExponentResolution is how far the fitted exponent could move if each y were off by jitter
// (the measurement's noise between runs), to first order: jitter·(1/y₁ + 1/yₙ) / ln(xₙ/x₁)
// over the smallest and largest x that FitPower uses. Small growth over a narrow range resolves
// nothing: a heap 0.7 and 2.9 MiB above its baseline at 507 and 1014 endpoints, with 0.5 MiB of
// jitter, gives ±1.3, and the reference's exponent there came out anywhere from −0.14 to 2.01
// in four runs. It is +Inf without two such points.
func ExponentResolution(xs, ys []float64, jitter float64) float64 {
	px, py := positivePoints(xs, ys)
	if len(px) == 0 {
		return math.Inf(1)
	}
	lo, hi := 0, 0
	for i := range px {
		if px[i] < px[lo] {
			lo = i
		}
		if px[i] > px[hi] {
			hi = i
		}
	}
	if px[hi] <= px[lo] {
		return math.Inf(1)
	}
	return jitter * (1/py[lo] + 1/py[hi]) / math.Log(px[hi]/px[lo])
}

// positivePoints are the points (x, y) with both above zero: what a log-log fit can use.
func positivePoints(xs, ys []float64) (px, py []float64) {
	for i := range xs {
		if i < len(ys) && xs[i] > 0 && ys[i] > 0 {
			px, py = append(px, xs[i]), append(py, ys[i])
		}
	}
	return px, py
}

// Projection is the largest config a memory budget holds, by the fit, and its verification.
type Projection struct {
	BudgetBytes int64 `json:"budgetBytes"`
	// Endpoints and ServiceEntries are the projected maximum under the budget (RSS = baseline
	// RSS + RSS fit).
	Endpoints      int `json:"endpoints"`
	ServiceEntries int `json:"serviceEntries"`
	// Capped is true when the projection was above what the experiment may create and was cut.
	Capped bool `json:"capped,omitempty"`
	// Verified: a step at that size ran; VerifiedHeapBytes and VerifiedRSSBytes are its figures
	// and WithinBudget whether its RSS stayed under the budget.
	Verified          bool  `json:"verified"`
	VerifiedHeapBytes int64 `json:"verifiedHeapBytes,omitempty"`
	VerifiedRSSBytes  int64 `json:"verifiedRssBytes,omitempty"`
	WithinBudget      bool  `json:"withinBudget"`
}

// Mismatch is one difference between what a correctness oracle expected and what an xDS client
// received.
type Mismatch struct {
	Step     int    `json:"step"` // ServiceEntries at that step
	Scenario string `json:"scenario"`
	Cluster  string `json:"cluster"`
	Want     string `json:"want"`
	Got      string `json:"got"`
}

// Chart draws heap above the baseline (*) and the fit (.) against endpoints on log-log axes.
func (s *Scale) Chart(w, h int) string {
	var xs, ys []float64
	for _, st := range s.Steps {
		if y := float64(st.HeapBytes - s.Baseline.HeapBytes); st.Endpoints > 0 && y > 0 {
			xs, ys = append(xs, float64(st.Endpoints)), append(ys, y)
		}
	}
	if len(xs) == 0 {
		return "(no step rose above the baseline)\n"
	}
	x0, x1, y0, y1 := xs[0], xs[0], ys[0], ys[0]
	for i := range xs {
		x0, x1, y0, y1 = math.Min(x0, xs[i]), math.Max(x1, xs[i]), math.Min(y0, ys[i]), math.Max(y1, ys[i])
	}
	if f := s.Fit; f != nil {
		y0, y1 = math.Min(y0, f.At(x0)), math.Max(y1, f.At(x1))
	}
	lx0, lx1, ly0, ly1 := math.Log(x0), math.Log(x1)+1e-9, math.Log(y0), math.Log(y1)+1e-9
	if lx1-lx0 < 1e-6 {
		lx1 = lx0 + 1
	}
	if ly1-ly0 < 1e-6 {
		ly1 = ly0 + 1
	}
	grid := make([][]byte, h)
	for i := range grid {
		grid[i] = []byte(strings.Repeat(" ", w))
	}
	put := func(x, y float64, c byte) {
		col := int(math.Round((math.Log(x) - lx0) / (lx1 - lx0) * float64(w-1)))
		row := h - 1 - int(math.Round((math.Log(y)-ly0)/(ly1-ly0)*float64(h-1)))
		if col >= 0 && col < w && row >= 0 && row < h && grid[row][col] != '*' {
			grid[row][col] = c
		}
	}
	if f := s.Fit; f != nil {
		for c := 0; c < w; c++ {
			x := math.Exp(lx0 + (lx1-lx0)*float64(c)/float64(w-1))
			put(x, f.At(x), '.')
		}
	}
	for i := range xs {
		put(xs[i], ys[i], '*')
	}
	var b strings.Builder
	for i, row := range grid {
		label := "          "
		switch i {
		case 0:
			label = fmt.Sprintf("%8.1fM ", y1/(1<<20))
		case h - 1:
			label = fmt.Sprintf("%8.1fM ", y0/(1<<20))
		}
		b.WriteString(label + "|" + strings.TrimRight(string(row), " ") + "\n")
	}
	b.WriteString("          +" + strings.Repeat("-", w) + "\n")
	fmt.Fprintf(&b, "           %-*d%d endpoints (log-log; * heap above baseline, . fit)\n", w-8, int(x0), int(x1))
	return b.String()
}
