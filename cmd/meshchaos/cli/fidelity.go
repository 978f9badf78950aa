package cli

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/results"
)

func init() { register(newFidelityCmd) }

func newFidelityCmd() *cobra.Command {
	u := upgradeCheck{name: "fidelity", labels: [2]string{"istiod", "reference"}}
	cmd := &cobra.Command{
		Use:   "fidelity [--istiod CP] [--reference CP] [--repeats N] [--out DIR] [--set [EXPERIMENT.]k=v]…",
		Short: "Hold the reference control plane against istiod: the same experiments on both, one table of ratios (exit 1 when a timing or count differs beyond 2x)",
		Long: `A verdict on the reference control plane is worth what its likeness to istiod is worth.
fidelity runs the built-in fidelity suite (cp-oom-restart, endpoint-flap, cp-cpu-starvation in the
incident's configuration and serviceentry-scale, at the scale of the tests, 3 runs a side) against
istiod and the reference, alternately as upgrade-check does, and writes a table of the medians'
ratios reference/istiod: push time P99, convergence P99 at the proxies, full and EDS pushes per
flap, time from the OOM kill to ready, error window, xDS availability on the starved node (timings
and counts: they must agree within 2x, or within the measure's noise floor), and heap per
endpoint, peak heap and CPU (costs: shown; the reference may be the cheaper).

DIR gets istiod/ and reference/ (a run directory per run), comparison.md and comparison.json
(every measure, as upgrade-check's, with istiod as the base) and fidelity.md and fidelity.json
(the table); a DIR that holds either is refused. istiod runs from a build of 'make istiod'.

SIGINT, SIGTERM, SIGHUP and SIGQUIT stop it as they stop upgrade-check: the table shows the runs
made, with no conclusion (exit 2).

Exit code: 0 every timing and count within 2x, 1 one or more beyond (the table names them; a
difference that is istiod's version-specific behaviour is for the reader to judge), 2 bad input,
runs that could not be carried out, or an interruption.`,
		Args: cobra.NoArgs,
		RunE: u.runE(func(cmd *cobra.Command) error { return prepareFidelity(&u, cmd) }),
	}
	u.substrateFlags(cmd)
	u.reuseFlag(cmd)
	cmd.Flags().StringVar(&u.base, "istiod", subject.IstiodPrefix, "istiod as --cp spells it: istiod (the default build) or istiod@PIN")
	cmd.Flags().StringVar(&u.cand, "reference", "reference", "the reference as --cp spells it")
	cmd.Flags().IntVar(&u.repeats, "repeats", 0, "runs per experiment and side (default: the suite's 3)")
	cmd.Flags().StringArrayVar(&u.only, "experiment", nil, "only this experiment of the suite (repeatable; default: all four)")
	cmd.Flags().StringArrayVar(&u.sets, "set", nil, "[EXPERIMENT.]name=value for the suite's experiments (repeatable)")
	cmd.Flags().StringVar(&u.out, "out", "", "the directory to create: istiod/ and reference/ (a run directory per run), comparison.md/.json and fidelity.md/.json (default runs/fidelity-ISTIOD-TIME; one holding a comparison or a table is refused)")
	u.stats.register(cmd)
	return cmd
}

// prepareFidelity checks the two control planes and the output directory, then prepares the
// suite's runs as upgrade-check does.
func prepareFidelity(u *upgradeCheck, cmd *cobra.Command) error {
	if u.base != subject.IstiodPrefix && !strings.HasPrefix(u.base, subject.IstiodPrefix+"@") {
		return Usagef("--istiod %q: want istiod or istiod@PIN (a build of make istiod)", u.base)
	}
	if u.cand != "reference" && !strings.HasPrefix(u.cand, "reference:") {
		return Usagef("--reference %q: want reference or reference:SWITCH", u.cand)
	}
	u.suite = suite.Fidelity
	u.finish = finishFidelity(u)
	if u.out == "" {
		u.out = filepath.Join("runs", fmt.Sprintf("fidelity-%s-%s", dirName(u.base), time.Now().Format("20060102-150405")))
	}
	if err := checkFidelityOut(u.out); err != nil {
		return err
	}
	return u.prepare(cmd)
}

func checkFidelityOut(dir string) error {
	if found := results.FidelityIn(dir); len(found) > 0 {
		return Usagef("--out %s already holds a fidelity table (%s): choose another directory or remove it", dir, strings.Join(found, ", "))
	}
	return nil
}

// finishFidelity writes the comparison and the fidelity table into u.out and prints the table;
// the exit code is the table's.
func finishFidelity(u *upgradeCheck) func(stdout, stderr io.Writer, c *results.Comparison, errored []string) error {
	return func(stdout, stderr io.Writer, c *results.Comparison, errored []string) error {
		f := results.FidelityOf(c)
		if err := f.WriteTable(stdout); err != nil {
			return err
		}
		paths := append(u.made.Paths(), filepath.Join(u.out, results.ComparisonJSONFile), filepath.Join(u.out, results.ComparisonMarkdownFile),
			filepath.Join(u.out, results.FidelityJSONFile), filepath.Join(u.out, results.FidelityMarkdownFile))
		err := checkComparisonOut(u.out, false, "")
		if err == nil {
			err = checkFidelityOut(u.out)
		}
		if err == nil {
			err = u.made.MkdirAll(u.out)
		}
		if err == nil {
			err = results.WriteComparison(u.out, c)
		}
		if err == nil {
			err = results.WriteFidelity(u.out, f)
		}
		handOver(stderr, paths...)
		if err != nil {
			return WithExitCode(2, fmt.Errorf("%w: the outcome was: %s", err, f.Outcome()))
		}
		fmt.Fprintf(stdout, "report: %s\n", filepath.Join(u.out, results.FidelityMarkdownFile))
		switch {
		case !f.Concluded():
			return WithExitCode(2, errors.New(f.Outcome()))
		case len(errored) > 0:
			return WithExitCode(2, fmt.Errorf("%d run(s) could not be carried out (%s): the table rests on fewer runs; re-run", len(errored), errored[0]))
		case len(f.Differs()) > 0:
			return WithExitCode(1, errors.New(f.Outcome()))
		}
		return nil
	}
}
