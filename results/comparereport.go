package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshchaos/meshchaos/results/stats"
)

// comparisonHeader is the column header of a group's measure table.
var comparisonHeader = []string{"measure", "better", "base: median (runs)", "candidate: median (runs)", "Δ cand − base [CI]", "ratio [CI]", "p worse", "verdict"}

// measureRow renders one measure's cells.
func (c *Comparison) measureRow(m MeasureResult) []string {
	side := func(vs []float64) string {
		if len(vs) == 0 {
			return "—"
		}
		parts := make([]string, len(vs))
		for i, v := range vs {
			parts[i] = FormatValue(v, "")
		}
		return fmt.Sprintf("%s (%s)", FormatValue(stats.Median(vs), m.Unit), strings.Join(parts, ", "))
	}
	row := []string{m.Name, string(m.Direction), side(m.Base), side(m.Candidate), "—", "—", "—", verdictText(m)}
	if s := m.Stats; s != nil {
		row[4] = fmt.Sprintf("%s [%s, %s]", signed(s.Difference.Estimate), signed(s.Difference.Low), signed(s.Difference.High))
		if s.Ratio != nil {
			row[5] = fmt.Sprintf("%.3g [%.3g, %.3g]", s.Ratio.Estimate, s.Ratio.Low, s.Ratio.High)
		}
		row[6] = fmt.Sprintf("%.3g", s.PWorse)
	}
	return row
}

func verdictText(m MeasureResult) string {
	switch m.Verdict {
	case stats.Regression, stats.Improvement:
		return fmt.Sprintf("%s (%s)", strings.ToUpper(string(m.Verdict)), m.Stats.Basis)
	}
	return string(m.Verdict)
}

func signed(v float64) string {
	s := FormatValue(v, "")
	if v > 0 {
		s = "+" + s
	}
	return s
}

func (c *Comparison) groupTitle(g Group) string {
	sideText := func(refs []RunRef) string {
		used, cps := 0, []string{}
		for _, r := range refs {
			if r.Verdict != VerdictError {
				used++
			}
			if r.ControlPlane != "" && !slices.Contains(cps, r.ControlPlane) {
				cps = append(cps, r.ControlPlane)
			}
		}
		s := fmt.Sprintf("%d run(s)", used)
		if len(cps) > 0 {
			s += " of " + strings.Join(cps, ", ")
		}
		if errored := len(refs) - used; errored > 0 {
			s += fmt.Sprintf(", %d errored (not counted)", errored)
		}
		return s
	}
	status := "no regression"
	if c.Interrupted != nil {
		// Not the words of a verdict: the runs that would have given one were not all made.
		status = "nothing regressed in the runs made (interrupted: no verdict)"
	}
	switch {
	case g.Error != "":
		status = "NOT COMPARED: " + g.Error
	case len(g.Regressions()) > 0:
		status = "REGRESSION: " + strings.Join(g.Regressions(), ", ")
	}
	return fmt.Sprintf("%s — base %s, candidate %s — %s", c.Label(g), sideText(g.Base), sideText(g.Candidate), status)
}

// Outcome is the comparison's one-line conclusion. An interrupted comparison's says so first:
// whatever the runs made show, it is no verdict.
func (c *Comparison) Outcome() string {
	o := c.outcome()
	if c.Interrupted != nil {
		return fmt.Sprintf("INTERRUPTED: %s: no verdict (the runs made alone: %s)", c.Interrupted, o)
	}
	return o
}

// outcome is the conclusion the runs compared support.
func (c *Comparison) outcome() string {
	var regressed []string
	for _, g := range c.Groups {
		if r := g.Regressions(); len(r) > 0 {
			regressed = append(regressed, fmt.Sprintf("%s (%s)", c.Label(g), strings.Join(r, ", ")))
		}
	}
	inc := c.Incomplete()
	switch {
	case len(regressed) > 0:
		return "REGRESSION in " + strings.Join(regressed, "; ")
	case len(inc) > 0:
		return "INCOMPLETE: " + strings.Join(inc, "; ")
	}
	return "no regression"
}

func (c *Comparison) settings() string {
	return fmt.Sprintf("one-sided Mann-Whitney U at α = %g per direction; %g %% bootstrap intervals of the median difference (%d resamples, seed %d)",
		c.Alpha, 100*c.Confidence, c.Resamples, c.Seed)
}

// WriteTable prints the comparison for a terminal: per group its title, measures and checks.
func (c *Comparison) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "base %s vs candidate %s (%s)\n", c.Base, c.Candidate, c.settings())
	for _, g := range c.Groups {
		fmt.Fprintf(w, "\n%s\n", c.groupTitle(g))
		if g.Error != "" {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.ToUpper(strings.Join(comparisonHeader, "\t")))
		for _, m := range g.Measures {
			fmt.Fprintln(tw, strings.Join(c.measureRow(m), "\t"))
		}
		if len(g.Checks) > 0 {
			fmt.Fprintln(tw, "\t\t\t\t\t\t\t")
			fmt.Fprintln(tw, "CHECK\t\tBASE\tCANDIDATE\t\t\t\tSTATUS")
			for _, ch := range g.Checks {
				fmt.Fprintf(tw, "%s\t\t%s\t%s\t\t\t\t%s\n", ch.Name, ch.Base, ch.Candidate, checkStatus(ch))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "\n%s\n", c.Outcome())
	return err
}

func checkStatus(ch CheckChange) string {
	if ch.Regression {
		return "REGRESSION (passed in base, fails in candidate)"
	}
	return "ok"
}

// WriteMarkdown renders comparison.md: the outcome, then per group the measures with both
// distributions, the difference with its interval, the p-value and the verdict, why each
// regression or improvement was called, and the checks.
func (c *Comparison) WriteMarkdown(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Comparison: %s → %s\n\n**%s**\n\n%s. A measure regresses only when the change of the medians is beyond its minimum practical effect and either the test is significant or, with too few runs for the test to reach α, every candidate run is worse than every base run by more than that effect (basis `separated`).\n",
		c.Base, c.Candidate, c.Outcome(), strings.ToUpper(c.settings()[:1])+c.settings()[1:])
	if c.Suite != "" && c.StartedAt != nil && c.FinishedAt != nil {
		fmt.Fprintf(&b, "\nSuite `%s`, %s to %s (wall time %s).\n", c.Suite, c.StartedAt.UTC().Format(time.RFC3339), c.FinishedAt.UTC().Format(time.RFC3339), c.FinishedAt.Sub(*c.StartedAt).Round(time.Second))
	}
	if in := c.Interrupted; in != nil {
		fmt.Fprintf(&b, "\n**%s at %s: no verdict.** The runs made until then are compared below for information only; the runs it cut short or never started are listed as errored and not counted.\n",
			upperFirst(in.String()), in.At.UTC().Format(time.RFC3339))
	}
	for _, g := range c.Groups {
		fmt.Fprintf(&b, "\n## %s\n\n", MarkdownCell(c.groupTitle(g)))
		for _, r := range append(append([]RunRef{}, g.Base...), g.Candidate...) {
			if r.Verdict == VerdictError {
				fmt.Fprintf(&b, "- errored run, not counted: `%s` (%s)\n", r.Dir, r.Error)
			}
		}
		if g.Error != "" {
			continue
		}
		fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(comparisonHeader, " | "), strings.Repeat(" --- |", len(comparisonHeader)))
		for _, m := range g.Measures {
			row := c.measureRow(m)
			for i := range row {
				row[i] = MarkdownCell(row[i])
			}
			if m.Unit != "" {
				row[0] += " (" + m.Unit + ")"
			}
			fmt.Fprintf(&b, "| %s |\n", strings.Join(row, " | "))
		}
		for _, m := range g.Measures {
			if m.Verdict == stats.Regression || m.Verdict == stats.Improvement {
				fmt.Fprintf(&b, "\n- **%s** %s: %s.", m.Name, m.Verdict, m.Stats.Why)
			}
		}
		if len(g.Checks) > 0 {
			b.WriteString("\n\n| check | base | candidate | status |\n| --- | --- | --- | --- |\n")
			for _, ch := range g.Checks {
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", MarkdownCell(ch.Name), ch.Base, ch.Candidate, checkStatus(ch))
			}
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// upperFirst capitalises s's first letter (ASCII).
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// WriteComparison writes comparison.json and comparison.md into dir, each atomically (a
// temporary file in dir renamed over it, mode 0644). It replaces an earlier comparison there:
// callers that must not check with ComparisonIn first.
func WriteComparison(dir string, c *Comparison) error {
	if err := MkdirAll(dir); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	js, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	var md bytes.Buffer
	if err := c.WriteMarkdown(&md); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, ComparisonJSONFile), append(js, '\n')); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, ComparisonMarkdownFile), md.Bytes()); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	return nil
}

// ComparisonIn names the comparison files (comparison.json, comparison.md) dir already holds.
func ComparisonIn(dir string) []string {
	return filesIn(dir, ComparisonJSONFile, ComparisonMarkdownFile)
}

// filesIn names those of files that dir holds.
func filesIn(dir string, files ...string) []string {
	var found []string
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			found = append(found, f)
		}
	}
	return found
}

// MarkdownCell makes s safe for one Markdown table cell: on one line (a multi-line error
// would end the table), pipes escaped.
func MarkdownCell(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", "\\|")
}
