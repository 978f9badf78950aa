package results

import (
	"fmt"
	"image/color"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart is one rendered chart: files relative to the run directory.
type Chart struct {
	Title string
	SVG   string
	PNG   string
}

// Chart names; each is written as charts/<name>.svg and charts/<name>.png.
const (
	ChartErrors  = "errors"
	ChartLatency = "latency"
	ChartMemory  = "memory"
	// ChartPushes: xDS responses per second by type, stacked, with the markers.
	ChartPushes = "pushes"
	// ChartPushTime and ChartConvergence: the push-time and convergence histograms.
	ChartPushTime    = "push-time"
	ChartConvergence = "convergence"
)

// xdsPushesMetric is the per-proxy, per-type push counter the pushes chart reads from the
// scraped series: istiod's name, which the reference control plane shares.
const xdsPushesMetric = "pilot_xds_pushes"

// markerKinds are the event kinds drawn as vertical markers: the things that happen to the system
// (chaos, pod lifecycle, gates), not the harness's own bookkeeping.
var markerKinds = []string{"chaos.", "pod.", "gate.", "cp."}

// IsMarker says whether an event of this kind is drawn as a marker on the charts.
func IsMarker(kind string) bool {
	for _, p := range markerKinds {
		if strings.HasPrefix(kind, p) {
			return true
		}
	}
	return false
}

var palette = []color.Color{
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, // red
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, // blue
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, // orange
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, // green
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, // purple
	color.RGBA{0x8c, 0x56, 0x4b, 0xff}, // brown
}

type line struct {
	name string
	xys  plotter.XYs
	dash bool
	// step draws each point as a flat segment to the next: a per-second value covers its whole
	// second instead of ramping from the previous one.
	step bool
}

// closeSteps appends a point one second after the last so the final second of a step line is
// drawn too.
func closeSteps(xys plotter.XYs) plotter.XYs {
	if len(xys) == 0 {
		return xys
	}
	last := xys[len(xys)-1]
	return append(xys, plotter.XY{X: last.X + 1, Y: last.Y})
}

// Marker is an event drawn on the charts as a numbered vertical line; the reports list the
// numbers with the events they stand for.
type Marker struct {
	N      int
	Offset float64 // seconds since the run started
	Event  Event
}

// Markers numbers the run's marker events in time order (events are recorded as seen, and one
// taken from the API may be older than one recorded before it).
func Markers(s *Summary) []Marker {
	events := append([]Event(nil), s.Events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].At.Before(events[j].At) })
	var out []Marker
	for _, e := range events {
		if IsMarker(e.Kind) {
			out = append(out, Marker{N: len(out) + 1, Offset: e.At.Sub(s.StartedAt).Seconds(), Event: e})
		}
	}
	return out
}

// markerLabels groups markers closer than a few hundred milliseconds under one label ("4,5") so
// their numbers do not overprint.
func markerLabels(ms []Marker) []Marker {
	var out []Marker
	var labels []string
	for _, m := range ms {
		if n := len(out); n > 0 && m.Offset-out[n-1].Offset < 0.3 {
			labels[n-1] += "," + fmt.Sprint(m.N)
			continue
		}
		out = append(out, m)
		labels = append(labels, fmt.Sprint(m.N))
	}
	for i := range out {
		out[i].Event.Detail = labels[i]
	}
	return out
}

// RenderCharts draws the run's charts into dir/charts and returns those it drew (a chart without
// data is skipped). The x axis of every chart is seconds since the run started, so markers line
// up across charts.
func RenderCharts(dir string, s *Summary) ([]Chart, error) {
	if err := MkdirAll(filepath.Join(dir, ChartsDir)); err != nil {
		return nil, fmt.Errorf("render charts: %w", err)
	}
	markers := markerLabels(Markers(s))
	ax := timeAxis(s)
	var charts []Chart
	draw := func(name, title, ylabel string, lines []line, ymin0 bool) error {
		if len(lines) == 0 {
			return nil
		}
		c, err := renderChart(dir, name, title, ylabel, lines, markers, ax, ymin0)
		if err != nil {
			return fmt.Errorf("render %s chart: %w", name, err)
		}
		charts = append(charts, c)
		return nil
	}
	if t := s.Traffic; t != nil && len(t.Series) > 0 {
		off := t.StartedAt.Sub(s.StartedAt).Seconds()
		rate := line{name: "errors (% of requests)"}
		flags := map[string]plotter.XYs{}
		for _, sec := range t.Series {
			x := off + float64(sec.T)
			pct := 0.0
			if sec.Requests > 0 {
				pct = 100 * float64(sec.Errors) / float64(sec.Requests)
			}
			rate.xys = append(rate.xys, plotter.XY{X: x, Y: pct})
		}
		for _, f := range SortedKeys(t.ByFlag) {
			for _, sec := range t.Series {
				pct := 0.0
				if sec.Requests > 0 {
					pct = 100 * float64(sec.ByFlag[f]) / float64(sec.Requests)
				}
				flags[f] = append(flags[f], plotter.XY{X: off + float64(sec.T), Y: pct})
			}
		}
		rate.xys, rate.step = closeSteps(rate.xys), true
		lines := []line{rate}
		for _, f := range SortedKeys(flags) {
			lines = append(lines, line{name: "flag " + f + " (%)", xys: closeSteps(flags[f]), dash: true, step: true})
		}
		if err := draw(ChartErrors, "Errors per second", "% of requests", lines, true); err != nil {
			return nil, err
		}
		var p50, p99, max line
		p50.name, p99.name, max.name = "p50", "p99", "max"
		max.dash = true
		for _, sec := range t.Series {
			if sec.Requests == 0 {
				continue
			}
			x := off + float64(sec.T)
			p50.xys = append(p50.xys, plotter.XY{X: x, Y: sec.LatencyMs.P50})
			p99.xys = append(p99.xys, plotter.XY{X: x, Y: sec.LatencyMs.P99})
			max.xys = append(max.xys, plotter.XY{X: x, Y: sec.LatencyMs.Max})
		}
		for _, l := range []*line{&p50, &p99, &max} {
			l.xys, l.step = closeSteps(l.xys), true
		}
		if err := draw(ChartLatency, "Latency per second", "ms", []line{p50, p99, max}, true); err != nil {
			return nil, err
		}
	}
	if cp := s.ControlPlaneStats; cp != nil && len(cp.Memory) > 0 {
		mem := line{name: "control plane memory (MiB)"}
		for _, m := range cp.Memory {
			mem.xys = append(mem.xys, plotter.XY{X: m.At.Sub(s.StartedAt).Seconds(), Y: m.Value / (1 << 20)})
		}
		lines := []line{mem}
		if cp.MemoryLimit > 0 {
			lim := line{name: "limit", dash: true}
			lim.xys = plotter.XYs{{X: mem.xys[0].X, Y: float64(cp.MemoryLimit) / (1 << 20)}, {X: mem.xys[len(mem.xys)-1].X, Y: float64(cp.MemoryLimit) / (1 << 20)}}
			lines = append(lines, lim)
		}
		if err := draw(ChartMemory, "Control-plane memory", "MiB", lines, true); err != nil {
			return nil, err
		}
	}
	if cp := s.ControlPlaneStats; cp != nil {
		if types, from, counts := pushesPerSecond(cp.Metrics); len(types) > 0 {
			c, err := renderStacked(dir, ChartPushes, "xDS pushes per second by type (stacked)", types, from.Sub(s.StartedAt).Seconds(), counts, markers, ax)
			if err != nil {
				return nil, fmt.Errorf("render %s chart: %w", ChartPushes, err)
			}
			charts = append(charts, c)
		}
		if h := cp.PushTime; h != nil && h.Count > 0 {
			c, err := renderHistogram(dir, ChartPushTime, "Push time per response (pilot_xds_push_time)", h)
			if err != nil {
				return nil, fmt.Errorf("render %s chart: %w", ChartPushTime, err)
			}
			charts = append(charts, c)
		}
	}
	if cv := s.Convergence; cv != nil && cv.Latency.Count > 0 {
		c, err := renderHistogram(dir, ChartConvergence, "Endpoint-change convergence at the proxies", &cv.Latency)
		if err != nil {
			return nil, fmt.Errorf("render %s chart: %w", ChartConvergence, err)
		}
		charts = append(charts, c)
	}
	return charts, nil
}

// pushesPerSecond bins the growth of the per-type push counter into whole seconds (a counter
// reset, a restart, counts from zero): the types, the first second, and per type the count in
// each second from it.
func pushesPerSecond(series []Series) (types []string, from time.Time, counts map[string][]float64) {
	bins := map[string]map[time.Time]float64{}
	var last time.Time
	for _, sr := range series {
		if sr.Name != xdsPushesMetric || sr.Labels["type"] == "" {
			continue
		}
		typ := sr.Labels["type"]
		for i := 1; i < len(sr.Samples); i++ {
			d := sr.Samples[i].Value - sr.Samples[i-1].Value
			if d < 0 {
				d = sr.Samples[i].Value
			}
			if d == 0 {
				continue
			}
			sec := sr.Samples[i].At.UTC().Truncate(time.Second)
			if bins[typ] == nil {
				bins[typ] = map[time.Time]float64{}
			}
			bins[typ][sec] += d
			if from.IsZero() || sec.Before(from) {
				from = sec
			}
			if sec.After(last) {
				last = sec
			}
		}
	}
	if len(bins) == 0 {
		return nil, time.Time{}, nil
	}
	counts = map[string][]float64{}
	for _, typ := range SortedKeys(bins) {
		types = append(types, typ)
		for t := from; !t.After(last); t = t.Add(time.Second) {
			counts[typ] = append(counts[typ], bins[typ][t])
		}
	}
	return types, from, counts
}

// renderStacked draws per-second counts as stacked bars, the first second at x0 (seconds since
// the run started), with the run's markers.
func renderStacked(dir, name, title string, types []string, x0 float64, counts map[string][]float64, markers []Marker, ax axis) (Chart, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds since run start"
	p.Y.Label.Text = "responses per second"
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	n := len(counts[types[0]])
	xmin, xmax := ax.span(x0-1, x0+float64(n)+1)
	// The x range holds xmax-xmin seconds over about 8 inches of plot; a bar fills 80 % of its
	// second.
	width := vg.Length(8*vg.Inch) / vg.Length(xmax-xmin) * 0.8
	var below *plotter.BarChart
	ymax := 0.0
	for i := 0; i < n; i++ {
		sum := 0.0
		for _, typ := range types {
			sum += counts[typ][i]
		}
		ymax = max(ymax, sum)
	}
	for i, typ := range types {
		b, err := plotter.NewBarChart(plotter.Values(counts[typ]), width)
		if err != nil {
			return Chart{}, err
		}
		b.XMin = x0 + 0.5 // second [t, t+1) centred on t+0.5
		b.Color = palette[i%len(palette)]
		b.LineStyle.Width = 0
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		p.Legend.Add(typ, b)
	}
	if ymax == 0 {
		ymax = 1
	}
	if err := ax.shade(p, ymax*1.4); err != nil {
		return Chart{}, err
	}
	p.Legend.YOffs = -legendDrop * 1.6 // its swatches are taller than a line's
	if err := addMarkers(p, markers, xmin, xmax, ymax); err != nil {
		return Chart{}, err
	}
	p.Y.Min, p.Y.Max = 0, ymax*1.4
	p.X.Min, p.X.Max = xmin, xmax
	return saveChart(p, dir, name, title)
}

// renderHistogram draws a histogram's buckets (counts per bucket, not cumulative) as bars.
func renderHistogram(dir, name, title string, h *Histogram) (Chart, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %d samples, P50 %.0f ms, P99 %.0f ms", title, h.Count, h.P50Ms, h.P99Ms)
	p.Y.Label.Text = "count"
	p.X.Label.Text = "ms (bucket upper bound)"
	var vals plotter.Values
	var names []string
	prev := int64(0)
	for _, b := range h.Buckets {
		if b.Count-prev == 0 && len(vals) == 0 {
			continue // the empty buckets before the first value
		}
		vals = append(vals, float64(b.Count-prev))
		if b.LeMs < 0 {
			names = append(names, "+Inf")
		} else {
			names = append(names, fmt.Sprintf("≤%g", b.LeMs))
		}
		prev = b.Count
	}
	// Trailing empty buckets say nothing.
	for len(vals) > 1 && vals[len(vals)-1] == 0 {
		vals, names = vals[:len(vals)-1], names[:len(names)-1]
	}
	if len(vals) == 0 {
		return Chart{}, fmt.Errorf("histogram %s has no buckets", name)
	}
	b, err := plotter.NewBarChart(vals, vg.Length(8*vg.Inch)/vg.Length(len(vals))*0.7)
	if err != nil {
		return Chart{}, err
	}
	b.Color = palette[1]
	b.LineStyle.Width = 0
	p.Add(plotter.NewGrid(), b)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(vals))-0.5
	p.X.Tick.Label.Font.Size = vg.Points(7)
	p.Y.Min = 0
	return saveChart(p, dir, name, title)
}

func renderChart(dir, name, title, ylabel string, lines []line, markers []Marker, ax axis, ymin0 bool) (Chart, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds since run start"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)

	ymax := 0.0
	xmin, xmax := 0.0, 0.0
	first := true
	for _, l := range lines {
		for _, xy := range l.xys {
			if first || xy.X < xmin {
				xmin = xy.X
			}
			if first || xy.X > xmax {
				xmax = xy.X
			}
			first = false
			if xy.Y > ymax {
				ymax = xy.Y
			}
		}
	}
	if ymax == 0 {
		ymax = 1
	}
	// Headroom above the data: the marker numbers just above it, the legend above them.
	top := ymax * (1.25 + 0.08*float64(len(lines)))
	xmin, xmax = ax.span(xmin, xmax)
	if err := ax.shade(p, top); err != nil {
		return Chart{}, err
	}
	p.Legend.YOffs = -legendDrop
	for i, l := range lines {
		if len(l.xys) == 0 {
			continue
		}
		pl, err := plotter.NewLine(l.xys)
		if err != nil {
			return Chart{}, err
		}
		pl.Color = palette[i%len(palette)]
		pl.Width = vg.Points(1.5)
		if l.step {
			pl.StepStyle = plotter.PostStep
		}
		if l.dash {
			pl.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(pl)
		p.Legend.Add(l.name, pl)
	}
	if err := addMarkers(p, markers, xmin, xmax, ymax); err != nil {
		return Chart{}, err
	}
	if ymin0 {
		p.Y.Min = 0
	}
	p.Y.Max = top
	p.X.Min, p.X.Max = xmin, xmax
	if xmax <= xmin {
		p.X.Max = xmin + 1
	}
	return saveChart(p, dir, name, title)
}

// axis is the time axis every timeline chart of a run shares (seconds since the run started),
// with the bands drawn behind the data: the phases, alternately shaded and named, and the fault
// windows (from chaos.injected to chaos.cleared, or to the end) in light red.
type axis struct {
	min, max float64
	phases   []band
	faults   []band
}

type band struct {
	name     string
	from, to float64
}

// timeAxis is the run's axis: from its start to its end (or the last phase, event or sample
// seen, for a run that did not finish).
func timeAxis(s *Summary) axis {
	ax := axis{}
	off := func(t time.Time) float64 { return t.Sub(s.StartedAt).Seconds() }
	end := 0.0
	if s.FinishedAt != nil {
		end = off(*s.FinishedAt)
	}
	for _, ph := range s.Phases {
		to := end
		if ph.FinishedAt != nil {
			to = off(*ph.FinishedAt)
		}
		end = max(end, off(ph.StartedAt), to)
		ax.phases = append(ax.phases, band{name: ph.Name, from: off(ph.StartedAt), to: to})
	}
	open := map[string]float64{}
	events := append([]Event(nil), s.Events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].At.Before(events[j].At) })
	for _, e := range events {
		end = max(end, off(e.At))
		switch e.Kind {
		case "chaos.injected":
			open[e.Object] = off(e.At)
		case "chaos.cleared":
			if from, ok := open[e.Object]; ok {
				ax.faults = append(ax.faults, band{name: e.Object, from: from, to: off(e.At)})
				delete(open, e.Object)
			}
		}
	}
	for _, name := range SortedKeys(open) {
		ax.faults = append(ax.faults, band{name: name, from: open[name], to: end})
	}
	for i := range ax.phases {
		if ax.phases[i].to < ax.phases[i].from {
			ax.phases[i].to = end // a phase still running
		}
	}
	ax.max = end
	return ax
}

// span is the chart's x range: the run's axis, widened to hold data outside it (samples taken
// after the end, say).
func (a axis) span(dataMin, dataMax float64) (float64, float64) {
	lo, hi := min(a.min, dataMin), max(a.max, dataMax)
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// legendDrop moves a chart's legend below the phase names along its top edge.
const legendDrop = vg.Length(10)

var (
	phaseShade = color.RGBA{0xf2, 0xf2, 0xf2, 0xff}
	faultShade = color.NRGBA{0xd6, 0x27, 0x28, 0x22}
)

// shade draws the phase and fault bands up to top, the phase names along the top edge.
func (a axis) shade(p *plot.Plot, top float64) error {
	rect := func(b band, c color.Color, y0, y1 float64) error {
		if b.to <= b.from {
			return nil
		}
		poly, err := plotter.NewPolygon(plotter.XYs{{X: b.from, Y: y0}, {X: b.to, Y: y0}, {X: b.to, Y: y1}, {X: b.from, Y: y1}})
		if err != nil {
			return err
		}
		poly.Color = c
		poly.LineStyle.Width = 0
		p.Add(poly)
		return nil
	}
	for i, ph := range a.phases {
		if i%2 == 1 {
			if err := rect(ph, phaseShade, 0, top); err != nil {
				return err
			}
		}
	}
	names, rightAligned := a.phaseNames(top)
	for _, f := range a.faults {
		if err := rect(f, faultShade, 0, top*0.9); err != nil {
			return err
		}
	}
	return addLabels(p, names, 7, color.Gray{0x80}, func(i int, s *text.Style) {
		s.YAlign = draw.YTop
		if rightAligned[i] {
			s.XAlign = draw.XRight
		}
	})
}

// phaseNames places the phases' names along the top edge: each from its phase's start, but a
// phase that starts near the axis's end (teardown) is named leftwards from its end (right
// aligned), so that its name is not cut off at the chart's right edge.
func (a axis) phaseNames(top float64) (plotter.XYLabels, []bool) {
	var names plotter.XYLabels
	var right []bool
	for _, ph := range a.phases {
		late := a.max > a.min && ph.from > a.min+0.85*(a.max-a.min)
		if late {
			names.XYs = append(names.XYs, plotter.XY{X: max(ph.to, ph.from), Y: top * 0.97})
			names.Labels = append(names.Labels, ph.name+" ")
		} else {
			names.XYs = append(names.XYs, plotter.XY{X: ph.from, Y: top * 0.97})
			names.Labels = append(names.Labels, " "+ph.name)
		}
		right = append(right, late)
	}
	return names, right
}

// addLabels adds small grey labels (markers' numbers, phases' names) of size pt to p.
func addLabels(p *plot.Plot, labels plotter.XYLabels, pt float64, c color.Color, align func(i int, s *text.Style)) error {
	if len(labels.Labels) == 0 {
		return nil
	}
	lb, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].Font.Size = vg.Points(pt)
		lb.TextStyle[i].Color = c
		align(i, &lb.TextStyle[i])
	}
	p.Add(lb)
	return nil
}

// saveChart writes p as charts/<name>.svg and .png under dir.
func saveChart(p *plot.Plot, dir, name, title string) (Chart, error) {
	c := Chart{Title: title, SVG: filepath.Join(ChartsDir, name+".svg"), PNG: filepath.Join(ChartsDir, name+".png")}
	for _, f := range []string{c.SVG, c.PNG} {
		if err := p.Save(9*vg.Inch, 3.2*vg.Inch, filepath.Join(dir, f)); err != nil {
			return Chart{}, err
		}
	}
	return c, nil
}

// addMarkers draws the markers between xmin and xmax as numbered dashed verticals up to just
// above ymax.
func addMarkers(p *plot.Plot, markers []Marker, xmin, xmax, ymax float64) error {
	var labels plotter.XYLabels
	for _, m := range markers {
		if m.Offset < xmin || m.Offset > xmax {
			continue // outside what this chart shows
		}
		ml, err := plotter.NewLine(plotter.XYs{{X: m.Offset, Y: 0}, {X: m.Offset, Y: ymax * 1.1}})
		if err != nil {
			return err
		}
		ml.Color = color.Gray{0x70}
		ml.Width = vg.Points(0.8)
		ml.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(ml)
		labels.XYs = append(labels.XYs, plotter.XY{X: m.Offset, Y: ymax * 1.1})
		labels.Labels = append(labels.Labels, m.Event.Detail)
	}
	return addLabels(p, labels, 8, color.Gray{0x30}, func(_ int, s *text.Style) { s.XAlign = draw.XCenter })
}
