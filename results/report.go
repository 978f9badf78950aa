package results

import (
	"bytes"
	"fmt"
	htmltemplate "html/template"
	"math"
	"path/filepath"
	"strings"
	texttemplate "text/template"
	"time"
)

// view is what the report templates read: the summary plus values derived for display.
type view struct {
	S        *Summary
	Duration string
	Charts   []Chart
	Params   [][2]string
	Codes    [][2]string
	Flags    [][2]string
	Events   []eventRow
	Checks   []checkRow
	Profiles []profileRow
	Markers  []Marker
}

type profileRow struct {
	Profile
	// ShowTop: the allocation sites are shown for the profiles that matter (the peak heap and
	// those taken before an OOM kill); the rest are listed.
	ShowTop bool
}

type eventRow struct {
	Offset string
	Marker int // its number on the charts, 0 if not drawn
	Event
	Lag string // watcher time minus API time, when both exist
}

type checkRow struct {
	Check
	Observed, Want string
}

func newView(s *Summary, charts []Chart) *view {
	v := &view{S: s, Charts: charts, Duration: "unfinished"}
	if s.FinishedAt != nil {
		v.Duration = s.FinishedAt.Sub(s.StartedAt).Round(100 * time.Millisecond).String()
	}
	for _, k := range SortedKeys(s.Params) {
		v.Params = append(v.Params, [2]string{k, s.Params[k]})
	}
	if t := s.Traffic; t != nil {
		for _, k := range SortedKeys(t.ByCode) {
			v.Codes = append(v.Codes, [2]string{k, fmt.Sprint(t.ByCode[k])})
		}
		for _, k := range SortedKeys(t.ByFlag) {
			v.Flags = append(v.Flags, [2]string{k, fmt.Sprint(t.ByFlag[k])})
		}
	}
	v.Markers = Markers(s)
	mk := 0
	for _, e := range s.Events {
		r := eventRow{Offset: fmt.Sprintf("+%.1fs", e.At.Sub(s.StartedAt).Seconds()), Event: e}
		if isMarker(e.Kind) {
			mk++
			r.Marker = mk
		}
		if e.ObservedAt != nil {
			r.Lag = e.ObservedAt.Sub(e.At).Round(time.Millisecond).String()
		}
		v.Events = append(v.Events, r)
	}
	for _, c := range s.Checks {
		v.Checks = append(v.Checks, checkRow{Check: c, Observed: FormatValue(c.Observed, c.Unit), Want: c.Op.Symbol() + " " + FormatValue(c.Threshold, c.Unit)})
	}
	if cp := s.ControlPlaneStats; cp != nil {
		peak := -1
		for i, p := range cp.Profiles {
			if p.InUseBytes > 0 && (peak < 0 || p.InUseBytes > cp.Profiles[peak].InUseBytes) {
				peak = i
			}
		}
		for i, p := range cp.Profiles {
			v.Profiles = append(v.Profiles, profileRow{Profile: p, ShowTop: i == peak || p.Reason == "before-oom"})
		}
	}
	return v
}

var funcs = map[string]any{
	"cell": cell,
	"mib":  func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) },
	"pct":  func(f float64) string { return fmt.Sprintf("%.3f %%", 100*f) },
	"ms":   func(f float64) string { return fmt.Sprintf("%.1f ms", f) },
	"secs": func(f float64) string {
		if math.Abs(f) < 0.005 {
			f = 0 // no "-0.00 s"
		}
		return fmt.Sprintf("%+.2f s", f)
	},
	"time": func(t time.Time) string {
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"histogram": HistogramText,
	"deref":     func(f *float64) float64 { return *f },
	"deref64":   func(n *int64) int64 { return *n },
	"pushchart": PushChartText,
	"offset":    func(s *Summary, t time.Time) string { return fmt.Sprintf("+%.1fs", t.Sub(s.StartedAt).Seconds()) },
	"passfail": func(p bool) string {
		if p {
			return "pass"
		}
		return "FAIL"
	},
}

const markdownTmpl = `# meshchaos: {{.S.Experiment}} — {{.S.Verdict}}
{{if .S.Error}}
> **Run error:** {{.S.Error}}
{{end}}
| | |
|---|---|
| Experiment | {{.S.Experiment}} |
| Control plane | {{.S.ControlPlane}} |
| Substrate | {{.S.Substrate}} |
{{- with .S.HarnessVersion}}
| Harness | {{.}}{{with $.S.HarnessCommit}} ({{.}}){{end}} |
{{- end}}
| Started | {{time .S.StartedAt}} |
| Duration | {{.Duration}} |
{{- range .Params}}
| param {{index . 0}} | {{index . 1}} |
{{- end}}

## Checks

| Check | Result | Observed | Threshold |
|---|---|---|---|
{{- range .Checks}}
| {{cell .Name}} | {{passfail .Pass}} | {{.Observed}} | {{.Want}} |
{{- end}}
{{with .S.Traffic}}
## Traffic

{{.Requests}} requests, {{.Errors}} errors ({{pct .ErrorRate}}). Latency p50 {{ms .LatencyMs.P50}}, p90 {{ms .LatencyMs.P90}}, p99 {{ms .LatencyMs.P99}}, max {{ms .LatencyMs.Max}}.
{{with .ErrorWindow}}
Error window: {{$.S.Traffic.ErrorWindowSeconds}} s (seconds {{.FirstSecond}}–{{.LastSecond}} of traffic), longest run of error seconds {{.LongestRunSeconds}} s from second {{.LongestRunStart}}.
{{- range $k, $w := .RelativeTo}}
- from {{$k}}: first error {{secs $w.StartAfterSeconds}}, last error {{secs $w.EndAfterSeconds}}
{{- end}}
{{else}}
No errors.
{{end}}
| Status code | Requests |
|---|---|
{{- range $.Codes}}
| {{index . 0}} | {{index . 1}} |
{{- end}}
{{if $.Flags}}
| Response flag | Requests |
|---|---|
{{- range $.Flags}}
| {{index . 0}} | {{index . 1}} |
{{- end}}
{{end}}{{end}}
{{with .S.Scale}}{{.Markdown}}{{end}}{{with .S.Soak}}
## Soak

{{.Markdown}}{{end}}{{with .S.ControlPlaneStats}}
## Control plane

Restarts {{.Restarts}}, OOM kills {{.OOMKills}}, pushes {{with .Pushes}}full {{.Full}} / EDS {{.EDS}}{{else}}not measured{{end}}, peak heap {{mib .PeakHeapBytes}}{{if .MemoryLimit}}, memory limit {{mib .MemoryLimit}}{{end}}{{with .CPUSeconds}}, CPU {{printf "%.2f" (deref .)}} s{{end}}, xDS rejects {{with .XDSRejects}}{{.}}{{else}}not measured{{end}}.
{{with .PushTime}}
Push time over {{.Count}} pushes: p50 {{ms .P50Ms}}, p99 {{ms .P99Ms}} (estimated from the histogram's buckets).
{{with $.S.ControlPlaneStats.ChaosPushTime}}
During the chaos phase alone: {{.Count}} pushes, p50 {{ms .P50Ms}}, p99 {{ms .P99Ms}}{{with $.S.ControlPlaneStats.ChaosCPUSeconds}}, control-plane CPU {{printf "%.2f" (deref .)}} s{{end}}{{with $.S.ControlPlaneStats.ChaosPeakHeapBytes}}, peak heap {{mib (deref64 .)}}{{end}}.
{{end}}
` + "```" + `
{{histogram .}}` + "```" + `
{{end}}{{with pushchart $.S}}
Pushes per second (F full, e EDS; ▲/▼ the followed service's endpoints changing in the API):

` + "```" + `
{{.}}` + "```" + `
{{end}}{{end}}{{with .S.Convergence}}
## Endpoint convergence at the proxies

{{.Service}}: {{len .Changes}} endpoint changes, {{.Proxies}} proxies; from the change in the API to each proxy's receipt: p50 {{ms .Latency.P50Ms}}, p99 {{ms .Latency.P99Ms}}, max {{ms .Latency.MaxMs}} over {{.Latency.Count}} receipts; {{.Missed}} missed{{if .Coalesced}}, {{.Coalesced}} coalesced (undone within the control plane's debounce: not expected at the proxies){{end}}{{if .Early}}, {{.Early}} received before the harness saw the change (counted as 0){{end}}.

` + "```" + `
{{histogram .Latency}}` + "```" + `

| # | Offset | Ready endpoints | Proxies received | p50 | p99 | max | Full pushes | EDS pushes |
|---|---|---|---|---|---|---|---|---|
{{- range $i, $c := .Changes}}
| {{$i}} | {{offset $.S $c.At}} | {{$c.Ready}}{{if $c.Coalesced}} (coalesced){{end}} | {{$c.Received}} | {{ms $c.P50Ms}} | {{ms $c.P99Ms}} | {{ms $c.MaxMs}} | {{with $c.Pushes}}{{.Full}} | {{.EDS}}{{else}}– | –{{end}} |
{{- end}}
{{end}}{{with .S.Workloads}}
| Workload role | Restarts | OOM kills | Ready / NotReady transitions |
|---|---|---|---|
{{- range $role, $w := .}}
| {{$role}} | {{$w.Restarts}} | {{$w.OOMKills}} | {{$w.Ready}} / {{$w.NotReady}} |
{{- end}}
{{end}}{{with .S.Startup}}
## App start-up by sidecar start mode

| Mode | Pods (started) | App restarts | Exit codes | Failed first calls | Creation → first success P50 / P99 | Creation → Ready P50 / P99 | Proxy first config P50 / P99 | Injected pod |
|---|---|---|---|---|---|---|---|---|
{{- range .}}
| {{.Mode}} | {{.Pods}} ({{.Started}}) | {{.AppRestarts}} | {{range $c, $n := .ExitCodes}}{{$c}}×{{$n}} {{end}} | {{.FailedFirstCalls}} | {{printf "%.0f" .FirstSuccessMs.P50}} / {{printf "%.0f" .FirstSuccessMs.P99}} ms | {{printf "%.0f" .ReadyMs.P50}} / {{printf "%.0f" .ReadyMs.P99}} ms | {{printf "%.0f" .ProxyFirstConfigMs.P50}} / {{printf "%.0f" .ProxyFirstConfigMs.P99}} ms | {{if .PodSpec}}[{{.PodSpec}}]({{.PodSpec}}){{end}} |
{{- end}}
{{end}}{{with .S.Faults}}
## Faults

| Fault | Implementation |
|---|---|
{{- range .}}
| {{.Name}} | {{if .Fallback}}**generic fallback** (the control plane has no hook): {{end}}{{cell .Implementation}} |
{{- end}}
{{end}}{{with .S.Measurements}}
## Measurements

| Measurement | Role | Usable | Samples | Failures | Last failure |
|---|---|---|---|---|---|
{{- range .}}
| {{.Name}} | {{.Role}} | {{if .OK}}yes{{else}}**no**{{end}} | {{.Samples}} | {{.Failures}} | {{cell .Error}} |
{{- end}}
{{end}}{{if .Profiles}}
| Profile | Kind | Reason | In use | Top in-use allocation sites |
|---|---|---|---|---|
{{- range .Profiles}}
| [{{.File}}]({{.File}}) | {{.Kind}} | {{cell .Reason}} | {{if .InUseBytes}}{{mib .InUseBytes}}{{end}} | {{if .ShowTop}}{{range $i, $t := .Top}}{{if $i}}<br>{{end}}{{mib $t.InUseBytes}} ` + "`{{cell $t.Function}}`" + `{{end}}{{end}} |
{{- end}}
{{end}}
{{- if .Charts}}
## Charts
{{range .Charts}}
![{{.Title}}]({{.PNG}})
{{end}}
Markers: {{range $i, $m := .Markers}}{{if $i}} · {{end}}**{{$m.N}}** {{$m.Event.Kind}}{{with $m.Event.Object}} {{cell .}}{{end}} (+{{printf "%.1f" $m.Offset}} s){{end}}
{{end}}
## Timeline

| Offset | Marker | Event | Object | Detail | Watcher lag |
|---|---|---|---|---|---|
{{- range .Events}}
| {{.Offset}} | {{if .Marker}}{{.Marker}}{{end}} | {{.Kind}} | {{cell .Object}} | {{cell .Detail}} | {{.Lag}} |
{{- end}}
`

const htmlTmpl = `<!doctype html>
<html><head><meta charset="utf-8"><title>meshchaos {{.S.Experiment}} — {{.S.Verdict}}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:62em;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em} td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}
th{background:#f5f5f5} td.num{text-align:right;font-variant-numeric:tabular-nums}
.verdict{display:inline-block;padding:.1em .6em;border-radius:.3em;color:#fff;font-weight:600}
.pass{background:#2c8a2c} .fail{background:#c62828} .error{background:#8a6d00}
td.pass,td.fail{color:#fff;font-weight:600;text-align:center}
.err{background:#fff3cd;border:1px solid #e0c060;padding:.5em .8em;border-radius:.3em}
img.chart{width:100%;max-width:60em;display:block;margin:.4em 0 1em}
code{font-size:.85em}
.markers span{display:inline-block;margin-right:1.2em;font-size:.9em}
.markers b{display:inline-block;min-width:1.3em;text-align:center;background:#555;color:#fff;border-radius:.6em;font-size:.85em}
</style></head><body>
<h1>{{.S.Experiment}} <span class="verdict {{.S.Verdict}}">{{.S.Verdict}}</span></h1>
{{if .S.Error}}<p class="err"><b>Run error:</b> {{.S.Error}}</p>{{end}}
<table>
<tr><th>Control plane</th><td>{{.S.ControlPlane}}</td><th>Substrate</th><td>{{.S.Substrate}}</td></tr>
<tr><th>Started</th><td>{{time .S.StartedAt}}</td><th>Duration</th><td>{{.Duration}}</td></tr>
{{with .S.HarnessVersion}}<tr><th>Harness</th><td colspan="3">{{.}}{{with $.S.HarnessCommit}} ({{.}}){{end}}</td></tr>{{end}}
{{range .Params}}<tr><th>param {{index . 0}}</th><td colspan="3">{{index . 1}}</td></tr>{{end}}
</table>
<h2>Checks</h2>
<table><tr><th>Check</th><th>Result</th><th>Observed</th><th>Threshold</th><th>Detail</th></tr>
{{range .Checks}}<tr><td>{{.Name}}</td><td class="{{if .Pass}}pass{{else}}fail{{end}}">{{passfail .Pass}}</td><td class="num">{{.Observed}}</td><td class="num">{{.Want}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>
{{with .S.Traffic}}<h2>Traffic</h2>
<table>
<tr><th>Requests</th><td class="num">{{.Requests}}</td><th>Errors</th><td class="num">{{.Errors}} ({{pct .ErrorRate}})</td></tr>
<tr><th>Latency p50 / p90</th><td class="num">{{ms .LatencyMs.P50}} / {{ms .LatencyMs.P90}}</td><th>p99 / max</th><td class="num">{{ms .LatencyMs.P99}} / {{ms .LatencyMs.Max}}</td></tr>
<tr><th>Error window</th><td class="num">{{.ErrorWindowSeconds}} s</td>{{with .ErrorWindow}}<th>Seconds (longest run)</th><td class="num">{{.FirstSecond}}–{{.LastSecond}} ({{.LongestRunSeconds}} s from {{.LongestRunStart}})</td>{{else}}<td colspan="2">no errors</td>{{end}}</tr>
{{with .ErrorWindow}}{{range $k, $w := .RelativeTo}}<tr><th>from {{$k}}</th><td colspan="3">first error {{secs $w.StartAfterSeconds}}, last error {{secs $w.EndAfterSeconds}}</td></tr>{{end}}{{end}}
</table>
<table><tr><th>Status</th>{{range $.Codes}}<td class="num"><b>{{index . 0}}</b>: {{index . 1}}</td>{{end}}</tr>
{{if $.Flags}}<tr><th>Response flag</th>{{range $.Flags}}<td class="num"><b>{{index . 0}}</b>: {{index . 1}}</td>{{end}}</tr>{{end}}</table>
{{end}}
{{with .S.Scale}}<pre>{{.Markdown}}</pre>{{end}}{{with .S.Soak}}<h2>Soak</h2><pre>{{.Markdown}}</pre>{{end}}{{with .S.ControlPlaneStats}}<h2>Control plane</h2>
<table><tr><th>Restarts</th><td class="num">{{.Restarts}}</td><th>OOM kills</th><td class="num">{{.OOMKills}}</td><th>Pushes full / EDS</th><td class="num">{{with .Pushes}}{{.Full}} / {{.EDS}}{{else}}not measured{{end}}</td><th>Peak heap</th><td class="num">{{mib .PeakHeapBytes}}</td>{{if .MemoryLimit}}<th>Limit</th><td class="num">{{mib .MemoryLimit}}</td>{{end}}</tr></table>
{{end}}
{{with .S.Startup}}<h2>App start-up by sidecar start mode</h2>
<table><tr><th>Mode</th><th>Pods (started)</th><th>App restarts</th><th>Exit codes</th><th>Failed first calls</th><th>Creation → first success P50 / P99</th><th>Creation → Ready P50 / P99</th><th>Proxy first config P50 / P99</th><th>Injected pod</th></tr>
{{range .}}<tr><td>{{.Mode}}</td><td class="num">{{.Pods}} ({{.Started}})</td><td class="num">{{.AppRestarts}}</td><td>{{range $c, $n := .ExitCodes}}{{$c}}×{{$n}} {{end}}</td><td class="num">{{.FailedFirstCalls}}</td><td class="num">{{printf "%.0f" .FirstSuccessMs.P50}} / {{printf "%.0f" .FirstSuccessMs.P99}} ms</td><td class="num">{{printf "%.0f" .ReadyMs.P50}} / {{printf "%.0f" .ReadyMs.P99}} ms</td><td class="num">{{printf "%.0f" .ProxyFirstConfigMs.P50}} / {{printf "%.0f" .ProxyFirstConfigMs.P99}} ms</td><td>{{if .PodSpec}}<a href="{{.PodSpec}}">{{.PodSpec}}</a>{{end}}</td></tr>
{{end}}</table>{{end}}
{{if .Profiles}}<table><tr><th>Profile</th><th>Kind</th><th>Reason</th><th>At</th><th>In use</th><th>Top in-use allocation sites</th></tr>
{{range .Profiles}}<tr><td><a href="{{.File}}">{{.File}}</a></td><td>{{.Kind}}</td><td>{{.Reason}}</td><td>{{time .At}}</td><td class="num">{{if .InUseBytes}}{{mib .InUseBytes}}{{end}}</td><td>{{if .ShowTop}}{{range .Top}}{{mib .InUseBytes}} <code>{{.Function}}</code><br>{{end}}{{end}}</td></tr>
{{end}}</table>{{end}}
{{if .Charts}}<h2>Charts</h2>
{{range .Charts}}<a href="{{.SVG}}"><img class="chart" src="{{.SVG}}" alt="{{.Title}}"></a>
{{end}}<p class="markers">{{range .Markers}}<span><b>{{.N}}</b> {{.Event.Kind}} {{.Event.Object}} <small>(+{{printf "%.1f" .Offset}} s)</small></span> {{end}}</p>
{{end}}
<h2>Timeline</h2>
<table><tr><th>Offset</th><th>Marker</th><th>Event</th><th>Object</th><th>Detail</th><th>Watcher lag</th></tr>
{{range .Events}}<tr><td class="num">{{.Offset}}</td><td class="num">{{if .Marker}}<b>{{.Marker}}</b>{{end}}</td><td>{{.Kind}}</td><td>{{.Object}}</td><td>{{.Detail}}</td><td class="num">{{.Lag}}</td></tr>
{{end}}</table>
<p style="color:#888;font-size:.8em">schema {{.S.Schema}} · <a href="summary.json">summary.json</a> · <a href="junit.xml">junit.xml</a> · <a href="report.md">report.md</a></p>
</body></html>
`

var (
	mdTemplate   = texttemplate.Must(texttemplate.New("md").Funcs(funcs).Parse(markdownTmpl))
	htmlTemplate = htmltemplate.Must(htmltemplate.New("html").Funcs(funcs).Parse(htmlTmpl))
)

// Markdown renders report.md's content.
func Markdown(s *Summary, charts []Chart) ([]byte, error) {
	var b bytes.Buffer
	if err := mdTemplate.Execute(&b, newView(s, charts)); err != nil {
		return nil, fmt.Errorf("render markdown: %w", err)
	}
	return b.Bytes(), nil
}

// HTML renders report.html's content.
func HTML(s *Summary, charts []Chart) ([]byte, error) {
	var b bytes.Buffer
	if err := htmlTemplate.Execute(&b, newView(s, charts)); err != nil {
		return nil, fmt.Errorf("render html: %w", err)
	}
	return b.Bytes(), nil
}

// Render writes junit.xml, the charts, report.md and report.html for the summary into dir.
func Render(dir string, s *Summary) error {
	if err := WriteJUnit(dir, s); err != nil {
		return err
	}
	charts, err := RenderCharts(dir, s)
	if err != nil {
		return err
	}
	md, err := Markdown(s, charts)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, MarkdownFile), md); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	h, err := HTML(s, charts)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, HTMLFile), h); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// cell makes a string safe for one Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", "\\|")
}
