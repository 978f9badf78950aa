package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshchaos/meshchaos/results/stats"
)

// FidelitySchema is the value of Fidelity.Schema (fidelity.json).
const FidelitySchema = "meshchaos-fidelity/v1"

// Files `meshchaos fidelity` writes beside its comparison.
const (
	FidelityJSONFile     = "fidelity.json"
	FidelityMarkdownFile = "fidelity.md"
)

// FidelityKind says how a measure is held: timings and counts must agree within
// FidelityFactor; costs (memory, CPU) are shown, the reference may be the cheaper.
type FidelityKind string

// Kinds of fidelity measures.
const (
	FidelityTiming FidelityKind = "timing"
	FidelityCount  FidelityKind = "count"
	FidelityCost   FidelityKind = "cost"
)

// FidelityFactor is how far the reference's median may be from istiod's, either way, in timing
// and in counts: the reference stands in for istiod only where its verdicts would be istiod's.
const FidelityFactor = 2.0

// fidelityMeasures are the comparison's measures the fidelity table holds, and how.
var fidelityMeasures = []struct {
	name string
	kind FidelityKind
}{
	{"push time p99", FidelityTiming},
	{"convergence p99", FidelityTiming},
	{"ready after the kill", FidelityTiming},
	{"error window", FidelityTiming},
	{"full pushes per flap", FidelityCount},
	{"eds pushes per flap", FidelityCount},
	{"full pushes", FidelityCount},
	{"xds availability", FidelityCount},
	{"bytes per endpoint", FidelityCost},
	{"peak heap", FidelityCost},
	{"control-plane CPU", FidelityCost},
}

// FidelityRow is one measure of one experiment: istiod's runs, the reference's, and how far
// apart their medians are.
type FidelityRow struct {
	Experiment string       `json:"experiment"`
	Measure    string       `json:"measure"`
	Unit       string       `json:"unit,omitempty"`
	Kind       FidelityKind `json:"kind"`
	Istiod     []float64    `json:"istiod"`
	Reference  []float64    `json:"reference"`
	// IstiodMedian and ReferenceMedian are absent when a side did not measure it.
	IstiodMedian    *float64 `json:"istiodMedian,omitempty"`
	ReferenceMedian *float64 `json:"referenceMedian,omitempty"`
	// Ratio is reference/istiod of the medians (absent when istiod's is 0 or a side is missing).
	Ratio *float64 `json:"ratio,omitempty"`
	// Status: "agrees", "differs" (timing or count beyond the factor and beyond the measure's
	// noise floor), "cheaper"/"dearer"/"same" (a cost) or "not comparable".
	Status string `json:"status"`
}

// Fidelity is the reference held against istiod, measure by measure (fidelity.json).
type Fidelity struct {
	Schema     string     `json:"schema"`
	Istiod     string     `json:"istiod"`
	Reference  string     `json:"reference"`
	Suite      string     `json:"suite,omitempty"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	// Interrupted: a signal stopped the runs; the table is for information only.
	Interrupted *SuiteInterruption `json:"interrupted,omitempty"`
	// Factor is FidelityFactor when the table was made.
	Factor float64       `json:"factor"`
	Rows   []FidelityRow `json:"rows"`
	// Errors are the groups that could not be compared (no usable run on a side).
	Errors []string `json:"errors,omitempty"`
}

// FidelityOf reads the fidelity table off a comparison whose base is istiod and whose candidate
// is the reference.
func FidelityOf(c *Comparison) *Fidelity {
	f := &Fidelity{Schema: FidelitySchema, Istiod: c.Base, Reference: c.Candidate, Suite: c.Suite,
		StartedAt: c.StartedAt, FinishedAt: c.FinishedAt, Interrupted: c.Interrupted, Factor: FidelityFactor}
	for _, g := range c.Groups {
		if g.Error != "" {
			f.Errors = append(f.Errors, fmt.Sprintf("%s: %s", g.key(), g.Error))
			continue
		}
		for _, fm := range fidelityMeasures {
			for _, m := range g.Measures {
				if m.Name != fm.name || (len(m.Base) == 0 && len(m.Candidate) == 0) {
					continue
				}
				f.Rows = append(f.Rows, fidelityRow(g.Experiment, fm.kind, m))
			}
		}
	}
	return f
}

func fidelityRow(experiment string, kind FidelityKind, m MeasureResult) FidelityRow {
	r := FidelityRow{Experiment: experiment, Measure: m.Name, Unit: m.Unit, Kind: kind, Istiod: m.Base, Reference: m.Candidate, Status: "not comparable"}
	if len(m.Base) > 0 {
		v := stats.Median(m.Base)
		r.IstiodMedian = &v
	}
	if len(m.Candidate) > 0 {
		v := stats.Median(m.Candidate)
		r.ReferenceMedian = &v
	}
	if r.IstiodMedian == nil || r.ReferenceMedian == nil {
		return r
	}
	is, ref := *r.IstiodMedian, *r.ReferenceMedian
	if is != 0 {
		v := ref / is
		r.Ratio = &v
	}
	// Within the measure's noise floor (its minimum effect's absolute part) the two agree
	// whatever the ratio: 1 full push against 0 is no difference a verdict turns on.
	close := math.Abs(ref-is) <= m.Min.Abs
	within := r.Ratio != nil && *r.Ratio >= 1/FidelityFactor && *r.Ratio <= FidelityFactor
	switch {
	case kind == FidelityCost && close:
		r.Status = "same"
	case kind == FidelityCost && ref < is:
		r.Status = "cheaper"
	case kind == FidelityCost:
		r.Status = "dearer"
	case close || within:
		r.Status = "agrees"
	default:
		r.Status = "differs"
	}
	return r
}

// Differs lists the timing and count rows beyond the factor, as "experiment: measure".
func (f *Fidelity) Differs() []string {
	var out []string
	for _, r := range f.Rows {
		if r.Status == "differs" {
			out = append(out, r.Experiment+": "+r.Measure)
		}
	}
	return out
}

// Unmeasured lists the timing and count rows one side did not measure, as "experiment:
// measure": a figure missing on a side is no agreement.
func (f *Fidelity) Unmeasured() []string {
	var out []string
	for _, r := range f.Rows {
		if r.Kind != FidelityCost && r.Status == "not comparable" {
			out = append(out, r.Experiment+": "+r.Measure)
		}
	}
	return out
}

// Concluded reports whether the table can conclude: not interrupted, every experiment compared,
// every timing and count measured on both sides, and at least one row.
func (f *Fidelity) Concluded() bool {
	return f.Interrupted == nil && len(f.Errors) == 0 && len(f.Unmeasured()) == 0 && len(f.Rows) > 0
}

// Outcome is the table's one-line conclusion.
func (f *Fidelity) Outcome() string {
	switch d, u := f.Differs(), f.Unmeasured(); {
	case f.Interrupted != nil:
		return fmt.Sprintf("%s: no conclusion (the table shows the runs made)", f.Interrupted)
	case len(f.Errors) > 0:
		return fmt.Sprintf("incomplete: %d experiment(s) could not be compared (%s)", len(f.Errors), f.Errors[0])
	case len(f.Rows) == 0:
		return "incomplete: no figure of the table was measured on both sides"
	case len(u) > 0:
		return fmt.Sprintf("incomplete: %d timing or count measured on one side only (%s)", len(u), strings.Join(u, "; "))
	case len(d) > 0:
		return fmt.Sprintf("the reference differs from istiod beyond %gx in %d measure(s): %s", f.Factor, len(d), strings.Join(d, "; "))
	default:
		return fmt.Sprintf("the reference agrees with istiod within %gx in every timing and count", f.Factor)
	}
}

func fidelityCells(r FidelityRow) []string {
	num := func(v *float64) string {
		if v == nil {
			return "—"
		}
		return fmt.Sprintf("%.4g", *v)
	}
	runs := func(xs []float64) string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = fmt.Sprintf("%.4g", x)
		}
		return strings.Join(s, ", ")
	}
	name := r.Measure
	if r.Unit != "" {
		name += " (" + r.Unit + ")"
	}
	ratio := "—"
	if r.Ratio != nil {
		ratio = fmt.Sprintf("%.2f", *r.Ratio)
	}
	return []string{r.Experiment, name, string(r.Kind), num(r.IstiodMedian), num(r.ReferenceMedian), ratio, r.Status, runs(r.Istiod), runs(r.Reference)}
}

var fidelityHeader = []string{"experiment", "measure", "kind", "istiod", "reference", "ratio", "status", "istiod runs", "reference runs"}

// WriteTable prints the table for a terminal.
func (f *Fidelity) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "reference %s against istiod %s (medians; ratio = reference/istiod; timings and counts must agree within %gx)\n\n", f.Reference, f.Istiod, f.Factor)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(fidelityHeader, "\t")))
	for _, r := range f.Rows {
		fmt.Fprintln(tw, strings.Join(fidelityCells(r), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", f.Outcome())
	return err
}

// WriteMarkdown writes fidelity.md's text.
func (f *Fidelity) WriteMarkdown(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Fidelity: reference `%s` against istiod `%s`\n\n**%s**\n\n", f.Reference, f.Istiod, f.Outcome())
	if f.Suite != "" && f.StartedAt != nil && f.FinishedAt != nil {
		fmt.Fprintf(&b, "Suite `%s`, %s to %s (wall time %s). ", f.Suite, f.StartedAt.UTC().Format(time.RFC3339), f.FinishedAt.UTC().Format(time.RFC3339), f.FinishedAt.Sub(*f.StartedAt).Round(time.Second))
	}
	fmt.Fprintf(&b, "Medians of each side's runs; ratio = reference / istiod. Timings and counts agree when the ratio is within %gx either way or the medians are within the measure's noise floor (comparison.md's minimum effect); costs are shown: the reference may be the cheaper. Every run's figures are in comparison.md.\n\n", f.Factor)
	for _, e := range f.Errors {
		fmt.Fprintf(&b, "- not compared: %s\n", e)
	}
	if len(f.Errors) > 0 {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(fidelityHeader, " | "), strings.Repeat(" --- |", len(fidelityHeader)))
	for _, r := range f.Rows {
		cells := fidelityCells(r)
		for i := range cells {
			cells[i] = MarkdownCell(cells[i])
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// WriteFidelity writes fidelity.json and fidelity.md into dir, each atomically.
func WriteFidelity(dir string, f *Fidelity) error {
	return WriteJSONAndMarkdown(dir, "fidelity table", FidelityJSONFile, f, FidelityMarkdownFile, f.WriteMarkdown)
}

// WriteJSONAndMarkdown writes v as indented JSON to dir/jsonName and what md writes to
// dir/mdName, each atomically, creating dir; errors name what is written.
func WriteJSONAndMarkdown(dir, what, jsonName string, v any, mdName string, md func(io.Writer) error) error {
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	var b bytes.Buffer
	if err := md(&b); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	if err := MkdirAll(dir); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	for name, data := range map[string][]byte{jsonName: append(js, '\n'), mdName: b.Bytes()} {
		if err := WriteFileAtomic(filepath.Join(dir, name), data); err != nil {
			return fmt.Errorf("write %s: %w", what, err)
		}
	}
	return nil
}

// FilesIn names the files of files that dir holds (a report's, before it is written over).
func FilesIn(dir string, files ...string) []string { return filesIn(dir, files...) }

// FidelityIn names the fidelity files dir already holds.
func FidelityIn(dir string) []string { return filesIn(dir, FidelityJSONFile, FidelityMarkdownFile) }
