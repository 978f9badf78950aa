package results

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/results/stats"
)

// ComparisonSchema is the value of Comparison.Schema (comparison.json, documented in SCHEMA.md).
const ComparisonSchema = "meshchaos-comparison/v1"

// Files a comparison writes into its directory.
const (
	ComparisonJSONFile     = "comparison.json"
	ComparisonMarkdownFile = "comparison.md"
)

// Measure is one number a comparison judges run against run.
type Measure struct {
	Name string `json:"name"`
	Unit string `json:"unit,omitempty"`
	// Direction says which way is better.
	Direction stats.Direction `json:"direction"`
	// Gated measures can make a regression; the others are shown for context (restarts and OOM
	// kills are what the chaos does, not a quality of the control plane).
	Gated bool `json:"gated"`
	// Min is the smallest change that matters in practice, so that run-to-run noise on this
	// measure does not alarm (a loaded 2-core machine moves latency by milliseconds).
	Min stats.Effect `json:"minEffect"`
	// Value extracts the measure; false when the run did not measure it.
	Value func(*Summary) (float64, bool) `json:"-"`
}

func trafficMeasure(f func(*Traffic) float64) func(*Summary) (float64, bool) {
	return func(s *Summary) (float64, bool) {
		if s.Traffic == nil {
			return 0, false
		}
		return f(s.Traffic), true
	}
}

func cpMeasure(f func(*ControlPlaneStats) (float64, bool)) func(*Summary) (float64, bool) {
	return func(s *Summary) (float64, bool) {
		if s.ControlPlaneStats == nil {
			return 0, false
		}
		return f(s.ControlPlaneStats)
	}
}

func pushes(f func(*Pushes) int64) func(*Summary) (float64, bool) {
	return cpMeasure(func(c *ControlPlaneStats) (float64, bool) {
		if c.Pushes == nil {
			return 0, false
		}
		return float64(f(c.Pushes)), true
	})
}

func convergenceMeasure(f func(*Convergence) float64) func(*Summary) (float64, bool) {
	return func(s *Summary) (float64, bool) {
		if s.Convergence == nil {
			return 0, false
		}
		return f(s.Convergence), true
	}
}

// perFlap is a count of pushes made while the endpoint flapped (the chaos phase), per flap.
func perFlap(f func(*Pushes) int64) func(*Summary) (float64, bool) {
	return func(s *Summary) (float64, bool) {
		if s.Convergence == nil || s.ControlPlaneStats == nil || s.ControlPlaneStats.ChaosPushes == nil {
			return 0, false
		}
		n := s.Convergence.Flaps()
		if n == 0 {
			return 0, false
		}
		return float64(f(s.ControlPlaneStats.ChaosPushes)) / float64(n), true
	}
}

// Timeline events the comparison reads: cp-oom-restart's kill and the control plane's
// readiness after it.
const (
	EventCPOOMKilled = "cp.oomkilled"
	EventCPReady     = "cp.ready"
)

// readyAfterKill is the time from the control plane's OOM kill to its pod's readiness
// (cp-oom-restart's events, at the API's times: whole seconds).
func readyAfterKill(s *Summary) (float64, bool) {
	var killed time.Time
	for _, e := range s.Events {
		switch {
		case e.Kind == EventCPOOMKilled && killed.IsZero():
			killed = e.At
		case e.Kind == EventCPReady && !killed.IsZero() && !e.At.Before(killed):
			return e.At.Sub(killed).Seconds(), true
		}
	}
	return 0, false
}

// probeAvailability is the share of a probe series' samples that succeeded, in percent.
func probeAvailability(series string) func(*Summary) (float64, bool) {
	return func(s *Summary) (float64, bool) {
		if s.Probes == nil || len(s.Probes.Series[series]) == 0 {
			return 0, false
		}
		ok := 0
		for _, p := range s.Probes.Series[series] {
			if p.OK {
				ok++
			}
		}
		return 100 * float64(ok) / float64(len(s.Probes.Series[series])), true
	}
}

// lower and higher build measures of each direction.
func lower(name, unit string, abs, rel float64, v func(*Summary) (float64, bool)) Measure {
	return Measure{Name: name, Unit: unit, Direction: stats.LowerIsBetter, Gated: true, Min: stats.Effect{Abs: abs, Rel: rel}, Value: v}
}

func higher(name, unit string, abs, rel float64, v func(*Summary) (float64, bool)) Measure {
	return Measure{Name: name, Unit: unit, Direction: stats.HigherIsBetter, Gated: true, Min: stats.Effect{Abs: abs, Rel: rel}, Value: v}
}

func shown(m Measure) Measure { m.Gated = false; return m }

// Measures are the summary's comparable numbers. The minimum effects are what a loaded 2-core
// machine's noise between two runs of one control plane stays under (docs/upgrade-check.md gives
// the noise measured between runs of one side); counts move by whole units, so an Abs of 0.5
// means "one more".
var Measures = []Measure{
	lower("error rate", "%", 0.1, 0.25, trafficMeasure(func(t *Traffic) float64 { return 100 * t.ErrorRate })),
	shown(lower("errors", "", 0, 0, trafficMeasure(func(t *Traffic) float64 { return float64(t.Errors) }))),
	lower("error window", "s", 2, 0.25, trafficMeasure(func(t *Traffic) float64 { return t.ErrorWindowSeconds })),
	lower("latency p50", "ms", 1, 0.25, trafficMeasure(func(t *Traffic) float64 { return t.LatencyMs.P50 })),
	lower("latency p90", "ms", 2, 0.25, trafficMeasure(func(t *Traffic) float64 { return t.LatencyMs.P90 })),
	lower("latency p99", "ms", 5, 0.25, trafficMeasure(func(t *Traffic) float64 { return t.LatencyMs.P99 })),
	shown(lower("latency max", "ms", 0, 0, trafficMeasure(func(t *Traffic) float64 { return t.LatencyMs.Max }))),
	lower("full pushes", "", 0.5, 0.2, pushes(func(p *Pushes) int64 { return p.Full })),
	shown(lower("eds pushes", "", 0, 0, pushes(func(p *Pushes) int64 { return p.EDS }))),
	lower("push time p99", "ms", 10, 0.5, cpMeasure(func(c *ControlPlaneStats) (float64, bool) {
		if c.PushTime == nil || c.PushTime.Count == 0 {
			return 0, false
		}
		return c.PushTime.P99Ms, true
	})),
	lower("peak heap", "MiB", 4, 0.15, cpMeasure(func(c *ControlPlaneStats) (float64, bool) {
		return float64(c.PeakHeapBytes) / (1 << 20), c.PeakHeapBytes > 0
	})),
	lower("control-plane CPU", "s", 1, 0.25, cpMeasure(func(c *ControlPlaneStats) (float64, bool) {
		if c.CPUSeconds == nil {
			return 0, false
		}
		return *c.CPUSeconds, true
	})),
	shown(lower("restarts", "", 0, 0, cpMeasure(func(c *ControlPlaneStats) (float64, bool) { return float64(c.Restarts), true }))),
	shown(lower("oom kills", "", 0, 0, cpMeasure(func(c *ControlPlaneStats) (float64, bool) { return float64(c.OOMKills), true }))),
	lower("convergence p99", "ms", 50, 0.25, convergenceMeasure(func(c *Convergence) float64 { return c.Latency.P99Ms })),
	// Per flap, so that runs with different numbers of flaps compare (the fidelity table's
	// measure: the reference against istiod).
	shown(lower("full pushes per flap", "", 0.5, 0, perFlap(func(p *Pushes) int64 { return p.Full }))),
	shown(lower("eds pushes per flap", "", 0.5, 0, perFlap(func(p *Pushes) int64 { return p.EDS }))),
	shown(lower("ready after the kill", "s", 1, 0, readyAfterKill)),
	lower("changes missed", "", 0.5, 0, convergenceMeasure(func(c *Convergence) float64 { return float64(c.Missed) })),
	higher("xds availability", "%", 1, 0, probeAvailability("xds")),
	lower("bytes per endpoint", "B", 64, 0.15, func(s *Summary) (float64, bool) {
		if s.Scale == nil || len(s.Scale.Steps) == 0 {
			return 0, false
		}
		return s.Scale.Steps[len(s.Scale.Steps)-1].BytesPerEndpoint, true
	}),
}

// Run is one run directory's summary.
type Run struct {
	Dir     string
	Summary *Summary
}

// RunRef names a run in a comparison.
type RunRef struct {
	Dir          string  `json:"dir"`
	ControlPlane string  `json:"controlPlane,omitempty"`
	Verdict      Verdict `json:"verdict"`
	Error        string  `json:"error,omitempty"`
}

// MeasureResult is one measure of one experiment compared.
type MeasureResult struct {
	Measure
	// Base and Candidate are the values of the runs that measured it, in run order.
	Base      []float64 `json:"base"`
	Candidate []float64 `json:"candidate"`
	// Stats is absent when a side has no value.
	Stats *stats.Result `json:"stats,omitempty"`
	// Verdict is the statistics' verdict for a gated measure, VerdictShown for the others and
	// VerdictNotComparable when a side did not measure it.
	Verdict stats.Verdict `json:"verdict"`
}

// Verdicts of a measure besides the statistics' own.
const (
	VerdictShown         stats.Verdict = "shown"
	VerdictNotComparable stats.Verdict = "not comparable"
)

// Regression reports whether this measure regressed.
func (m MeasureResult) Regression() bool { return m.Verdict == stats.Regression }

// CheckChange is a check's status on each side: pass, fail, mixed (some runs each) or absent.
type CheckChange struct {
	Name      string `json:"name"`
	Base      string `json:"base"`
	Candidate string `json:"candidate"`
	// Regression: it passed in every base run and failed in a candidate run.
	Regression bool `json:"regression"`
}

// Group is one experiment with one parameter set, compared.
type Group struct {
	Experiment string            `json:"experiment"`
	Params     map[string]string `json:"params,omitempty"`
	// Base and Candidate are the runs of each side; runs with verdict error are listed but not
	// counted (their numbers are partial).
	Base      []RunRef `json:"base"`
	Candidate []RunRef `json:"candidate"`
	// Error says why the group could not be compared (no usable run on a side).
	Error    string          `json:"error,omitempty"`
	Measures []MeasureResult `json:"measures,omitempty"`
	Checks   []CheckChange   `json:"checks,omitempty"`
}

// key identifies the group: its experiment and every parameter.
func (g Group) key() string {
	keys := slices.Sorted(maps.Keys(g.Params))
	var b strings.Builder
	b.WriteString(g.Experiment)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, g.Params[k])
	}
	return b.String()
}

// Regressions lists the group's regressed measures and checks by name.
func (g Group) Regressions() []string {
	var out []string
	for _, m := range g.Measures {
		if m.Regression() {
			out = append(out, m.Name)
		}
	}
	for _, c := range g.Checks {
		if c.Regression {
			out = append(out, "check: "+c.Name)
		}
	}
	return out
}

// Comparison is two sets of runs compared experiment by experiment (comparison.json).
type Comparison struct {
	Schema string `json:"schema"`
	// Base and Candidate label the sides (a directory or a control plane).
	Base      string `json:"base"`
	Candidate string `json:"candidate"`
	// Suite, StartedAt and FinishedAt are set by upgrade-check: the suite it ran and when.
	Suite      string     `json:"suite,omitempty"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	// Interrupted is set by upgrade-check when a signal stopped it: the comparison is of the runs
	// made until then, for information only; it gives no verdict.
	Interrupted *SuiteInterruption `json:"interrupted,omitempty"`
	// Alpha, Confidence, Resamples and Seed are the statistics' settings.
	Alpha      float64 `json:"alpha"`
	Confidence float64 `json:"confidence"`
	Resamples  int     `json:"resamples"`
	Seed       uint64  `json:"seed"`
	Groups     []Group `json:"groups"`
}

// CompareOptions tune Compare; the zero value uses each measure's minimum effect and the
// statistics' defaults.
type CompareOptions struct {
	Stats stats.Options
	// MinRel, when set, replaces every gated measure's relative minimum effect (a fraction).
	MinRel *float64
}

// Compare groups the runs of each side by experiment and parameters and compares every group's
// measures and checks. A group present on one side only, or without a usable (not error) run
// on a side, is kept with its Error: the comparison is then incomplete.
func Compare(base, cand []Run, o CompareOptions) (*Comparison, error) {
	if len(base) == 0 || len(cand) == 0 {
		return nil, fmt.Errorf("compare needs at least one base and one candidate run")
	}
	so := o.Stats
	if so.Alpha == 0 {
		so.Alpha = 0.05
	}
	if so.Confidence == 0 {
		so.Confidence = 0.95
	}
	if so.Resamples == 0 {
		so.Resamples = 10000
	}
	c := &Comparison{Schema: ComparisonSchema, Alpha: so.Alpha, Confidence: so.Confidence, Resamples: so.Resamples, Seed: so.Seed}
	groups := map[string]*Group{}
	var order []string
	add := func(r Run, isBase bool) {
		g := Group{Experiment: r.Summary.Experiment, Params: r.Summary.Params}
		k := g.key()
		if groups[k] == nil {
			groups[k] = &g
			order = append(order, k)
		}
		ref := RunRef{Dir: r.Dir, ControlPlane: r.Summary.ControlPlane, Verdict: r.Summary.Verdict, Error: r.Summary.Error}
		if isBase {
			groups[k].Base = append(groups[k].Base, ref)
		} else {
			groups[k].Candidate = append(groups[k].Candidate, ref)
		}
	}
	byDir := map[string]*Summary{}
	for _, r := range base {
		add(r, true)
		byDir[r.Dir] = r.Summary
	}
	for _, r := range cand {
		add(r, false)
		byDir[r.Dir] = r.Summary
	}
	for _, k := range order {
		g := groups[k]
		bs, cs := usable(g.Base, byDir), usable(g.Candidate, byDir)
		switch {
		case len(bs) == 0:
			g.Error = "no usable base run"
		case len(cs) == 0:
			g.Error = "no usable candidate run"
		default:
			ms, err := compareMeasures(bs, cs, so, o.MinRel)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", g.Experiment, err)
			}
			g.Measures, g.Checks = ms, compareChecks(bs, cs)
		}
		c.Groups = append(c.Groups, *g)
	}
	return c, nil
}

func usable(refs []RunRef, byDir map[string]*Summary) []*Summary {
	var out []*Summary
	for _, r := range refs {
		if r.Verdict != VerdictError {
			out = append(out, byDir[r.Dir])
		}
	}
	return out
}

func compareMeasures(base, cand []*Summary, so stats.Options, minRel *float64) ([]MeasureResult, error) {
	var out []MeasureResult
	for _, m := range Measures {
		if minRel != nil && m.Gated {
			m.Min.Rel = *minRel
		}
		r := MeasureResult{Measure: m, Base: values(base, m.Value), Candidate: values(cand, m.Value)}
		if len(r.Base) == 0 && len(r.Candidate) == 0 {
			continue
		}
		r.Verdict = VerdictNotComparable
		if len(r.Base) > 0 && len(r.Candidate) > 0 {
			s, err := stats.Compare(r.Base, r.Candidate, m.Direction, m.Min, so)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.Name, err)
			}
			r.Stats = &s
			r.Verdict = s.Verdict
			if !m.Gated {
				r.Verdict = VerdictShown
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func values(runs []*Summary, f func(*Summary) (float64, bool)) []float64 {
	var out []float64
	for _, s := range runs {
		if v, ok := f(s); ok {
			out = append(out, v)
		}
	}
	return out
}

// Regressed reports whether any gated measure or check regressed.
func (c *Comparison) Regressed() bool {
	for _, g := range c.Groups {
		if len(g.Regressions()) > 0 {
			return true
		}
	}
	return false
}

// Incomplete lists the groups that could not be compared, with why.
func (c *Comparison) Incomplete() []string {
	var out []string
	for _, g := range c.Groups {
		if g.Error != "" {
			out = append(out, c.Label(g)+": "+g.Error)
		}
	}
	return out
}

// Label names a group: its experiment, plus the parameters that differ from other groups of the
// same experiment in this comparison.
func (c *Comparison) Label(g Group) string {
	var differ []string
	for _, o := range c.Groups {
		if o.Experiment != g.Experiment || o.key() == g.key() {
			continue
		}
		for k, v := range g.Params {
			if o.Params[k] != v && !slices.Contains(differ, k) {
				differ = append(differ, k)
			}
		}
	}
	sort.Strings(differ)
	label := g.Experiment
	for _, k := range differ {
		label += fmt.Sprintf(" %s=%s", k, g.Params[k])
	}
	return label
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
		out = append(out, CheckChange{Name: n, Base: b, Candidate: c, Regression: b == "pass" && (c == "fail" || c == "mixed")})
	}
	return out
}

func passfail(p bool) string {
	if p {
		return "pass"
	}
	return "fail"
}
