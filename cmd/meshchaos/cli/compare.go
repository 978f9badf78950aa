package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/results"
)

func init() { register(newCompareCmd) }

// statsFlags are the statistics settings compare and upgrade-check share.
type statsFlags struct {
	alpha         float64
	seed          uint64
	maxRegression float64
}

func (f *statsFlags) register(cmd *cobra.Command) {
	cmd.Flags().Float64Var(&f.alpha, "alpha", 0.05, "one-sided significance level of the Mann-Whitney U test, per direction")
	cmd.Flags().Uint64Var(&f.seed, "seed", 1, "bootstrap seed (the same runs and seed give the same intervals)")
	cmd.Flags().Float64Var(&f.maxRegression, "max-regression", 0, "replace every gated measure's relative minimum effect by this percentage (default: each measure's own)")
}

// options checks the flags and turns them into comparison options.
func (f *statsFlags) options(cmd *cobra.Command) (results.CompareOptions, error) {
	var o results.CompareOptions
	if !(f.alpha > 0 && f.alpha < 0.5) {
		return o, Usagef("--alpha %g: want a significance level between 0 and 0.5 (e.g. 0.05)", f.alpha)
	}
	o.Stats.Alpha, o.Stats.Seed = f.alpha, f.seed
	if cmd.Flags().Changed("max-regression") {
		// NaN passes every comparison and Inf lets any regression through: the gate would be off.
		if f.maxRegression < 0 || math.IsNaN(f.maxRegression) || math.IsInf(f.maxRegression, 0) {
			return o, Usagef("--max-regression %g must be a finite percentage ≥ 0", f.maxRegression)
		}
		rel := f.maxRegression / 100
		o.MinRel = &rel
	}
	return o, nil
}

func newCompareCmd() *cobra.Command {
	var sf statsFlags
	var out, output string
	var force bool
	cmd := &cobra.Command{
		Use:   "compare BASE CAND [--out DIR] [-o text|json]",
		Short: "Compare candidate runs with base runs, measure by measure, and fail on a regression",
		Long: `BASE and CAND are run directories, or directories whose subdirectories are run directories
(repeat runs, several experiments: runs are grouped by experiment and parameters).

For every measure (error rate, error window, latency, pushes, push time, heap, CPU, convergence,
availability …) it shows both distributions, the difference of the medians with a bootstrap
confidence interval, the one-sided Mann-Whitney U p-value, and a verdict: regression,
improvement or no evidence. A measure regresses when the change is beyond its minimum practical
effect and the test is significant at --alpha — or, with too few runs for the test to ever reach
--alpha (fewer than 3 a side), when every candidate run is worse than every base run by more than
that effect. A check that passed in every base run and fails in a candidate run is a regression.

With -o json, stdout holds the comparison as one JSON document (what --out writes as
comparison.json) instead of the table.

Exit code: 0 no regression, 1 a regression, 2 bad input (missing or invalid run directory, an
experiment on one side only, a run with verdict error).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			o, err := sf.options(cmd)
			if err != nil {
				return err
			}
			if err := checkComparisonOut(out, force, "pass --force to replace it"); err != nil {
				return err
			}
			base, err := loadRuns(args[0])
			if err != nil {
				return err
			}
			cand, err := loadRuns(args[1])
			if err != nil {
				return err
			}
			c, err := results.Compare(base, cand, o)
			if err != nil {
				return Usagef("%v", err)
			}
			c.Base, c.Candidate = args[0], args[1]
			var made results.Created
			return finishComparison(cmd.OutOrStdout(), cmd.ErrOrStderr(), output, &made, c, out, force)
		},
	}
	sf.register(cmd)
	cmd.Flags().StringVar(&out, "out", "", "a directory to write comparison.md and comparison.json into, besides stdout (created; one that holds a comparison is refused without --force)")
	cmd.Flags().BoolVar(&force, "force", false, "with --out: replace the comparison the directory holds")
	outputFlag(cmd, &output)
	return cmd
}

// checkComparisonOut refuses, unless force, an output directory that already holds a comparison:
// it would be overwritten. hint, when given, says how the command replaces it.
func checkComparisonOut(dir string, force bool, hint string) error {
	if dir == "" || force {
		return nil
	}
	found := results.ComparisonIn(dir)
	if len(found) == 0 {
		return nil
	}
	if hint != "" {
		hint = ", or " + hint
	}
	return Usagef("--out %s already holds a comparison (%s): choose another directory or remove it%s", dir, strings.Join(found, ", "), hint)
}

// finishComparison prints the comparison, writes it into dir (when given; one that holds a
// comparison only with force) and turns it into the exit code: 1 on a regression, 2 when the
// comparison was interrupted (no verdict, whatever it shows), a group could not be compared or
// the comparison could not be written. made records what the command
// created; it and the comparison's files are handed to the user who ran it through sudo.
// format is -o: the table (text) or comparison.json's document (json) on w.
func finishComparison(w, stderr io.Writer, format string, made *results.Created, c *results.Comparison, dir string, force bool) error {
	if err := printComparison(w, format, c); err != nil {
		return err
	}
	// With json, stdout holds the document alone: where the report is goes to stderr.
	reportTo := w
	if format == outputJSON {
		reportTo = stderr
	}
	if dir != "" {
		// Again: a long upgrade-check gives another process time to write one.
		if err := checkComparisonOut(dir, force, ""); err != nil {
			return err
		}
		err := made.MkdirAll(dir)
		if err != nil {
			err = fmt.Errorf("write comparison: %w", err)
		} else {
			err = results.WriteComparison(dir, c)
		}
		handOver(stderr, append(made.Paths(), filepath.Join(dir, results.ComparisonJSONFile), filepath.Join(dir, results.ComparisonMarkdownFile))...)
		if err != nil {
			// The outcome printed above is not on disk: the exit code must not pretend it is.
			return WithExitCode(2, fmt.Errorf("%w: the outcome was %s", err, c.Outcome()))
		}
		fmt.Fprintf(reportTo, "report: %s\n", filepath.Join(dir, results.ComparisonMarkdownFile))
	}
	if c.Interrupted != nil {
		// Before the regression: what the runs made show is no verdict on the candidate.
		return WithExitCode(2, errors.New(c.Outcome()))
	}
	if c.Regressed() {
		return WithExitCode(1, errors.New("the candidate regressed: "+c.Outcome()))
	}
	if inc := c.Incomplete(); len(inc) > 0 {
		return Usagef("not every experiment could be compared (%s): give both sides runs of the same experiments and parameters", inc[0])
	}
	return nil
}

// printComparison prints c on w: its table (text), or the document comparison.json holds (json).
func printComparison(w io.Writer, format string, c *results.Comparison) error {
	if format == outputJSON {
		return writeJSON(w, c)
	}
	return c.WriteTable(w)
}

// loadRuns reads one run directory, or every run directory directly under path.
func loadRuns(path string) ([]results.Run, error) {
	if _, err := os.Stat(filepath.Join(path, results.SummaryFile)); err == nil {
		return readUsable([]string{path})
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, Usagef("%v: give a run directory (with summary.json) or a directory of them", err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join(path, e.Name(), results.SummaryFile)); err == nil {
				dirs = append(dirs, filepath.Join(path, e.Name()))
			}
		}
	}
	if len(dirs) == 0 {
		return nil, Usagef("%s holds no summary.json, nor subdirectories with one: is it a meshchaos run directory?", path)
	}
	sort.Strings(dirs)
	return readUsable(dirs)
}

// readUsable reads run directories and refuses runs that could not be carried out: their
// numbers are partial.
func readUsable(dirs []string) ([]results.Run, error) {
	var out []results.Run
	for _, d := range dirs {
		s, err := results.Read(d)
		if err != nil {
			return nil, Usagef("%v", err)
		}
		if s.Verdict == results.VerdictError {
			return nil, WithExitCode(2, errors.New(d+": the run could not be carried out ("+s.Error+"); re-run it or move it away before comparing"))
		}
		out = append(out, results.Run{Dir: d, Summary: s})
	}
	return out, nil
}
