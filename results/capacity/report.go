package capacity

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/results"
)

func mib(b float64) string { return fmt.Sprintf("%.1f", b/(1<<20)) }

// fitCells are a fit's figures: MiB at zero, B per endpoint, KiB per proxy, B per endpoint
// and proxy, R², range.
func fitCells(f *Fit) []string {
	if f == nil {
		return []string{"—", "—", "—", "—", "—", "—"}
	}
	perProxy, cross := "not fitted (one fleet size)", "—"
	if f.ProxiesFitted {
		perProxy = fmt.Sprintf("%.1f KiB", f.C/1024)
	}
	if f.Cross {
		cross = fmt.Sprintf("%.2f B", f.D)
	}
	return []string{mib(f.A) + " MiB", fmt.Sprintf("%.0f B", f.B), perProxy, cross, fmt.Sprintf("%.3f", f.R2),
		fmt.Sprintf("%d–%d endpoints, %d–%d proxies, %d points (RMS residual %s MiB)", f.EndpointsMin, f.EndpointsMax, f.ProxiesMin, f.ProxiesMax, f.Points, mib(f.RMS))}
}

// secs is a duration cell: "—" when not measured, "> N s" when the wait ended first.
func secs(measured, converged bool, s float64) string {
	switch {
	case !measured:
		return "—"
	case !converged:
		return fmt.Sprintf("> %.1f s (not converged)", s)
	}
	return fmt.Sprintf("%.1f s", s)
}

// WriteMarkdown writes capacity.md's text.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("# Capacity: serviceentry-scale by fleet size\n\n")
	if r.StartedAt != nil && r.FinishedAt != nil {
		fmt.Fprintf(&b, "%s to %s (wall time %s). ", r.StartedAt.UTC().Format(time.RFC3339), r.FinishedAt.UTC().Format(time.RFC3339), r.FinishedAt.Sub(*r.StartedAt).Round(time.Second))
	}
	b.WriteString("Heap (live, after forced GCs) and RSS (the control plane's cgroup) fitted as a + b·endpoints + c·proxies, and with + d·endpoints·proxies, by least squares over every measured state of every run (each run's baseline with the fleet connected and no generated config, and each step); push time P99 is the control plane's own full-push histogram over the step; convergence is from the end of a step's apply until the oracle client held the step's complete config, and until every client of the fleet held its clusters (CDS).\n\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("## Fits\n\nTwo models: a + b·endpoints + c·proxies, and the same + d·endpoints·proxies (what each proxy holds per endpoint: its subscriptions, the config pushed to it), fitted when the runs have two fleet sizes or more.\n\n")
	b.WriteString("| control plane | memory | a | per endpoint (b) | per proxy (c) | per endpoint·proxy (d) | R² | fitted on |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, cp := range r.ControlPlanes {
		for _, m := range []struct {
			name string
			f    *Fit
		}{{"heap", cp.Heap}, {"heap", cp.HeapCross}, {"RSS", cp.RSS}, {"RSS", cp.RSSCross}} {
			if m.f == nil && (m.name == "heap" && cp.Heap != nil || m.name == "RSS" && cp.RSS != nil) {
				continue // no cross fit beside a linear one
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", cp.Name, m.name, strings.Join(fitCells(m.f), " | "))
		}
	}
	if r.BudgetBytes > 0 {
		fmt.Fprintf(&b, "\n## Projection: endpoints a %s MiB RSS budget holds\n\n", mib(float64(r.BudgetBytes)))
		fmt.Fprintf(&b, "By the RSS fit, at %d endpoints per ServiceEntry; *extrapolated* is outside the range the fit was made on.\n\n", r.EndpointsPerServiceEntry)
		b.WriteString("| control plane | model | proxies | endpoints | ServiceEntries | |\n| --- | --- | --- | --- | --- | --- |\n")
		for _, cp := range r.ControlPlanes {
			for _, p := range cp.Projections {
				note, model := "", "a + b·E + c·P"
				if p.Extrapolated {
					note = "extrapolated"
				}
				if p.Cross {
					model = "+ d·E·P"
				}
				if p.None {
					fmt.Fprintf(&b, "| %s | %s | %d | none: the fleet alone fills the budget | 0 | %s |\n", cp.Name, model, p.Proxies, note)
					continue
				}
				fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s |\n", cp.Name, model, p.Proxies, p.Endpoints, p.ServiceEntries, note)
			}
		}
	}
	b.WriteString("\n## Steps\n\n| control plane | proxies | ServiceEntries | endpoints | heap MiB | RSS MiB | full pushes | push P99 | oracle converged | fleet converged |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, cp := range r.ControlPlanes {
		for _, row := range cp.Rows {
			push := "—"
			if row.PushMeasured {
				push = fmt.Sprintf("%.0f ms", row.PushP99Ms)
			}
			fleet := secs(row.FleetMeasured, row.FleetConverged, row.FleetConvergeSeconds)
			if row.Proxies == 0 {
				fleet = "no fleet"
			}
			pushes := "—"
			if row.PushMeasured {
				pushes = fmt.Sprint(row.PushCount)
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s | %s | %s | %s | %s |\n", cp.Name, row.Proxies, row.ServiceEntries, row.Endpoints,
				mib(float64(row.HeapBytes)), mib(float64(row.RSSBytes)), pushes, push, secs(true, row.Converged, row.ConvergeSeconds), fleet)
		}
	}
	b.WriteString("\n## Runs\n\n| control plane | proxies | verdict | wall time | directory |\n| --- | --- | --- | --- | --- |\n")
	for _, cp := range r.ControlPlanes {
		for _, run := range cp.Runs {
			wall := "—"
			if run.Seconds > 0 {
				wall = (time.Duration(run.Seconds) * time.Second).String()
			}
			verdict := string(run.Verdict)
			if run.Error != "" {
				verdict += ": " + results.MarkdownCell(run.Error)
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", cp.Name, run.Proxies, verdict, wall, run.Dir)
		}
	}
	var errs []string
	for _, cp := range r.ControlPlanes {
		for _, e := range cp.Errors {
			errs = append(errs, fmt.Sprintf("- %s: %s\n", cp.Name, e))
		}
	}
	if len(errs) > 0 {
		b.WriteString("\n## Not measured\n\n" + strings.Join(errs, ""))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// Write writes capacity.json and capacity.md into dir, each atomically.
func Write(dir string, r *Report) error {
	return results.WriteJSONAndMarkdown(dir, "capacity report", JSONFile, r, MarkdownFile, r.WriteMarkdown)
}

// In names the capacity files dir already holds.
func In(dir string) []string { return results.FilesIn(dir, JSONFile, MarkdownFile) }
