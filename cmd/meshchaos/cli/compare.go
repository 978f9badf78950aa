package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/results"
)

func init() { register(newCompareCmd) }

func newCompareCmd() *cobra.Command {
	var maxRegression float64
	cmd := &cobra.Command{
		Use:   "compare BASE CAND",
		Short: "Compare a candidate run with a base run and fail on a regression",
		Long: `Prints the runs' metrics side by side (error rate, error window, latency, pushes, peak heap,
restarts, OOM kills) and their checks. BASE and CAND are run directories, or directories whose
subdirectories are repeat runs of one experiment (each side then counts with the mean).

A gated metric regresses when the candidate is worse by more than --max-regression percent (and
by more than a small absolute floor for latency and heap); a check that passed in the base and
fails in the candidate is a regression too.

Exit code: 0 no regression, 1 a regression, 2 bad input (missing or invalid run directory, runs
of different experiments, a run with verdict error).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if maxRegression < 0 {
				return Usagef("--max-regression %g must be ≥ 0 (a percentage)", maxRegression)
			}
			base, err := loadRuns(args[0])
			if err != nil {
				return err
			}
			cand, err := loadRuns(args[1])
			if err != nil {
				return err
			}
			c, err := results.Compare(base, cand, maxRegression)
			if err != nil {
				return Usagef("%v", err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: base %s (%d run(s)) vs candidate %s (%d run(s))\n\n", base[0].Experiment, args[0], len(base), args[1], len(cand))
			if err := c.WriteTable(out); err != nil {
				return err
			}
			if c.Regressed() {
				return WithExitCode(1, fmt.Errorf("the candidate regressed (max regression %g %%)", maxRegression))
			}
			fmt.Fprintln(out, "\nno regression")
			return nil
		},
	}
	cmd.Flags().Float64Var(&maxRegression, "max-regression", 10, "largest tolerated worsening of a gated metric, in percent")
	return cmd
}

// loadRuns reads one run directory, or every run directory directly under path.
func loadRuns(path string) ([]*results.Summary, error) {
	if _, err := os.Stat(filepath.Join(path, results.SummaryFile)); err == nil {
		s, err := results.Read(path)
		if err != nil {
			return nil, Usagef("%v", err)
		}
		return checkUsable(path, s)
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
	var out []*results.Summary
	for _, d := range dirs {
		s, err := results.Read(d)
		if err != nil {
			return nil, Usagef("%v", err)
		}
		if _, err := checkUsable(d, s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// checkUsable refuses runs that could not be carried out: their numbers are partial.
func checkUsable(dir string, s *results.Summary) ([]*results.Summary, error) {
	if s.Verdict == results.VerdictError {
		return nil, WithExitCode(2, errors.New(dir+": the run could not be carried out ("+s.Error+"); re-run it before comparing"))
	}
	return []*results.Summary{s}, nil
}
