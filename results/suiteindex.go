package results

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WriteSuite writes the suite's combined junit.xml, suite.json and index.html into dir; nights
// is the history (oldest first, ending with s) or nil without one.
func WriteSuite(dir string, s *SuiteResult, nights []SuiteResult) error {
	j, err := SuiteJUnit(s)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, JUnitFile), j); err != nil {
		return fmt.Errorf("write suite junit: %w", err)
	}
	if err := WriteSuiteResult(dir, s); err != nil {
		return err
	}
	h, err := SuiteIndex(s, nights)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, SuiteIndexFile), h); err != nil {
		return fmt.Errorf("write suite index: %w", err)
	}
	return nil
}

type indexRun struct {
	SuiteRun
	Name   string
	Report string
	OK     bool
	// Repeats: the entry runs more than once, so the row shows which repeat it is.
	Repeats bool
}

type indexSpread struct {
	Key     string
	Spreads []Spread
}

type indexTrend struct {
	Trend
	SVG  template.HTML
	Last string
	Note string
}

type indexGroup struct {
	Key    string
	Trends []indexTrend
}

type indexView struct {
	S           *SuiteResult
	OK          bool
	Runs        []indexRun
	AsExpected  int
	Spreads     []indexSpread
	Groups      []indexGroup
	Nights      int
	Changed     int
	Judged      int
	K, FloorPct float64
	MinNights   int
	// NotRun counts the planned runs that did not run; Stopped says what interrupted the suite
	// ("" when nothing did).
	NotRun       int
	Stopped      string
	WallTime     string
	HistoryShown bool
}

// SuiteIndex renders index.html: the runs with their verdicts and links to their reports, the
// spread of each measure over repeated runs, and, with a history, each main measure's trend
// across nights with changes beyond the noise flagged.
func SuiteIndex(s *SuiteResult, nights []SuiteResult) ([]byte, error) {
	v := indexView{S: s, OK: s.OK(), K: TrendK, FloorPct: TrendFloorPct, MinNights: TrendMinNights,
		NotRun: s.Planned - len(s.Runs), Nights: len(nights), HistoryShown: nights != nil,
		WallTime: s.FinishedAt.Sub(s.StartedAt).Round(1e9).String()}
	if s.Interrupted != nil {
		v.Stopped = fmt.Sprintf("%s at %s UTC", s.Interrupted, s.Interrupted.At.UTC().Format("2006-01-02 15:04:05"))
	}
	repeats := s.repeats()
	for _, r := range s.Runs {
		ir := indexRun{SuiteRun: r, Name: r.Name(repeats[r.Entry]), Report: filepath.ToSlash(filepath.Join(r.Dir, HTMLFile)), OK: r.AsExpected(), Repeats: repeats[r.Entry] > 1}
		if ir.OK {
			v.AsExpected++
		}
		v.Runs = append(v.Runs, ir)
	}
	spreads := s.Spreads()
	for _, r := range s.Runs {
		if sp, ok := spreads[r.Entry]; ok && r.Repeat == 1 {
			v.Spreads = append(v.Spreads, indexSpread{Key: r.Key(), Spreads: sp})
		}
	}
	for _, t := range Trends(nights) {
		if len(t.Points) < 2 {
			continue // one night is not a trend
		}
		svg, err := trendSVG(t)
		if err != nil {
			return nil, err
		}
		it := indexTrend{Trend: t, SVG: svg, Last: FormatValue(t.Points[len(t.Points)-1].Value, t.Unit)}
		switch {
		case !t.Judged:
			it.Note = fmt.Sprintf("%d nights: judged from %d", len(t.Points), TrendMinNights+1)
		case t.Changed:
			v.Changed++
			v.Judged++
			it.Note = fmt.Sprintf("changed: outside %s ± %s", FormatValue(t.Median, t.Unit), FormatValue(t.Band, t.Unit))
		default:
			v.Judged++
			it.Note = fmt.Sprintf("within %s ± %s", FormatValue(t.Median, t.Unit), FormatValue(t.Band, t.Unit))
		}
		if n := len(v.Groups); n == 0 || v.Groups[n-1].Key != t.Key {
			v.Groups = append(v.Groups, indexGroup{Key: t.Key})
		}
		g := &v.Groups[len(v.Groups)-1]
		g.Trends = append(g.Trends, it)
	}
	var b bytes.Buffer
	if err := indexTemplate.Execute(&b, v); err != nil {
		return nil, fmt.Errorf("render suite index: %w", err)
	}
	return b.Bytes(), nil
}

// nightTicks labels the x axis with the nights' dates (and times when two nights share a day),
// at most five labels so they never overlap.
type nightTicks []TrendPoint

func (n nightTicks) Ticks(_, _ float64) []plot.Tick {
	layout := "01-02"
	days := map[string]bool{}
	for _, p := range n {
		days[p.At.UTC().Format(layout)] = true
	}
	if len(days) < len(n) {
		layout = "01-02 15:04"
	}
	step := (len(n) + 4) / 5
	var ts []plot.Tick
	for i, p := range n {
		label := ""
		if (len(n)-1-i)%step == 0 { // the last night always labelled
			label = p.At.UTC().Format(layout)
		}
		ts = append(ts, plot.Tick{Value: float64(i + 1), Label: label})
	}
	return ts
}

// valueTicks are gonum's default ticks labelled with enough digits to tell them apart (the
// default prints 0.98, 1 and 1.02 all as "1").
type valueTicks struct{}

func (valueTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'g', 4, 64)
		}
	}
	return ts
}

// trendSVG draws one trend as an inline SVG: the nights' values, and the noise band the last
// night is judged against (dashed) once there are enough nights.
func trendSVG(t Trend) (template.HTML, error) {
	p := plot.New()
	p.Title.Text = t.Measure
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.Y.Label.Text = t.Unit
	p.X.Tick.Marker = nightTicks(t.Points)
	p.Y.Tick.Marker = valueTicks{}
	p.X.Tick.Label.Font.Size = vg.Points(7)
	p.Y.Tick.Label.Font.Size = vg.Points(7)
	p.Add(plotter.NewGrid())
	xys := make(plotter.XYs, len(t.Points))
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for i, pt := range t.Points {
		xys[i] = plotter.XY{X: float64(i + 1), Y: pt.Value}
		ymin, ymax = math.Min(ymin, pt.Value), math.Max(ymax, pt.Value)
	}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return "", fmt.Errorf("trend %s %s: %w", t.Key, t.Measure, err)
	}
	l.Color = palette[1]
	l.Width = vg.Points(1.2)
	s.Color = palette[1]
	s.Shape = draw.CircleGlyph{}
	s.Radius = vg.Points(2)
	p.Add(l, s)
	if t.Judged {
		n := float64(len(t.Points))
		for _, y := range []float64{t.Median - t.Band, t.Median + t.Band} {
			bl, err := plotter.NewLine(plotter.XYs{{X: 1, Y: y}, {X: n, Y: y}})
			if err != nil {
				return "", err
			}
			bl.Color = color.Gray{0x90}
			bl.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
			p.Add(bl)
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
		}
		if t.Changed {
			last, err := plotter.NewScatter(xys[len(xys)-1:])
			if err != nil {
				return "", err
			}
			last.Color = palette[0]
			last.Shape = draw.CircleGlyph{}
			last.Radius = vg.Points(3.5)
			p.Add(last)
		}
	}
	// Some room around flat series so the line does not sit on the frame.
	pad := (ymax - ymin) * 0.1
	if pad == 0 {
		pad = math.Max(math.Abs(ymax)*0.1, 1)
	}
	p.Y.Min, p.Y.Max = math.Max(0, ymin-pad), ymax+pad
	if ymin < 0 {
		p.Y.Min = ymin - pad
	}
	p.X.Min, p.X.Max = 0.7, float64(len(t.Points))+0.3
	w, err := p.WriterTo(3.6*vg.Inch, 1.9*vg.Inch, "svg")
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		return "", fmt.Errorf("trend %s %s: %w", t.Key, t.Measure, err)
	}
	svg := b.String()
	// Inline: drop the XML prolog; the <svg> element is all the page needs.
	if i := strings.Index(svg, "<svg"); i > 0 {
		svg = svg[i:]
	}
	return template.HTML(svg), nil // #nosec: produced by gonum/plot from our own numbers
}

var indexTemplate = template.Must(template.New("index").Funcs(template.FuncMap{
	"fmt":   FormatValue,
	"join":  strings.Join,
	"lower": strings.ToLower,
	"sub":   func(a, b float64) float64 { return a - b },
	"inc":   func(i int) int { return i + 1 },
}).Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>meshchaos suite {{.S.Suite}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
h1{margin-bottom:.2em} .sub{color:#555;margin-top:0}
table{border-collapse:collapse;margin:.5em 0 1.5em} th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top;font-size:.9em}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.pass{color:#1a7f37;font-weight:600} .fail{color:#b42318;font-weight:600} .error{color:#9a6700;font-weight:600}
.bad{background:#fde8e8} .banner{padding:.5em .8em;border-radius:4px;display:inline-block;font-weight:600}
.banner{background:#eef2f7;color:#333} .banner.ok{background:#e6f4ea;color:#1a7f37} .banner.notok{background:#fde8e8;color:#b42318}
.checks{font-size:.85em;color:#444;margin:0;padding-left:1.1em}
.grid{display:flex;flex-wrap:wrap;gap:.6em}
.trend{border:1px solid #ddd;border-radius:4px;padding:.3em;width:350px}
.trend svg{width:345px;height:auto;display:block}
.trend.changed{border:2px solid #b42318}
.note{font-size:.8em;color:#555} .trend.changed .note{color:#b42318;font-weight:600}
</style></head><body>
<h1>Suite {{.S.Suite}}</h1>
<p class="sub">{{.S.Summary}}</p>
<p>Substrate {{.S.Substrate}} · started {{.S.StartedAt.UTC.Format "2006-01-02 15:04:05"}} UTC · {{.WallTime}} · {{len .S.Runs}} of {{.S.Planned}} runs{{if .S.HarnessVersion}} · meshchaos {{.S.HarnessVersion}}{{end}}</p>
{{with .S.Shard}}<p><span class="banner">Shard {{.Index}} of {{.Count}}: this machine's share of the suite's {{.Of}} runs; <code>meshchaos suite merge</code> combines the {{.Count}} shards</span></p>
{{end}}{{if .S.MergedShards}}<p>Merged from {{.S.MergedShards}} shards run on as many machines: started is the first shard's start, the time the span until the last shard's end.</p>
{{end}}<p>{{if .Stopped}}<span class="banner notok">Interrupted — no verdict: {{.Stopped}}; {{.AsExpected}} of {{len .S.Runs}} runs made gave their expected verdict{{if .NotRun}}, {{.NotRun}} of {{.S.Planned}} did not run{{end}}</span>
{{else}}<span class="banner {{if .OK}}ok{{else}}notok{{end}}">{{if .OK}}Every run gave its expected verdict{{else}}{{.AsExpected}} of {{.S.Planned}} runs gave their expected verdict{{if .NotRun}}; {{.NotRun}} did not run{{end}}{{end}}</span>{{end}}
{{if .HistoryShown}} {{if .Judged}}<span class="banner {{if .Changed}}notok{{else}}ok{{end}}">{{.Changed}} of {{.Judged}} measures changed beyond the noise ({{.Nights}} night{{if ne .Nights 1}}s{{end}} of history)</span>{{else}}<span class="banner">{{.Nights}} night{{if ne .Nights 1}}s{{end}} of history: changes are judged from {{inc .MinNights}} nights</span>{{end}}{{end}}</p>

<h2>Runs</h2>
<table><tr><th>#</th><th>experiment</th><th>control plane</th><th>parameters</th><th>expected</th><th>verdict</th><th></th><th>time</th><th>failed checks</th></tr>
{{range $i, $r := .Runs}}<tr{{if not $r.OK}} class="bad"{{end}}><td class="num">{{inc $r.Entry}}{{if .Repeats}} · r{{$r.Repeat}}{{end}}</td>
<td><a href="{{$r.Report}}">{{$r.Experiment}}</a></td><td>{{$r.ControlPlane}}</td><td>{{join $r.Set " "}}</td>
<td>{{$r.Expect}}</td><td class="{{lower (printf "%s" $r.Verdict)}}">{{$r.Verdict}}</td><td class="{{if $r.OK}}pass{{else}}fail{{end}}">{{if $r.OK}}✓ as expected{{else}}✗ unexpected{{end}}</td>
<td class="num">{{printf "%.0f" $r.Seconds}} s</td>
<td>{{if $r.Error}}<div class="error">{{$r.Error}}</div>{{end}}{{if $r.Failed}}<ul class="checks">{{range $r.Failed}}<li>{{.}}</li>{{end}}</ul>{{end}}</td></tr>
{{end}}</table>

{{if .Spreads}}<h2>Spread over repeats</h2>
{{range .Spreads}}<h3>{{.Key}}</h3>
<table><tr><th>measure</th><th>runs</th><th>min</th><th>median</th><th>max</th><th>max − min</th></tr>
{{range .Spreads}}<tr><td>{{.Measure}}</td><td class="num">{{.N}}</td><td class="num">{{fmt .Min .Unit}}</td><td class="num">{{fmt .Median .Unit}}</td><td class="num">{{fmt .Max .Unit}}</td><td class="num">{{fmt (sub .Max .Min) .Unit}}</td></tr>
{{end}}</table>{{end}}{{end}}

{{if .HistoryShown}}<h2>Trends</h2>
<p class="note">Each point is one night (the median of the entry's repeats). A night is a change beyond the noise when its value lies outside
median ± max({{.K}} × 1.4826 × MAD, {{.FloorPct}} % of the median) of the earlier nights' values (dashed lines; MAD = median absolute deviation),
judged once {{.MinNights}} earlier nights exist. A changed night is drawn red and its chart framed.</p>
{{if not .Groups}}<p>No trend yet: the history holds one night. Run the suite again with the same --history.</p>{{end}}
{{range .Groups}}<h3>{{.Key}}</h3><div class="grid">
{{range .Trends}}<div class="trend{{if .Changed}} changed{{end}}">{{.SVG}}<div class="note">last {{.Last}} · {{.Note}}</div></div>
{{end}}</div>{{end}}{{end}}
</body></html>
`))
