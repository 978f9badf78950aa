// Package capacity turns serviceentry-scale runs at several fleet sizes into a capacity report:
// the control plane's heap and resident memory fitted as a + b·endpoints + c·proxies by least
// squares over every measured step of every run, push time and convergence by fleet size, and
// how many endpoints a memory budget holds at a given fleet (meshchaos capacity).
package capacity

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/meshchaos/meshchaos/results"
)

// Schema is the value of Report.Schema (capacity.json).
const Schema = "meshchaos-capacity/v1"

// Files `meshchaos capacity` writes.
const (
	JSONFile     = "capacity.json"
	MarkdownFile = "capacity.md"
)

// Point is one measured state of a control plane: the baseline (no generated config) or a step.
type Point struct {
	Run            string  `json:"run"`
	Proxies        int     `json:"proxies"`
	ServiceEntries int     `json:"serviceEntries"`
	Endpoints      int     `json:"endpoints"`
	HeapBytes      int64   `json:"heapBytes"`
	RSSBytes       int64   `json:"rssBytes"`
	Baseline       bool    `json:"baseline,omitempty"`
	PushMeasured   bool    `json:"pushMeasured,omitempty"`
	PushP99Ms      float64 `json:"pushP99Ms,omitempty"`
	PushCount      int     `json:"pushCount,omitempty"`
	// ConvergeSeconds is the oracle client's time to the complete config after the step's apply;
	// FleetConvergeSeconds the whole fleet's (when FleetMeasured).
	ConvergeSeconds      float64 `json:"convergeSeconds,omitempty"`
	Converged            bool    `json:"converged,omitempty"`
	FleetMeasured        bool    `json:"fleetMeasured,omitempty"`
	FleetConverged       bool    `json:"fleetConverged,omitempty"`
	FleetConvergeSeconds float64 `json:"fleetConvergeSeconds,omitempty"`
}

// Points are a serviceentry-scale run's measured states, the baseline first (the verification
// step of a projection included: it is a measurement like the others). A run that measured no
// step, or a step whose heap or RSS was not read, is an error: a missing figure is never a zero
// in the fit.
func Points(dir string, s *results.Summary) ([]Point, error) {
	if s.Scale == nil {
		return nil, fmt.Errorf("%s: no scale steps in the summary (verdict %s%s)", dir, s.Verdict, errSuffix(s.Error))
	}
	if len(s.Scale.Steps) == 0 {
		return nil, fmt.Errorf("%s: no step was measured (verdict %s%s)", dir, s.Verdict, errSuffix(s.Error))
	}
	proxies, err := paramInt(s, "proxies", 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	var out []Point
	for i, st := range append([]results.ScaleStep{s.Scale.Baseline}, s.Scale.Steps...) {
		what := fmt.Sprintf("step %d (%d ServiceEntries)", i, st.ServiceEntries)
		if i == 0 {
			what = "the baseline"
		}
		if st.HeapBytes <= 0 {
			return nil, fmt.Errorf("%s: %s: heap not measured", dir, what)
		}
		if st.RSSBytes <= 0 {
			return nil, fmt.Errorf("%s: %s: RSS not measured (the control plane's memory cgroup was not read)", dir, what)
		}
		p := Point{Run: dir, Proxies: proxies, ServiceEntries: st.ServiceEntries, Endpoints: st.Endpoints,
			HeapBytes: st.HeapBytes, RSSBytes: st.RSSBytes, Baseline: i == 0}
		if i > 0 {
			p.PushMeasured, p.PushP99Ms, p.PushCount = st.PushMeasured, st.PushP99Ms, st.PushCount
			p.ConvergeSeconds, p.Converged = st.ConvergeSeconds, st.Converged
			p.FleetMeasured, p.FleetConverged, p.FleetConvergeSeconds = st.FleetMeasured, st.FleetConverged, st.FleetConvergeSeconds
		}
		out = append(out, p)
	}
	return out, nil
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return ": " + e
}

func paramInt(s *results.Summary, name string, def int) (int, error) {
	v, ok := s.Params[name]
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("parameter %s=%q: not an integer", name, v)
	}
	return n, nil
}

// Fit is y = A + B·endpoints + C·proxies (+ D·endpoints·proxies with Cross) by least squares.
// Without two fleet sizes among the points C and D cannot be told from A and B: then
// ProxiesFitted is false and both are 0.
type Fit struct {
	A             float64 `json:"a"`
	B             float64 `json:"perEndpoint"`
	C             float64 `json:"perProxy"`
	ProxiesFitted bool    `json:"proxiesFitted"`
	// Cross adds the term D·endpoints·proxies: what each proxy holds per endpoint (its
	// subscriptions, the config pushed to it), which a + b·E + c·P cannot express.
	Cross bool    `json:"cross,omitempty"`
	D     float64 `json:"perEndpointPerProxy,omitempty"`
	// R2 is the coefficient of determination; RMS the residuals' root mean square (y's unit).
	R2     float64 `json:"r2"`
	RMS    float64 `json:"rms"`
	Points int     `json:"points"`
	// The range of the points: what the fit says something about.
	EndpointsMin int `json:"endpointsMin"`
	EndpointsMax int `json:"endpointsMax"`
	ProxiesMin   int `json:"proxiesMin"`
	ProxiesMax   int `json:"proxiesMax"`
}

// At is the fitted y at the given endpoints and proxies.
func (f Fit) At(endpoints, proxies float64) float64 {
	return f.A + f.B*endpoints + f.C*proxies + f.D*endpoints*proxies
}

// PerEndpointAt is the fitted cost of one more endpoint at a fleet size: B + D·proxies.
func (f Fit) PerEndpointAt(proxies float64) float64 { return f.B + f.D*proxies }

// FitLinear fits y(p) = A + B·endpoints + C·proxies to the points, and with cross the term
// D·endpoints·proxies too. It needs at least two distinct endpoint counts (and, for C and D,
// two fleet sizes), and one point more than it fits.
func FitLinear(points []Point, y func(Point) float64, cross bool) (Fit, error) {
	if len(points) == 0 {
		return Fit{}, errors.New("fit: no points")
	}
	f := Fit{Points: len(points), EndpointsMin: points[0].Endpoints, EndpointsMax: points[0].Endpoints,
		ProxiesMin: points[0].Proxies, ProxiesMax: points[0].Proxies}
	for _, p := range points {
		f.EndpointsMin, f.EndpointsMax = min(f.EndpointsMin, p.Endpoints), max(f.EndpointsMax, p.Endpoints)
		f.ProxiesMin, f.ProxiesMax = min(f.ProxiesMin, p.Proxies), max(f.ProxiesMax, p.Proxies)
	}
	if f.EndpointsMin == f.EndpointsMax {
		return Fit{}, fmt.Errorf("fit: every point has %d endpoints; want at least two sizes", f.EndpointsMin)
	}
	f.ProxiesFitted = f.ProxiesMin != f.ProxiesMax
	f.Cross = cross && f.ProxiesFitted
	cols := 2
	if f.ProxiesFitted {
		cols = 3
	}
	if f.Cross {
		cols = 4
	}
	if len(points) <= cols {
		return Fit{}, fmt.Errorf("fit: %d points for %d coefficients; want at least %d", len(points), cols, cols+1)
	}
	// Normal equations XᵀX β = Xᵀy, with the columns scaled to unit range so that endpoints in
	// the hundreds of thousands and a constant column solve well.
	emax, pmax := float64(f.EndpointsMax), float64(max(f.ProxiesMax, 1))
	scale := []float64{1, emax, pmax, emax * pmax}
	if !f.ProxiesFitted {
		scale = scale[:2]
	}
	scale = scale[:cols]
	row := func(p Point) []float64 {
		e, n := float64(p.Endpoints), float64(p.Proxies)
		x := []float64{1, e, n, e * n}[:cols]
		for i := range x {
			x[i] /= scale[i]
		}
		return x
	}
	ata := make([][]float64, cols)
	for i := range ata {
		ata[i] = make([]float64, cols+1)
	}
	for _, p := range points {
		x, v := row(p), y(p)
		for i := range cols {
			for j := range cols {
				ata[i][j] += x[i] * x[j]
			}
			ata[i][cols] += x[i] * v
		}
	}
	beta, err := solve(ata)
	if err != nil {
		return Fit{}, fmt.Errorf("fit: %w", err)
	}
	for i := range beta {
		beta[i] /= scale[i]
	}
	f.A, f.B = beta[0], beta[1]
	if f.ProxiesFitted {
		f.C = beta[2]
	}
	if f.Cross {
		f.D = beta[3]
	}
	var mean, ssTot, ssRes float64
	for _, p := range points {
		mean += y(p)
	}
	mean /= float64(len(points))
	for _, p := range points {
		v := y(p)
		r := v - f.At(float64(p.Endpoints), float64(p.Proxies))
		ssRes += r * r
		ssTot += (v - mean) * (v - mean)
	}
	f.RMS = math.Sqrt(ssRes / float64(len(points)))
	if ssTot > 0 {
		f.R2 = 1 - ssRes/ssTot
	}
	return f, nil
}

// solve solves the augmented system m (n rows, n+1 columns) by Gaussian elimination with
// partial pivoting.
func solve(m [][]float64) ([]float64, error) {
	n := len(m)
	for c := range n {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[p][c]) {
				p = r
			}
		}
		if math.Abs(m[p][c]) < 1e-12 {
			return nil, errors.New("the points do not determine the coefficients (singular system)")
		}
		m[c], m[p] = m[p], m[c]
		for r := c + 1; r < n; r++ {
			k := m[r][c] / m[c][c]
			for j := c; j <= n; j++ {
				m[r][j] -= k * m[c][j]
			}
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		v := m[r][n]
		for j := r + 1; j < n; j++ {
			v -= m[r][j] * x[j]
		}
		x[r] = v / m[r][r]
	}
	return x, nil
}

// Projection is how many endpoints a memory budget holds at a fleet size, by the RSS fit.
type Projection struct {
	// Cross: by the fit with the endpoints·proxies term.
	Cross          bool  `json:"cross,omitempty"`
	Proxies        int   `json:"proxies"`
	BudgetBytes    int64 `json:"budgetBytes"`
	Endpoints      int   `json:"endpoints"`
	ServiceEntries int   `json:"serviceEntries"`
	// Extrapolated: the answer lies outside the range the fit was made on (endpoints or proxies).
	Extrapolated bool `json:"extrapolated,omitempty"`
	// None: the fleet alone (the fit's constant and per-proxy terms) fills the budget.
	None bool `json:"none,omitempty"`
}

// Project solves f(endpoints, proxies) = budget for endpoints (and ServiceEntries of eps
// endpoints each). A fit whose memory does not grow with endpoints cannot project: an error.
func Project(f Fit, budget int64, proxies, eps int) (Projection, error) {
	p := Projection{Proxies: proxies, BudgetBytes: budget, Cross: f.Cross}
	per := f.PerEndpointAt(float64(proxies))
	if per <= 0 {
		return p, fmt.Errorf("the fit does not grow with endpoints at %d proxies (%.1f B per endpoint): no projection", proxies, per)
	}
	if eps <= 0 {
		return p, fmt.Errorf("endpoints per ServiceEntry %d: want at least 1", eps)
	}
	e := (float64(budget) - f.A - f.C*float64(proxies)) / per
	if e <= 0 {
		p.None = true
		p.Extrapolated = proxies > f.ProxiesMax || proxies < f.ProxiesMin
		return p, nil
	}
	p.Endpoints = int(math.Floor(e))
	p.ServiceEntries = p.Endpoints / eps
	p.Extrapolated = p.Endpoints > f.EndpointsMax || p.Endpoints < f.EndpointsMin || proxies > f.ProxiesMax || proxies < f.ProxiesMin
	return p, nil
}

// Run is one serviceentry-scale run a report is built from.
type Run struct {
	ControlPlane string           `json:"controlPlane"`
	Dir          string           `json:"dir"`
	Summary      *results.Summary `json:"-"`
}

// RunRef is a run as the report lists it.
type RunRef struct {
	Dir     string          `json:"dir"`
	Proxies int             `json:"proxies"`
	Verdict results.Verdict `json:"verdict"`
	Seconds float64         `json:"seconds,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// FleetRow is one fleet size's push time and convergence at one step size, over the runs.
type FleetRow struct {
	Proxies        int     `json:"proxies"`
	ServiceEntries int     `json:"serviceEntries"`
	Endpoints      int     `json:"endpoints"`
	HeapBytes      int64   `json:"heapBytes"`
	RSSBytes       int64   `json:"rssBytes"`
	PushP99Ms      float64 `json:"pushP99Ms"`
	PushMeasured   bool    `json:"pushMeasured"`
	PushCount      int     `json:"pushCount"`
	// ConvergeSeconds is the oracle client's; FleetConvergeSeconds the fleet's (when measured;
	// FleetConverged false: the wait ended first and the time is how long it waited).
	ConvergeSeconds      float64 `json:"convergeSeconds"`
	Converged            bool    `json:"converged"`
	FleetMeasured        bool    `json:"fleetMeasured"`
	FleetConverged       bool    `json:"fleetConverged"`
	FleetConvergeSeconds float64 `json:"fleetConvergeSeconds"`
}

// ControlPlane is one control plane's part of the report.
type ControlPlane struct {
	Name   string   `json:"name"`
	Runs   []RunRef `json:"runs"`
	Points []Point  `json:"points"`
	Heap   *Fit     `json:"heapFit,omitempty"`
	RSS    *Fit     `json:"rssFit,omitempty"`
	// HeapCross and RSSCross are the fits with the endpoints·proxies term (two fleet sizes or more).
	HeapCross *Fit `json:"heapCrossFit,omitempty"`
	RSSCross  *Fit `json:"rssCrossFit,omitempty"`
	// Rows are the steps, by fleet size then ServiceEntries.
	Rows        []FleetRow   `json:"rows"`
	Projections []Projection `json:"projections,omitempty"`
	// Errors are the runs that gave no figures and the fits or projections that could not be made.
	Errors []string `json:"errors,omitempty"`
}

// Report is the capacity report (capacity.json).
type Report struct {
	Schema      string     `json:"schema"`
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	FinishedAt  *time.Time `json:"finishedAt,omitempty"`
	BudgetBytes int64      `json:"budgetBytes"`
	// EndpointsPerServiceEntry turns projected endpoints into ServiceEntries.
	EndpointsPerServiceEntry int `json:"endpointsPerServiceEntry"`
	// Fleets are the fleet sizes projected for.
	Fleets        []int          `json:"fleets"`
	ControlPlanes []ControlPlane `json:"controlPlanes"`
	// Notes say how the figures were taken (machine, load, wall time): free text.
	Notes []string `json:"notes,omitempty"`
}

// Build makes the report from runs, in the order their control planes first appear. budget 0
// projects nothing; fleets are the fleet sizes to project for (default: the runs').
func Build(runs []Run, budget int64, fleets []int) *Report {
	r := &Report{Schema: Schema, BudgetBytes: budget}
	byCP := map[string]*ControlPlane{}
	var order []string
	seen := map[int]bool{}
	for _, run := range runs {
		cp := byCP[run.ControlPlane]
		if cp == nil {
			cp = &ControlPlane{Name: run.ControlPlane}
			byCP[run.ControlPlane] = cp
			order = append(order, run.ControlPlane)
		}
		ref := RunRef{Dir: run.Dir}
		if run.Summary == nil {
			ref.Verdict, ref.Error = results.VerdictError, "no summary"
			cp.Runs = append(cp.Runs, ref)
			cp.Errors = append(cp.Errors, fmt.Sprintf("%s: no summary", run.Dir))
			continue
		}
		s := run.Summary
		ref.Verdict, ref.Error = s.Verdict, s.Error
		ref.Proxies, _ = paramInt(s, "proxies", 0)
		if !s.StartedAt.IsZero() && !s.FinishedAt.IsZero() {
			ref.Seconds = s.FinishedAt.Sub(s.StartedAt).Seconds()
		}
		if eps, err := paramInt(s, "endpoints", 10); err == nil && r.EndpointsPerServiceEntry == 0 {
			r.EndpointsPerServiceEntry = eps
		}
		cp.Runs = append(cp.Runs, ref)
		pts, err := Points(run.Dir, s)
		if err != nil {
			cp.Errors = append(cp.Errors, err.Error())
			continue
		}
		seen[ref.Proxies] = true
		cp.Points = append(cp.Points, pts...)
	}
	if r.EndpointsPerServiceEntry == 0 {
		r.EndpointsPerServiceEntry = 10
	}
	r.Fleets = fleets
	if len(r.Fleets) == 0 {
		for p := range seen {
			r.Fleets = append(r.Fleets, p)
		}
		sort.Ints(r.Fleets)
	}
	for _, name := range order {
		cp := byCP[name]
		cp.fit(budget, r.Fleets, r.EndpointsPerServiceEntry)
		r.ControlPlanes = append(r.ControlPlanes, *cp)
	}
	return r
}

func (cp *ControlPlane) fit(budget int64, fleets []int, eps int) {
	for _, p := range cp.Points {
		if p.Baseline {
			continue
		}
		cp.Rows = append(cp.Rows, FleetRow{Proxies: p.Proxies, ServiceEntries: p.ServiceEntries, Endpoints: p.Endpoints,
			HeapBytes: p.HeapBytes, RSSBytes: p.RSSBytes, PushP99Ms: p.PushP99Ms, PushMeasured: p.PushMeasured, PushCount: p.PushCount,
			ConvergeSeconds: p.ConvergeSeconds, Converged: p.Converged,
			FleetMeasured: p.FleetMeasured, FleetConverged: p.FleetConverged, FleetConvergeSeconds: p.FleetConvergeSeconds})
	}
	slices.SortStableFunc(cp.Rows, func(a, b FleetRow) int {
		if a.Proxies != b.Proxies {
			return a.Proxies - b.Proxies
		}
		return a.ServiceEntries - b.ServiceEntries
	})
	if len(cp.Points) == 0 {
		cp.Errors = append(cp.Errors, "no run measured a step: nothing to fit")
		return
	}
	heap := func(p Point) float64 { return float64(p.HeapBytes) }
	rss := func(p Point) float64 { return float64(p.RSSBytes) }
	if f, err := FitLinear(cp.Points, heap, false); err == nil {
		cp.Heap = &f
	} else {
		cp.Errors = append(cp.Errors, "heap: "+err.Error())
	}
	if f, err := FitLinear(cp.Points, heap, true); err == nil && f.Cross {
		cp.HeapCross = &f
	}
	f, err := FitLinear(cp.Points, rss, false)
	if err != nil {
		cp.Errors = append(cp.Errors, "RSS: "+err.Error())
		return
	}
	cp.RSS = &f
	fits := []Fit{f}
	if f, err := FitLinear(cp.Points, rss, true); err == nil && f.Cross {
		cp.RSSCross = &f
		fits = append(fits, f)
	}
	if budget <= 0 {
		return
	}
	for _, f := range fits {
		for _, n := range fleets {
			p, err := Project(f, budget, n, eps)
			if err != nil {
				cp.Errors = append(cp.Errors, fmt.Sprintf("projection at %d proxies: %v", n, err))
				continue
			}
			cp.Projections = append(cp.Projections, p)
		}
	}
}
