package render

import (
	"fmt"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/results"
)

// scale is the per-step table, a log-log text chart of heap against endpoints with the fit,
// the projection and the first mismatches.
func scale(s *results.Summary) *Section {
	sc := s.Scale
	if sc == nil {
		return nil
	}
	sec := &Section{Title: "Scale"}
	sec.Blocks = append(sec.Blocks, para(plain("Baseline (no generated config): heap %s, RSS %s.", mib(sc.Baseline.HeapBytes), mib(sc.Baseline.RSSBytes))))
	t := &Table{Head: []string{"ServiceEntries", "Endpoints", "Apply", "Full pushes (CP time)", "Client complete after", "Heap", "RSS",
		"Bytes/endpoint", "apiserver RSS", "etcd DB", "Mismatches", "Top allocation site"}}
	for _, st := range sc.Steps {
		conv := numCell("%.1f s", st.ConvergeSeconds)
		if !st.Converged {
			conv = Cell{Text: Text{strong(fmt.Sprintf("not within %.0f s", st.ConvergeSeconds))}, Class: "num"}
		}
		var top Text
		if len(st.Top) > 0 {
			top = Text{txt(mib(st.Top[0].InUseBytes) + " "), code(st.Top[0].Function)}
		}
		pushes := "not measured"
		if st.PushMeasured {
			pushes = fmt.Sprintf("%d (%.2f s)", st.PushCount, st.PushSeconds)
		}
		ses := fmt.Sprint(st.ServiceEntries)
		if st.Verify {
			ses += " (verify)"
		}
		t.Rows = append(t.Rows, []Cell{numCell("%s", ses), numCell("%d", st.Endpoints), numCell("%.1f s (%.0f/s)", st.ApplySeconds, st.ApplyPerSecond),
			numCell("%s", pushes), conv, numCell("%s", mib(st.HeapBytes)), numCell("%s", mib(st.RSSBytes)), numCell("%.0f", st.BytesPerEndpoint),
			numCell("%s", mib(st.APIServerRSSBytes)), numCell("%s", mib(st.EtcdDBBytes)), numCell("%d", st.Mismatches), {Text: top}})
	}
	sec.Blocks = append(sec.Blocks, Block{Table: t})
	if f := sc.Fit; f != nil {
		g := Text{txt("Growth: heap above the baseline ∝ endpoints^"), strong(fmt.Sprintf("%.3f", f.Exponent)),
			txt(fmt.Sprintf(" ± %.3f (%d points, log-log least squares", f.StdErr, f.Points))}
		if f.Resolution > 0 {
			g = append(g, txt(fmt.Sprintf("; the heap's jitter alone could move it by %.2f", f.Resolution)))
		}
		g = append(g, txt(")."))
		if r := sc.RSSFit; r != nil {
			g = append(g, txt(fmt.Sprintf(" RSS above its baseline ∝ endpoints^%.3f ± %.3f.", r.Exponent, r.StdErr)))
		}
		sec.Blocks = append(sec.Blocks, para(g), Block{Pre: sc.Chart(60, 16)})
	}
	if p := sc.Projection; p != nil {
		c := Text{txt(fmt.Sprintf("Capacity under %s: about ", mib(p.BudgetBytes))), strong(fmt.Sprintf("%d endpoints", p.Endpoints)),
			txt(fmt.Sprintf(" (%d ServiceEntries)", p.ServiceEntries))}
		if p.Capped {
			c = append(c, txt(", capped at the largest step allowed"))
		}
		if p.Verified {
			c = append(c, txt(fmt.Sprintf("; verified with a step at that size: heap %s, RSS %s, within budget: %v", mib(p.VerifiedHeapBytes), mib(p.VerifiedRSSBytes), p.WithinBudget)))
		} else {
			c = append(c, txt("; not verified"))
		}
		sec.Blocks = append(sec.Blocks, para(append(c, txt("."))))
	}
	counts := "none"
	if len(sc.MismatchCount) > 0 {
		var parts []string
		for _, k := range results.SortedKeys(sc.MismatchCount) {
			parts = append(parts, fmt.Sprintf("%s %d", k, sc.MismatchCount[k]))
		}
		counts = strings.Join(parts, ", ")
	}
	sec.Blocks = append(sec.Blocks, para(plain("Oracle mismatches by scenario: %s.", counts)))
	if len(sc.Mismatches) > 0 {
		mt := &Table{Head: []string{"Step (SEs)", "Scenario", "Cluster", "Want", "Got"}}
		for _, m := range sc.Mismatches {
			mt.Rows = append(mt.Rows, []Cell{numCell("%d", m.Step), textCell(m.Scenario), textCell(m.Cluster), textCell(m.Want), textCell(m.Got)})
		}
		sec.Blocks = append(sec.Blocks, Block{Table: mt})
	}
	return sec
}

// soak is the faults, the trends and goroutine counts, and a text chart of memory and
// goroutines over time.
func soak(s *results.Summary) *Section {
	sk := s.Soak
	if sk == nil {
		return nil
	}
	recovered := 0
	for _, f := range sk.Faults {
		if f.Recovered {
			recovered++
		}
	}
	sec := &Section{Title: "Soak"}
	sec.Blocks = append(sec.Blocks, para(plain("%d faults, one every %s; %d recovered.", len(sk.Faults), time.Duration(sk.FaultEverySeconds*float64(time.Second)), recovered)))
	t := &Table{Head: []string{"#", "fault", "injected", "recovered after", "error"}}
	for i, f := range sk.Faults {
		rec := "—"
		if f.Recovered {
			rec = fmt.Sprintf("%.1f s", f.RecoverySeconds)
		}
		t.Rows = append(t.Rows, []Cell{numCell("%d", i+1), textCell(f.Name), textCell(f.InjectedAt.UTC().Format("15:04:05")), numCell("%s", rec), textCell(f.Error)})
	}
	sec.Blocks = append(sec.Blocks, Block{Table: t})
	var items []Text
	trend := func(name string, g *results.Growth) {
		if g == nil {
			items = append(items, plain("%s: no trend (too few settled points)", name))
			return
		}
		items = append(items, plain("%s: %+.2f ± %.2f MiB/hour (mean %.1f MiB, %d points, %d process lifetime(s))",
			name, g.SlopePerHour/(1<<20), g.StdErr/(1<<20), g.Mean/(1<<20), g.Points, g.Segments))
	}
	trend("control-plane live heap", sk.ControlPlaneHeap)
	trend("harness live heap", sk.HarnessHeap)
	gor := func(name string, d *results.GoroutineDelta) {
		if d == nil {
			items = append(items, plain("%s goroutines: no profiles", name))
			return
		}
		note := ""
		if d.Restarted {
			note = " (the process restarted in between)"
		}
		g := Text{txt(fmt.Sprintf("%s goroutines: %d at the start, %d at the end%s", name, d.Start, d.End, note))}
		if d.StartFile != "" && d.EndFile != "" { // no empty code spans for profiles not kept
			g = append(g, txt(" ("), code(d.StartFile), txt(", "), code(d.EndFile), txt(")"))
		}
		for _, st := range d.Grown[:min(len(d.Grown), 5)] {
			g = append(g, Span{Break: true}, txt(fmt.Sprintf("%+d %s", st.Delta, st.Stack)))
		}
		items = append(items, g)
	}
	gor("control-plane", sk.ControlPlaneGoroutines)
	gor("harness", sk.HarnessGoroutines)
	sec.Blocks = append(sec.Blocks, Block{Items: items})
	if c := sk.Chart(); c != "" {
		sec.Blocks = append(sec.Blocks, para(Text{txt("Memory (heap, MiB) and goroutines over time, one line per sample ("), code("C"), txt(" control plane heap, "),
			code("H"), txt(" harness heap; "), code("!"), txt(" a fault injected in that interval):")}), Block{Pre: c})
	}
	return sec
}
