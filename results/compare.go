package results

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Metric is one number compare puts side by side.
type Metric struct {
	Name string
	Unit string
	// Gated metrics can fail a comparison; the others are shown for context (restarts and OOM kills
	// are what the chaos does, not a quality of the control plane).
	Gated bool
	// MinDelta is the smallest absolute worsening that counts, so noise on tiny values (0.3 ms vs
	// 0.4 ms on loopback) is not a 33 % regression.
	MinDelta float64
	// Value extracts the metric; false when the run did not measure it.
	Value func(*Summary) (float64, bool)
}

func trafficMetric(f func(*Traffic) float64) func(*Summary) (float64, bool) {
	return func(s *Summary) (float64, bool) {
		if s.Traffic == nil {
			return 0, false
		}
		return f(s.Traffic), true
	}
}

func cpMetric(f func(*ControlPlaneStats) (float64, bool)) func(*Summary) (float64, bool) {
	return func(s *Summary) (float64, bool) {
		if s.ControlPlaneStats == nil {
			return 0, false
		}
		return f(s.ControlPlaneStats)
	}
}

// Metrics are the summary's comparable numbers; for all of them higher is worse.
var Metrics = []Metric{
	{Name: "error rate", Unit: "%", Gated: true, Value: trafficMetric(func(t *Traffic) float64 { return 100 * t.ErrorRate })},
	{Name: "errors", Gated: true, Value: trafficMetric(func(t *Traffic) float64 { return float64(t.Errors) })},
	{Name: "error window", Unit: "s", Gated: true, Value: trafficMetric(func(t *Traffic) float64 { return t.ErrorWindowSeconds })},
	{Name: "latency p50", Unit: "ms", Gated: true, MinDelta: 1, Value: trafficMetric(func(t *Traffic) float64 { return t.LatencyMs.P50 })},
	{Name: "latency p90", Unit: "ms", Gated: true, MinDelta: 1, Value: trafficMetric(func(t *Traffic) float64 { return t.LatencyMs.P90 })},
	{Name: "latency p99", Unit: "ms", Gated: true, MinDelta: 2, Value: trafficMetric(func(t *Traffic) float64 { return t.LatencyMs.P99 })},
	{Name: "latency max", Unit: "ms", Value: trafficMetric(func(t *Traffic) float64 { return t.LatencyMs.Max })},
	{Name: "full pushes", Gated: true, Value: cpMetric(func(c *ControlPlaneStats) (float64, bool) {
		if c.Pushes == nil {
			return 0, false
		}
		return float64(c.Pushes.Full), true
	})},
	{Name: "eds pushes", Value: cpMetric(func(c *ControlPlaneStats) (float64, bool) {
		if c.Pushes == nil {
			return 0, false
		}
		return float64(c.Pushes.EDS), true
	})},
	{Name: "peak heap", Unit: "MiB", Gated: true, MinDelta: 1, Value: cpMetric(func(c *ControlPlaneStats) (float64, bool) {
		return float64(c.PeakHeapBytes) / (1 << 20), c.PeakHeapBytes > 0
	})},
	{Name: "restarts", Value: cpMetric(func(c *ControlPlaneStats) (float64, bool) { return float64(c.Restarts), true })},
	{Name: "oom kills", Value: cpMetric(func(c *ControlPlaneStats) (float64, bool) { return float64(c.OOMKills), true })},
}

// Row is one compared metric.
type Row struct {
	Metric     Metric
	Base, Cand float64
	// BaseN and CandN count the runs that measured the metric on each side.
	BaseN, CandN int
	// ChangePct is the relative change; +Inf when base is 0 and cand is not.
	ChangePct  float64
	Regression bool
}

// CheckChange is a check that passed in the base runs and failed in a candidate.
type CheckChange struct {
	Name       string
	Base, Cand string
	Regression bool
}

// Comparison is the result of Compare.
type Comparison struct {
	MaxRegressionPct float64
	Rows             []Row
	Checks           []CheckChange
}

// Regressed reports whether any gated metric or check regressed.
func (c *Comparison) Regressed() bool {
	for _, r := range c.Rows {
		if r.Regression {
			return true
		}
	}
	for _, ch := range c.Checks {
		if ch.Regression {
			return true
		}
	}
	return false
}

// Compare compares candidate runs with base runs. Each side may hold several repeat runs of the
// same experiment; a metric's side value is then the mean. (A statistical test over repeats
// replaces the plain threshold in a later issue: Row keeps the sample counts for it.) A gated
// metric regresses when it grows by more than maxRegressionPct percent and by at least its
// MinDelta; a check that passed in every base run and fails in a candidate is a regression too.
func Compare(base, cand []*Summary, maxRegressionPct float64) (*Comparison, error) {
	if len(base) == 0 || len(cand) == 0 {
		return nil, fmt.Errorf("compare needs at least one base and one candidate run")
	}
	exp := base[0].Experiment
	for _, s := range append(append([]*Summary{}, base...), cand...) {
		if s.Experiment != exp {
			return nil, fmt.Errorf("runs are of different experiments (%q and %q): compare runs of one experiment", exp, s.Experiment)
		}
	}
	c := &Comparison{MaxRegressionPct: maxRegressionPct}
	for _, m := range Metrics {
		b, bn := mean(base, m.Value)
		k, kn := mean(cand, m.Value)
		if bn == 0 && kn == 0 {
			continue
		}
		r := Row{Metric: m, Base: b, Cand: k, BaseN: bn, CandN: kn}
		switch {
		case bn == 0 || kn == 0:
			r.ChangePct = math.NaN()
		case b == 0 && k == 0:
			r.ChangePct = 0
		case b == 0:
			r.ChangePct = math.Inf(1)
		default:
			r.ChangePct = 100 * (k - b) / b
		}
		r.Regression = m.Gated && bn > 0 && kn > 0 && k-b > m.MinDelta && r.ChangePct > maxRegressionPct
		c.Rows = append(c.Rows, r)
	}
	c.Checks = compareChecks(base, cand)
	return c, nil
}

func mean(runs []*Summary, f func(*Summary) (float64, bool)) (float64, int) {
	var sum float64
	n := 0
	for _, s := range runs {
		if v, ok := f(s); ok {
			sum += v
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return sum / float64(n), n
}

func compareChecks(base, cand []*Summary) []CheckChange {
	status := func(runs []*Summary) (map[string]string, []string) {
		st := map[string]string{}
		var order []string
		for _, s := range runs {
			for _, ch := range s.Checks {
				prev, seen := st[ch.Name]
				if !seen {
					order = append(order, ch.Name)
				}
				cur := passfail(ch.Pass)
				if seen && prev != cur {
					cur = "mixed"
				}
				st[ch.Name] = cur
			}
		}
		return st, order
	}
	bs, border := status(base)
	cs, corder := status(cand)
	names := border
	for _, n := range corder {
		if _, ok := bs[n]; !ok {
			names = append(names, n)
		}
	}
	var out []CheckChange
	for _, n := range names {
		b, c := bs[n], cs[n]
		if b == "" {
			b = "absent"
		}
		if c == "" {
			c = "absent"
		}
		out = append(out, CheckChange{Name: n, Base: b, Cand: c, Regression: b == "pass" && (c == "fail" || c == "mixed")})
	}
	return out
}

func passfail(p bool) string {
	if p {
		return "pass"
	}
	return "fail"
}

// WriteTable prints the comparison side by side.
func (c *Comparison) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "METRIC\tBASE\tCANDIDATE\tCHANGE\tSTATUS")
	for _, r := range c.Rows {
		status := "ok"
		switch {
		case r.Regression:
			status = fmt.Sprintf("REGRESSION (> %g %%)", c.MaxRegressionPct)
		case !r.Metric.Gated:
			status = "info"
		case r.BaseN == 0 || r.CandN == 0:
			status = "not comparable"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Metric.Name, side(r.Base, r.BaseN, r.Metric.Unit), side(r.Cand, r.CandN, r.Metric.Unit), change(r.ChangePct), status)
	}
	if len(c.Checks) > 0 {
		fmt.Fprintln(tw, "\t\t\t\t")
		fmt.Fprintln(tw, "CHECK\tBASE\tCANDIDATE\t\tSTATUS")
		for _, ch := range c.Checks {
			status := "ok"
			if ch.Regression {
				status = "REGRESSION"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t\t%s\n", ch.Name, ch.Base, ch.Cand, status)
		}
	}
	return tw.Flush()
}

func side(v float64, n int, unit string) string {
	if n == 0 {
		return "—"
	}
	s := strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.3f", v), "0"), "0")
	s = strings.TrimSuffix(strings.TrimSuffix(s, "0"), ".")
	if unit != "" {
		s += " " + unit
	}
	return s
}

func change(pct float64) string {
	switch {
	case math.IsNaN(pct):
		return "—"
	case math.IsInf(pct, 1):
		return "+∞"
	}
	return fmt.Sprintf("%+.1f %%", pct)
}
