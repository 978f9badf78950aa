// Package render turns a run's summary into report.md and report.html. Both are rendered from
// one Report, built once from the summary, so a section cannot be in one and missing in the
// other (issue #33: two hand-written templates had drifted apart).
package render

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/results"
)

// Report is the view model of one run's report: what both formats show, in order.
type Report struct {
	Experiment string
	Verdict    string
	Error      string
	// About is the header table: label and value.
	About    [][2]Text
	Sections []Section
	Schema   string
}

// Section is one titled part of the report (one `## ` heading, one `<h2>`).
type Section struct {
	Title  string
	Blocks []Block
}

// Block is one of: a paragraph, a bullet list, a table, preformatted text (a text chart, shown
// in both formats) or charts. Exactly one field is set.
type Block struct {
	Para   Text
	Items  []Text
	Table  *Table
	Pre    string
	Images []Image
}

// Table is a header and rows of cells.
type Table struct {
	Head []string
	Rows [][]Cell
}

// Cell is a table cell; Class styles it in HTML ("num", "pass", "fail") and is ignored in
// Markdown.
type Cell struct {
	Text
	Class string
}

// Text is a run of spans: the little inline formatting both formats share.
type Text []Span

// Span is plain, strong, code or linked text, or a line break within a cell.
type Span struct {
	S      string
	Strong bool
	Code   bool
	Link   string
	Break  bool
}

// Image is a chart: Markdown shows its PNG, HTML its SVG.
type Image struct {
	Title, PNG, SVG string
}

func plain(format string, a ...any) Text { return Text{{S: fmt.Sprintf(format, a...)}} }
func strong(s string) Span               { return Span{S: s, Strong: true} }
func code(s string) Span                 { return Span{S: s, Code: true} }
func txt(s string) Span                  { return Span{S: s} }
func para(t Text) Block                  { return Block{Para: t} }
func numCell(format string, a ...any) Cell {
	return Cell{Text: plain(format, a...), Class: "num"}
}
func textCell(s string) Cell { return Cell{Text: Text{txt(s)}} }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
func bytesText(b int64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return mib(b)
}
func pct(f float64) string     { return fmt.Sprintf("%.3f %%", 100*f) }
func ms(f float64) string      { return fmt.Sprintf("%.1f ms", f) }
func clock(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }
func secs(f float64) string {
	if math.Abs(f) < 0.005 {
		f = 0 // no "-0.00 s"
	}
	return fmt.Sprintf("%+.2f s", f)
}

// Build makes the report of s with the charts already drawn for it.
func Build(s *results.Summary, charts []results.Chart) *Report {
	r := &Report{Experiment: s.Experiment, Verdict: string(s.Verdict), Error: s.Error, Schema: s.Schema}
	r.About = about(s)
	sections := []*Section{checks(s), traffic("Traffic", s.Traffic)}
	// The further attacks (endpoint-flap's to the flapping service, the grpc-go clients' RPCs)
	// beside the main traffic.
	for _, name := range results.SortedKeys(s.Attacks) {
		sections = append(sections, traffic("Traffic: "+name, s.Attacks[name]))
	}
	sections = append(sections, scale(s), soak(s), controlPlane(s), convergence(s), fleet(s), workloads(s),
		startup(s), faults(s), measurements(s), logs(s), profiles(s), chartsSection(s, charts), timeline(s))
	for _, sec := range sections {
		if sec != nil {
			r.Sections = append(r.Sections, *sec)
		}
	}
	return r
}

func about(s *results.Summary) [][2]Text {
	duration := "unfinished"
	if s.FinishedAt != nil {
		duration = s.FinishedAt.Sub(s.StartedAt).Round(100 * time.Millisecond).String()
	}
	rows := [][2]Text{
		{plain("Experiment"), plain("%s", s.Experiment)},
		{plain("Control plane"), plain("%s", s.ControlPlane)},
		{plain("Substrate"), plain("%s", s.Substrate)},
	}
	if s.HarnessVersion != "" {
		h := s.HarnessVersion
		if s.HarnessCommit != "" {
			h += " (" + s.HarnessCommit + ")"
		}
		rows = append(rows, [2]Text{plain("Harness"), plain("%s", h)})
	}
	rows = append(rows, [2]Text{plain("Started"), plain("%s", clock(s.StartedAt))}, [2]Text{plain("Duration"), plain("%s", duration)})
	for _, k := range results.SortedKeys(s.Params) {
		rows = append(rows, [2]Text{plain("param %s", k), plain("%s", s.Params[k])})
	}
	if k := s.Kept; k != nil {
		reach := Text{txt(k.Name + " (" + k.Substrate + ", " + k.Why + ")")}
		if k.Kubeconfig != "" {
			reach = append(reach, txt(": "), code("export KUBECONFIG="+k.Kubeconfig))
		}
		down := "meshchaos cluster down " + k.Name
		if k.Substrate != "local" {
			down = "meshchaos cluster down --substrate " + k.Substrate + " " + k.Name
		}
		reach = append(reach, txt("; remove it with "), code(down))
		rows = append(rows, [2]Text{plain("Cluster kept"), reach})
	}
	return rows
}

func checks(s *results.Summary) *Section {
	t := &Table{Head: []string{"Check", "Result", "Observed", "Threshold"}}
	detail := false
	for _, c := range s.Checks {
		detail = detail || c.Detail != ""
	}
	if detail {
		t.Head = append(t.Head, "Detail")
	}
	for _, c := range s.Checks {
		res := Cell{Text: plain("pass"), Class: "pass"}
		if !c.Pass {
			res = Cell{Text: Text{strong("fail")}, Class: "fail"}
		}
		row := []Cell{textCell(c.Name), res, numCell("%s", results.FormatValue(c.Observed, c.Unit)),
			numCell("%s %s", c.Op.Symbol(), results.FormatValue(c.Threshold, c.Unit))}
		if detail {
			row = append(row, textCell(c.Detail))
		}
		t.Rows = append(t.Rows, row)
	}
	return &Section{Title: "Checks", Blocks: []Block{{Table: t}}}
}

func traffic(title string, t *results.Traffic) *Section {
	if t == nil {
		return nil
	}
	sec := &Section{Title: title}
	sec.Blocks = append(sec.Blocks, para(plain("%d requests, %d errors (%s). Latency p50 %s, p90 %s, p99 %s, max %s.",
		t.Requests, t.Errors, pct(t.ErrorRate), ms(t.LatencyMs.P50), ms(t.LatencyMs.P90), ms(t.LatencyMs.P99), ms(t.LatencyMs.Max))))
	if t.NoConfigSeconds != nil {
		sec.Blocks = append(sec.Blocks, para(plain("Longest time a client channel had no usable config: %.2f s.", *t.NoConfigSeconds)))
	}
	if w := t.ErrorWindow; w != nil {
		sec.Blocks = append(sec.Blocks, para(plain("Error window: %v s (seconds %d–%d of traffic), longest run of error seconds %d s from second %d.",
			t.ErrorWindowSeconds, w.FirstSecond, w.LastSecond, w.LongestRunSeconds, w.LongestRunStart)))
		var items []Text
		for _, k := range results.SortedKeys(w.RelativeTo) {
			rw := w.RelativeTo[k]
			items = append(items, plain("from %s: first error %s, last error %s", k, secs(rw.StartAfterSeconds), secs(rw.EndAfterSeconds)))
		}
		if items != nil {
			sec.Blocks = append(sec.Blocks, Block{Items: items})
		}
	} else if t.Errors == 0 {
		sec.Blocks = append(sec.Blocks, para(plain("No errors.")))
	}
	codes := &Table{Head: []string{"Status code", "Requests"}}
	for _, k := range results.SortedKeys(t.ByCode) {
		codes.Rows = append(codes.Rows, []Cell{textCell(k), numCell("%d", t.ByCode[k])})
	}
	sec.Blocks = append(sec.Blocks, Block{Table: codes})
	if len(t.ByFlag) > 0 {
		flags := &Table{Head: []string{"Response flag", "Requests"}}
		for _, k := range results.SortedKeys(t.ByFlag) {
			flags.Rows = append(flags.Rows, []Cell{textCell(k), numCell("%d", t.ByFlag[k])})
		}
		sec.Blocks = append(sec.Blocks, Block{Table: flags})
	}
	return sec
}

// controlPlane lists only the figures that were observed: a counter never scraped, or a push
// histogram with no push in it, is left out rather than shown as a zero.
func controlPlane(s *results.Summary) *Section {
	cp := s.ControlPlaneStats
	if cp == nil {
		return nil
	}
	items := []Text{plain("Restarts %d, OOM kills %d", cp.Restarts, cp.OOMKills)}
	if p := cp.Pushes; p != nil {
		items = append(items, plain("Pushes: full %d, EDS %d", p.Full, p.EDS))
	}
	if m := memoryLine(cp); m != nil {
		items = append(items, m)
	}
	if cp.PeakHeapBytes > 0 {
		// The heap counts what the process holds, ballast included; it is not what the limit
		// is enforced against, so it is labelled and kept apart from the working set.
		items = append(items, plain("Peak Go heap in use %s (the process's own figure: counts memory it holds but never touches, such as a ballast; the limit is enforced on the working set)", mib(cp.PeakHeapBytes)))
	}
	if c := cp.CPUSeconds; c != nil {
		items = append(items, plain("CPU %.2f s", *c))
	}
	if x := cp.XDSRejects; x != nil {
		items = append(items, plain("xDS rejects (NACKs) %d", *x))
	}
	sec := &Section{Title: "Control plane", Blocks: []Block{{Items: items}}}
	if h := cp.PushTime; h != nil && h.Count > 0 {
		sec.Blocks = append(sec.Blocks, para(plain("Push time over %d responses (each its own generation and send): p50 %s, p99 %s (estimated from the histogram's buckets).", h.Count, ms(h.P50Ms), ms(h.P99Ms))))
		if ht := results.HistogramText(h); ht != "" {
			sec.Blocks = append(sec.Blocks, Block{Pre: ht})
		}
	}
	if chaos := chaosLine(cp); chaos != nil {
		sec.Blocks = append(sec.Blocks, para(chaos))
	}
	if pc := results.PushChartText(s); pc != "" {
		sec.Blocks = append(sec.Blocks, para(plain("Pushes per second (F full, e EDS; ▲/▼ the followed service's endpoints changing in the API):")), Block{Pre: pc})
	}
	return sec
}

// memoryLine is the cgroup working set against the limit: what the kernel OOM-kills on.
// Memory's samples are the working set (or the process's RSS where no cgroup is readable).
func memoryLine(cp *results.ControlPlaneStats) Text {
	if len(cp.Memory) == 0 {
		return nil
	}
	var peak float64
	for _, m := range cp.Memory {
		peak = math.Max(peak, m.Value)
	}
	if cp.MemoryLimit > 0 {
		return plain("Peak memory working set %s of a %s limit (%.0f %%)", mib(int64(peak)), mib(cp.MemoryLimit), 100*peak/float64(cp.MemoryLimit))
	}
	return plain("Peak memory working set %s (no limit)", mib(int64(peak)))
}

func chaosLine(cp *results.ControlPlaneStats) Text {
	var parts []string
	if h := cp.ChaosPushTime; h != nil && h.Count > 0 {
		parts = append(parts, fmt.Sprintf("push time over %d responses, p50 %s, p99 %s", h.Count, ms(h.P50Ms), ms(h.P99Ms)))
	}
	if p := cp.ChaosPushes; p != nil {
		parts = append(parts, fmt.Sprintf("full %d / EDS %d", p.Full, p.EDS))
	}
	if c := cp.ChaosCPUSeconds; c != nil {
		parts = append(parts, fmt.Sprintf("control-plane CPU %.2f s", *c))
	}
	if h := cp.ChaosPeakHeapBytes; h != nil && *h > 0 {
		parts = append(parts, "peak Go heap in use "+mib(*h))
	}
	if parts == nil {
		return nil
	}
	t := "During the chaos phase alone: "
	for i, p := range parts {
		if i > 0 {
			t += ", "
		}
		t += p
	}
	return plain("%s.", t)
}

func convergence(s *results.Summary) *Section {
	c := s.Convergence
	if c == nil {
		return nil
	}
	l := c.Latency
	line := fmt.Sprintf("%s: %d endpoint changes, %d proxies; from the change in the API to each proxy's receipt: p50 %s, p99 %s, max %s over %d receipts; %d missed",
		c.Service, len(c.Changes), c.Proxies, ms(l.P50Ms), ms(l.P99Ms), ms(l.MaxMs), l.Count, c.Missed)
	if c.Coalesced > 0 {
		line += fmt.Sprintf(", %d coalesced (undone within the control plane's debounce: not expected at the proxies)", c.Coalesced)
	}
	if c.Early > 0 {
		line += fmt.Sprintf(", %d received before the harness saw the change (counted as 0)", c.Early)
	}
	sec := &Section{Title: "Endpoint convergence at the proxies", Blocks: []Block{para(plain("%s.", line))}}
	if ht := results.HistogramText(&c.Latency); ht != "" {
		sec.Blocks = append(sec.Blocks, Block{Pre: ht})
	}
	t := &Table{Head: []string{"#", "Offset", "Ready endpoints", "Proxies received", "p50", "p99", "max", "Full pushes", "EDS pushes"}}
	for i, ch := range c.Changes {
		ready := fmt.Sprint(ch.Ready)
		if ch.Coalesced {
			ready += " (coalesced)"
		}
		full, eds := "–", "–"
		if p := ch.Pushes; p != nil {
			full, eds = fmt.Sprint(p.Full), fmt.Sprint(p.EDS)
		}
		t.Rows = append(t.Rows, []Cell{numCell("%d", i), numCell("%s", offset(s, ch.At)), numCell("%s", ready), numCell("%d", ch.Received),
			numCell("%s", ms(ch.P50Ms)), numCell("%s", ms(ch.P99Ms)), numCell("%s", ms(ch.MaxMs)), numCell("%s", full), numCell("%s", eds)})
	}
	sec.Blocks = append(sec.Blocks, Block{Table: t})
	return sec
}

// fleet is the adsload fleet as last read: what it held and what each pod cost.
func fleet(s *results.Summary) *Section {
	f := s.Fleet
	if f == nil {
		return nil
	}
	line := plain("%d ADS clients on %d pod(s) at %s: %d connected, %d configured; RSS %s in all, %.0f KiB a client.",
		f.Clients, len(f.Pods), offset(s, f.At), f.Connected, f.Configured, mib(f.RSSBytes), f.RSSBytesPerClient/1024)
	t := &Table{Head: []string{"Pod", "Node", "Clients", "Configured", "RSS"}}
	for _, p := range f.Pods {
		node := "any"
		if p.Node > 0 {
			node = fmt.Sprint(p.Node)
		}
		t.Rows = append(t.Rows, []Cell{textCell(p.Name), numCell("%s", node), numCell("%d", p.Clients), numCell("%d", p.Configured), numCell("%s", mib(p.RSSBytes))})
	}
	return &Section{Title: "The proxy fleet (adsload)", Blocks: []Block{para(line), {Table: t}}}
}

func offset(s *results.Summary, t time.Time) string {
	return fmt.Sprintf("+%.1fs", t.Sub(s.StartedAt).Seconds())
}

func workloads(s *results.Summary) *Section {
	if len(s.Workloads) == 0 {
		return nil
	}
	t := &Table{Head: []string{"Workload role", "Restarts", "OOM kills", "Ready / NotReady transitions"}}
	for _, role := range results.SortedKeys(s.Workloads) {
		w := s.Workloads[role]
		t.Rows = append(t.Rows, []Cell{textCell(role), numCell("%d", w.Restarts), numCell("%d", w.OOMKills), numCell("%d / %d", w.Ready, w.NotReady)})
	}
	return &Section{Title: "Workloads", Blocks: []Block{{Table: t}}}
}

func startup(s *results.Summary) *Section {
	if len(s.Startup) == 0 {
		return nil
	}
	t := &Table{Head: []string{"Mode", "Pods (started)", "App restarts", "Exit codes", "Failed first calls", "Creation → first success P50 / P99",
		"Creation → Ready P50 / P99", "Proxy first config P50 / P99", "Injected pod"}}
	p5099 := func(l results.Latency) Cell { return numCell("%.0f / %.0f ms", l.P50, l.P99) }
	for _, st := range s.Startup {
		codes := ""
		for _, c := range results.SortedKeys(st.ExitCodes) {
			codes += fmt.Sprintf("%s×%d ", c, st.ExitCodes[c])
		}
		var pod Cell
		if st.PodSpec != "" {
			pod.Text = Text{{S: st.PodSpec, Link: st.PodSpec}}
		}
		t.Rows = append(t.Rows, []Cell{textCell(st.Mode), numCell("%d (%d)", st.Pods, st.Started), numCell("%d", st.AppRestarts), textCell(codes),
			numCell("%d", st.FailedFirstCalls), p5099(st.FirstSuccessMs), p5099(st.ReadyMs), p5099(st.ProxyFirstConfigMs), pod})
	}
	return &Section{Title: "App start-up by sidecar start mode", Blocks: []Block{{Table: t}}}
}

func faults(s *results.Summary) *Section {
	if len(s.Faults) == 0 {
		return nil
	}
	t := &Table{Head: []string{"Fault", "Implementation"}}
	for _, f := range s.Faults {
		impl := Text{}
		if f.Fallback {
			impl = append(impl, strong("generic fallback"), txt(" (the control plane has no hook): "))
		}
		impl = append(impl, txt(f.Implementation))
		t.Rows = append(t.Rows, []Cell{textCell(f.Name), {Text: impl}})
	}
	return &Section{Title: "Faults", Blocks: []Block{{Table: t}}}
}

func measurements(s *results.Summary) *Section {
	if len(s.Measurements) == 0 {
		return nil
	}
	t := &Table{Head: []string{"Measurement", "Role", "Usable", "Samples", "Failures", "Last failure"}}
	for _, m := range s.Measurements {
		ok := Cell{Text: plain("yes")}
		if !m.OK {
			ok = Cell{Text: Text{strong("no")}}
		}
		t.Rows = append(t.Rows, []Cell{textCell(m.Name), textCell(m.Role), ok, numCell("%d", m.Samples), numCell("%d", m.Failures), textCell(m.Error)})
	}
	return &Section{Title: "Measurements", Blocks: []Block{{Table: t}}}
}

// logs lists the container logs kept in the run directory, and those that could not be read.
func logs(s *results.Summary) *Section {
	l := s.Logs
	if l == nil {
		return nil
	}
	sec := &Section{Title: "Logs"}
	kept := 0
	for _, f := range l.Files {
		if f.Path != "" {
			kept++
		}
	}
	sec.Blocks = append(sec.Blocks, para(plain("%d container logs of the pods of the run's namespaces (%s), each at most its last %s, read at the teardown.",
		kept, strings.Join(l.Namespaces, ", "), mib(l.MaxBytes))))
	if len(l.Files) > 0 {
		t := &Table{Head: []string{"Namespace", "Pod", "Container", "Log", "Size", "Note"}}
		for _, f := range l.Files {
			container := f.Container
			if f.Previous {
				container += " (previous)"
			}
			file := Cell{}
			if f.Path != "" {
				file.Text = Text{{S: f.Path, Link: f.Path}}
			}
			note := f.Error
			if f.Cut && note == "" {
				note = "cut: its end only"
			}
			size := Cell{Class: "num"}
			if f.Path != "" {
				size.Text = plain("%s", bytesText(f.Bytes))
			}
			t.Rows = append(t.Rows, []Cell{textCell(f.Namespace), textCell(f.Pod), textCell(container), file, size, textCell(note)})
		}
		sec.Blocks = append(sec.Blocks, Block{Table: t})
	}
	var errs []Text
	for _, e := range l.Errors {
		errs = append(errs, plain("%s", e))
	}
	if errs != nil {
		sec.Blocks = append(sec.Blocks, Block{Items: errs})
	}
	return sec
}

// profiles shows the allocation sites for the profiles that matter (the peak heap and those
// taken before an OOM kill) and lists the rest.
func profiles(s *results.Summary) *Section {
	cp := s.ControlPlaneStats
	if cp == nil || len(cp.Profiles) == 0 {
		return nil
	}
	peak := -1
	for i, p := range cp.Profiles {
		if p.InUseBytes > 0 && (peak < 0 || p.InUseBytes > cp.Profiles[peak].InUseBytes) {
			peak = i
		}
	}
	t := &Table{Head: []string{"Profile", "Kind", "Reason", "At", "In use", "Top in-use allocation sites"}}
	for i, p := range cp.Profiles {
		inUse := ""
		if p.InUseBytes > 0 {
			inUse = mib(p.InUseBytes)
		}
		var top Text
		if i == peak || p.Reason == "before-oom" {
			for j, a := range p.Top {
				if j > 0 {
					top = append(top, Span{Break: true})
				}
				top = append(top, txt(mib(a.InUseBytes)+" "), code(a.Function))
			}
		}
		t.Rows = append(t.Rows, []Cell{{Text: Text{{S: p.File, Link: p.File}}}, textCell(p.Kind), textCell(p.Reason), numCell("%s", offset(s, p.At)),
			numCell("%s", inUse), {Text: top}})
	}
	return &Section{Title: "Heap profiles", Blocks: []Block{{Table: t}}}
}

func chartsSection(s *results.Summary, charts []results.Chart) *Section {
	if len(charts) == 0 {
		return nil
	}
	var imgs []Image
	for _, c := range charts {
		imgs = append(imgs, Image{Title: c.Title, PNG: c.PNG, SVG: c.SVG})
	}
	var marks Text
	for i, m := range results.Markers(s) {
		if i > 0 {
			marks = append(marks, txt(" · "))
		}
		label := " " + m.Event.Kind
		if m.Event.Object != "" {
			label += " " + m.Event.Object
		}
		marks = append(marks, strong(fmt.Sprint(m.N)), txt(fmt.Sprintf("%s (+%.1f s)", label, m.Offset)))
	}
	sec := &Section{Title: "Charts", Blocks: []Block{{Images: imgs}}}
	if marks != nil {
		sec.Blocks = append(sec.Blocks, para(append(Text{txt("Markers: ")}, marks...)))
	}
	return sec
}

// timeline is every event in time order (they are recorded as they are seen, and an event
// taken from the API may be older than one the harness recorded before it), numbered as the
// charts' markers are.
func timeline(s *results.Summary) *Section {
	events := append([]results.Event(nil), s.Events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].At.Before(events[j].At) })
	t := &Table{Head: []string{"Offset", "Marker", "Event", "Object", "Detail", "Watcher lag"}}
	mk := 0
	for _, e := range events {
		marker := Cell{Class: "num"}
		if results.IsMarker(e.Kind) {
			mk++
			marker.Text = plain("%d", mk)
		}
		lag := ""
		if e.ObservedAt != nil {
			lag = e.ObservedAt.Sub(e.At).Round(time.Millisecond).String()
		}
		t.Rows = append(t.Rows, []Cell{numCell("%s", offset(s, e.At)), marker, textCell(e.Kind), textCell(e.Object), textCell(e.Detail), numCell("%s", lag)})
	}
	return &Section{Title: "Timeline", Blocks: []Block{{Table: t}}}
}
