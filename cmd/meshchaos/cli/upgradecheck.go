package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/results"
)

func init() { register(newUpgradeCheckCmd) }

// upgradeCheck is what `meshchaos upgrade-check` was asked to do.
type upgradeCheck struct {
	job          // substrate and images; Experiment, Sets, CP and Out are set per run
	base, cand   string
	suite        string
	repeats      int
	sets         []string
	out          string
	stats        statsFlags
	startedAt    time.Time
	runs         []upgradeRun
	compareOpts  results.CompareOptions
	suiteEntries int
	// made is what this invocation created: removed again while empty when the plan is
	// refused, handed to the user who ran it through sudo when it ran.
	made results.Created
	// doing is told which run is on its way (nil: nobody asks).
	doing *activity
	// name is the command's name in its messages; labels name the two sides' directories and
	// progress lines (default upgrade-check, base and candidate). finish, when set, replaces the
	// comparison's report and exit code (meshchaos fidelity).
	name   string
	labels [2]string
	finish func(stdout, stderr io.Writer, c *results.Comparison, errored []string) error
	// only keeps the suite's entries of these experiments (fidelity --experiment).
	only []string
}

// onlyExperiments is s with only the entries of the named experiments; a name no entry has is
// refused with the ones it has.
func onlyExperiments(s suite.Suite, names []string) (suite.Suite, error) {
	var have []string
	for _, e := range s.Entries {
		if !slices.Contains(have, e.Experiment) {
			have = append(have, e.Experiment)
		}
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return s, Usagef("--experiment %q: suite %s has %s", n, s.Name, strings.Join(have, ", "))
		}
	}
	s.Entries = slices.DeleteFunc(slices.Clone(s.Entries), func(e suite.Entry) bool { return !slices.Contains(names, e.Experiment) })
	return s, nil
}

// sideLabel is the label of side "base" or "candidate".
func (u *upgradeCheck) sideLabel(side string) string {
	if side == "base" {
		return u.label(0)
	}
	return u.label(1)
}

// label names side k (0 the base, 1 the candidate).
func (u *upgradeCheck) label(k int) string {
	if u.labels[k] != "" {
		return u.labels[k]
	}
	return [2]string{"base", "candidate"}[k]
}

// command is the command's name in its messages.
func (u *upgradeCheck) command() string {
	if u.name != "" {
		return u.name
	}
	return "upgrade-check"
}

// upgradeRun is one run of the plan: an entry's repeat on one side.
type upgradeRun struct {
	entry, repeat, repeats int
	side                   string // "base" or "candidate" (u.label names it)
	p                      *prepared
}

func newUpgradeCheckCmd() *cobra.Command {
	var u upgradeCheck
	cmd := &cobra.Command{
		Use:   "upgrade-check --base CP_A --candidate CP_B [--suite pre-upgrade] [--repeats N] [--out DIR] [--set [EXPERIMENT.]k=v]…",
		Short: "Run a suite against two control planes, alternating, and report every measure's regression with statistics (exit 1 on a regression)",
		Long: `Does control plane B behave as well as A? For every entry of the suite (default: the built-in
pre-upgrade suite; or a suite YAML file) upgrade-check runs the experiment against the base and the
candidate alternately — A B A B … — so that machine noise spreads over both, then compares the
two sets of runs measure by measure as 'meshchaos compare' does: both distributions, the
difference of the medians with a bootstrap confidence interval, a one-sided Mann-Whitney U test,
and a verdict (regression / improvement / no evidence) that takes each measure's direction and
minimum practical effect. A check that passes in the base and fails in the candidate is a
regression too.

DIR gets base/ and candidate/ (one run directory per run; 'meshchaos compare DIR/base
DIR/candidate' redoes the comparison) and comparison.md and comparison.json; a DIR that holds a
comparison already is refused.

--repeats overrides every entry's repeats; the test can only reach α = 0.05 from 3 runs a side.
--set name=value applies to every entry whose experiment has that parameter, --set
EXPERIMENT.name=value to that experiment's entries only; it wins over the suite's own values.

SIGINT, SIGTERM, SIGHUP and SIGQUIT stop it: the run in progress records the signal (verdict
error) and tears its cluster down, no further run starts, and comparison.md and comparison.json
compare the runs made for information only, saying which signal came during which run and that
there is no verdict (exit 2, whatever those runs show). A second signal says which run is still
being torn down.

Exit code: 0 no regression, 1 a regression, 2 bad input, runs that could not be carried out
(the report lists them), or an interruption.`,
		Args: cobra.NoArgs,
		RunE: u.runE(u.prepare),
	}
	u.substrateFlags(cmd)
	u.reuseFlag(cmd)
	cmd.Flags().StringVar(&u.base, "base", "", "the control plane today, as --cp spells it (e.g. reference)")
	cmd.Flags().StringVar(&u.cand, "candidate", "", "the control plane to upgrade to, as --cp spells it (e.g. reference:ungated)")
	cmd.Flags().StringVar(&u.suite, "suite", "pre-upgrade", "a built-in suite's name or a suite YAML file")
	cmd.Flags().IntVar(&u.repeats, "repeats", 0, "runs per entry and side (default: the suite's)")
	cmd.Flags().StringArrayVar(&u.sets, "set", nil, "[EXPERIMENT.]name=value for the suite's experiments (repeatable)")
	cmd.Flags().StringVar(&u.out, "out", "", "the upgrade check's directory to create: base/ and candidate/ (a run directory per run), comparison.md and comparison.json (default runs/upgrade-check-BASE-vs-CANDIDATE-TIME; one holding a comparison is refused)")
	u.stats.register(cmd)
	return cmd
}

// runE is the command's body: prepare (u.prepare, or a command's own that ends in it), then
// execute the plan under the signal handling.
func (u *upgradeCheck) runE(prepare func(*cobra.Command) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := prepare(cmd); err != nil {
			// Refused: the run directories planned before the refusal go again.
			u.made.RemoveEmpty()
			return err
		}
		u.doing = newActivity(u.command())
		ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr(), u.doing)
		defer stop()
		return u.execute(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
}

// prepare checks every input and prepares every run before anything starts: bad input costs a
// fraction of a second, not a half-finished suite.
func (u *upgradeCheck) prepare(cmd *cobra.Command) error {
	if u.base == "" || u.cand == "" {
		return Usagef("give both --base and --candidate (control planes as --cp spells them, e.g. --base reference --candidate reference:ungated)")
	}
	if u.repeats < 0 || u.repeats > 100 {
		return Usagef("--repeats %d: want 1–100 (or 0 for the suite's own)", u.repeats)
	}
	if err := u.checkSubstrate(); err != nil {
		return err
	}
	var err error
	if u.compareOpts, err = u.stats.options(cmd); err != nil {
		return err
	}
	s, err := suite.Load(u.suite)
	if err != nil {
		return Usagef("%v", err)
	}
	if len(u.only) > 0 {
		if s, err = onlyExperiments(s, u.only); err != nil {
			return err
		}
	}
	u.suite, u.suiteEntries = s.Name, len(s.Entries)
	if u.out == "" {
		u.out = filepath.Join("runs", fmt.Sprintf("upgrade-check-%s-vs-%s-%s", dirName(u.base), dirName(u.cand), time.Now().Format("20060102-150405")))
	}
	if err := checkComparisonOut(u.out, false, ""); err != nil {
		return err
	}
	for i, e := range s.Entries {
		if e.ControlPlane != "" {
			return Usagef("suite %s entry %d (%s) names control plane %q: upgrade-check runs every entry against --base and --candidate; leave controlPlane empty", s.Name, i+1, e.Experiment, e.ControlPlane)
		}
	}
	entries, err := resolveEntries(s, u.sets, "")
	if err != nil {
		return err
	}
	// Both control planes too, so that no substrate check hides them.
	// A side's label is its flag: --base and --candidate, fidelity's --istiod and --reference.
	for k, cp := range []string{u.base, u.cand} {
		if _, err := subject.Parse(cp); err != nil {
			return Usagef("--%s: %v", u.label(k), err)
		}
	}
	if u.pool, err = u.newPool(u.base, u.cand); err != nil {
		return err
	}
	for i, e := range entries {
		n := max(e.Repeats, 1)
		if u.repeats > 0 {
			n = u.repeats
		}
		for r := 1; r <= n; r++ {
			for k, cp := range []string{u.base, u.cand} {
				side := [2]string{"base", "candidate"}[k]
				j := u.job
				j.Experiment, j.Sets, j.CP = e.Experiment, e.Sets, cp
				j.pool, j.poolRun = u.pool, len(u.runs)+1
				if j.Out, err = runDirIn(filepath.Join(u.out, u.label(k)), fmt.Sprintf("%02d-%s-r%d", i+1, e.Experiment, r)); err != nil {
					return Usagef("suite %s entry %d (%s, %s %s): %v", s.Name, i+1, e.Experiment, u.label(k), j.CP, err)
				}
				p, err := j.prepare(&u.made)
				if err != nil {
					return fmt.Errorf("suite %s entry %d (%s, %s %s): %w", s.Name, i+1, e.Experiment, u.label(k), j.CP, err)
				}
				u.runs = append(u.runs, upgradeRun{entry: i + 1, repeat: r, repeats: n, side: side, p: p})
			}
		}
	}
	if u.pool != nil {
		var ps []*prepared
		for _, r := range u.runs {
			ps = append(ps, r.p)
		}
		planPool(u.pool, ps)
	}
	return nil
}

func dirName(cp string) string { return strings.NewReplacer(":", "-", ",", "+", "/", "-").Replace(cp) }

// execute runs the plan in order (A B A B … per entry), with progress and an ETA, then compares
// and writes the report. When ctx ends before the last run has, no further run starts and the
// comparison of the runs made says it was interrupted: exit 2, never a verdict (exit 0 or 1).
func (u *upgradeCheck) execute(ctx context.Context, stdout, stderr io.Writer) error {
	u.startedAt = time.Now()
	defer closePool(ctx, u.pool, stderr)
	// The comparison's files are handed over by finishComparison.
	defer func() {
		paths := u.made.Paths()
		for _, r := range u.runs {
			paths = append(paths, r.p.Dir)
		}
		handOver(stderr, paths...)
	}()
	fmt.Fprintf(stderr, "%s: suite %s (%d entries), %d runs, %s %s, %s %s, into %s\n", u.command(), u.suite, u.suiteEntries, len(u.runs), u.label(0), u.base, u.label(1), u.cand, u.out)
	var base, cand []results.Run
	var errored []string
	var spent time.Duration
	var interrupted *results.SuiteInterruption
	made := 0
	for k, r := range u.runs {
		if ctx.Err() != nil {
			// The signal came between two runs (the run before it had recorded its verdict).
			interrupted = suiteInterruption(ctx, k+1, len(u.runs))
			interrupted.BetweenRuns = true
			break
		}
		eta := "unknown until the first run ends"
		if k > 0 {
			eta = (spent / time.Duration(k) * time.Duration(len(u.runs)-k)).Round(time.Second).String()
		}
		fmt.Fprintf(stderr, "\n[%d/%d] entry %d %s, %s %s, repeat %d/%d — elapsed %s, ETA %s\n", k+1, len(u.runs), r.entry, r.p.Experiment,
			u.sideLabel(r.side), r.p.CP, r.repeat, r.repeats, time.Since(u.startedAt).Round(time.Second), eta)
		u.doing.set(fmt.Sprintf("%s run %d/%d (entry %d %s, %s %s)", u.command(), k+1, len(u.runs), r.entry, r.p.Experiment, u.sideLabel(r.side), r.p.CP))
		start := time.Now()
		s, err := r.p.execute(ctx, runner.NewProgress(stderr))
		spent += time.Since(start)
		made++
		if cutShort(ctx, s) {
			interrupted = suiteInterruption(ctx, k+1, len(u.runs))
			if s.Interrupted != nil {
				interrupted.Phase = s.Interrupted.Phase
			}
		}
		if s.Verdict == "" {
			// Nothing could be written: keep the run as errored so the comparison shows it.
			s = results.Summary{Experiment: r.p.Experiment, ControlPlane: r.p.CP, Verdict: results.VerdictError, Error: fmt.Sprint(err)}
		}
		if s.Verdict == results.VerdictError && s.Error == "" && err != nil {
			s.Error = err.Error()
		}
		if err != nil && s.Verdict != results.VerdictError {
			// The run's final summary or reports could not be written (the error says the
			// verdict): its directory does not hold that verdict, and 'meshchaos compare' on it
			// would not find it. It counts as a run that could not be carried out.
			s.Verdict, s.Error = results.VerdictError, err.Error()
		}
		fmt.Fprintf(stderr, "[%d/%d] %s %s: %s in %s\n", k+1, len(u.runs), r.p.Experiment, r.p.CP, s.Verdict, time.Since(start).Round(time.Second))
		if s.Verdict == results.VerdictError {
			errored = append(errored, fmt.Sprintf("%s (%s): %s", r.p.Dir, u.sideLabel(r.side), s.Error))
		}
		run := results.Run{Dir: r.p.Dir, Summary: &s}
		if r.side == "base" {
			base = append(base, run)
		} else {
			cand = append(cand, run)
		}
		if interrupted != nil {
			break
		}
	}
	if interrupted == nil && ctx.Err() != nil {
		fmt.Fprintf(stderr, "%s: %v after its last run had given its verdict: nothing was cut short, the comparison stands\n", u.command(), context.Cause(ctx))
	}
	if interrupted != nil {
		fmt.Fprintf(stderr, "%s: %s: no verdict; %d of %d runs not made\n", u.command(), interrupted, len(u.runs)-made, len(u.runs))
		// The runs not made are listed as errored, so that the report shows every group the
		// plan had, and what each side lacks.
		for _, r := range u.runs[made:] {
			s := results.Summary{Experiment: r.p.Experiment, ControlPlane: r.p.CP, Params: r.p.exp.Params,
				Verdict: results.VerdictError, Error: "not run: the " + u.command() + " was " + interrupted.String()}
			run := results.Run{Dir: r.p.Dir, Summary: &s}
			if r.side == "base" {
				base = append(base, run)
			} else {
				cand = append(cand, run)
			}
		}
	}
	if len(base) == 0 || len(cand) == 0 {
		return WithExitCode(2, fmt.Errorf("no comparison: %s", strings.Join(errored, "; ")))
	}
	c, err := results.Compare(base, cand, u.compareOpts)
	if err != nil {
		return WithExitCode(2, err)
	}
	finished := time.Now()
	c.Base, c.Candidate, c.Suite, c.StartedAt, c.FinishedAt = u.base, u.cand, u.suite, &u.startedAt, &finished
	c.Interrupted = interrupted
	fmt.Fprintln(stdout)
	if u.finish != nil {
		return u.finish(stdout, stderr, c, errored)
	}
	err = finishComparison(stdout, stderr, outputText, &u.made, c, u.out, false)
	if err == nil && len(errored) > 0 {
		err = WithExitCode(2, fmt.Errorf("no regression among the runs made, but %d could not be carried out (%s): the comparison rests on fewer runs; re-run", len(errored), errored[0]))
	}
	return err
}
