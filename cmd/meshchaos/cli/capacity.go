package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/results/capacity"
)

func init() { register(newCapacityCmd) }

// capacityExperiment is the experiment the capacity curve is made of.
const capacityExperiment = "serviceentry-scale"

// capacityRun is one run of the plan: a control plane at a fleet size.
type capacityRun struct {
	cp      string
	proxies int
	p       *prepared
}

// capacityCmd is what `meshchaos capacity` was asked to do.
type capacityCmd struct {
	job
	cps     []string
	proxies string
	steps   string
	budget  string
	sets    []string
	out     string
	fleets  []int
	bytes   int64
	runs    []capacityRun
	made    results.Created
}

func newCapacityCmd() *cobra.Command {
	var c capacityCmd
	cmd := &cobra.Command{
		Use:   "capacity [--cp CP]… [--proxies N,N…] [--steps N,N…] [--memory-budget Q] [--out DIR] [--set k=v]…",
		Short: "A control plane's capacity curve: serviceentry-scale at several fleet sizes, heap and RSS fitted per endpoint and per proxy, push time, convergence, and what a memory budget holds",
		Long: `How much memory does a control plane need for E endpoints and P proxies, and how slow does
it get? capacity runs serviceentry-scale for every --cp at every fleet size of --proxies (an
adsload fleet of that many ADS clients, each watching the whole mesh, connected through the
steps), all control planes at the smallest fleet first, then the next, so that a run cut short
still leaves every control plane's smaller fleets measured.

DIR gets one run directory per run (DIR/CP/proxies-N) and capacity.md and capacity.json: per
control plane, heap (live, after forced GCs) and RSS (the container's) fitted as
a + b·endpoints + c·proxies, and with a term d·endpoints·proxies (each proxy's cost per
endpoint), by least squares over every measured state of every run (each run's baseline and
steps) with the fit's R² and the range it was fitted on; per fleet size and step,
push time P99 (the control plane's own full-push histogram), the oracle client's and the
fleet's convergence; and, for --memory-budget, how many endpoints fit at each fleet size by
each RSS fit (marked extrapolated outside the fitted range). A run that measured nothing is
listed as such, never fitted as zeros. 'meshchaos capacity report DIR' rebuilds the report
from the run directories.

The runs' verdicts are serviceentry-scale's own (its heap-per-endpoint bound is the
reference's: istiod exceeds it, which does not make its figures wrong).

Exit code: 0 every run measured, 2 bad input, a run that measured nothing, or an interruption
(the report then holds the runs made).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.prepare(); err != nil {
				c.made.RemoveEmpty()
				return err
			}
			doing := newActivity("capacity")
			ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr(), doing)
			defer stop()
			return c.execute(ctx, doing, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	c.substrateFlags(cmd)
	cmd.Flags().StringArrayVar(&c.cps, "cp", nil, "a control plane as 'run --cp' spells it (repeatable; default reference)")
	cmd.Flags().StringVar(&c.proxies, "proxies", "100,1000", "fleet sizes: ADS clients connected through the steps")
	cmd.Flags().StringVar(&c.steps, "steps", "", "ServiceEntries after each step (default: serviceentry-scale's)")
	cmd.Flags().StringVar(&c.budget, "memory-budget", "4Gi", "the RSS budget to project capacity for (default: serviceentry-scale's cpMemoryLimit)")
	cmd.Flags().StringArrayVar(&c.sets, "set", nil, "name=value for serviceentry-scale (repeatable; not proxies or steps: use the flags)")
	cmd.Flags().StringVar(&c.out, "out", "", "the directory to create: a run directory per run and capacity.md/.json (default runs/capacity-TIME; one holding a report is refused)")
	cmd.AddCommand(newCapacityReportCmd())
	return cmd
}

// parseInts parses a comma-separated list of integers in [lo, hi].
func parseInts(flag, s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, Usagef("--%s %q: want comma-separated integers from %d to %d", flag, s, lo, hi)
		}
		if slices.Contains(out, n) {
			return nil, Usagef("--%s %q: %d twice", flag, s, n)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseBudget(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Value() <= 0 {
		return 0, Usagef("--memory-budget %q: want a positive quantity such as 4Gi", s)
	}
	return q.Value(), nil
}

func checkCapacityOut(dir string) error {
	if found := capacity.In(dir); len(found) > 0 {
		return Usagef("--out %s already holds a capacity report (%s): choose another directory or remove it", dir, strings.Join(found, ", "))
	}
	return nil
}

// prepare checks every input and prepares every run before anything starts.
func (c *capacityCmd) prepare() error {
	if len(c.cps) == 0 {
		c.cps = []string{"reference"}
	}
	for _, cp := range c.cps {
		if _, err := subject.Parse(cp); err != nil {
			return Usagef("--cp: %v", err)
		}
	}
	var err error
	if c.fleets, err = parseInts("proxies", c.proxies, 1, 10000); err != nil {
		return err
	}
	slices.Sort(c.fleets)
	if c.bytes, err = parseBudget(c.budget); err != nil {
		return err
	}
	for _, s := range c.sets {
		if name, _, _ := strings.Cut(s, "="); name == "proxies" || name == "steps" {
			return Usagef("--set %s: use --%s", s, name)
		}
	}
	if err := c.checkSubstrate(); err != nil {
		return err
	}
	if c.out == "" {
		c.out = filepath.Join("runs", "capacity-"+time.Now().Format("20060102-150405"))
	}
	if err := checkCapacityOut(c.out); err != nil {
		return err
	}
	for _, n := range c.fleets {
		for _, cp := range c.cps {
			j := c.job
			j.Experiment, j.CP = capacityExperiment, cp
			j.Sets = append(slices.Clone(c.sets), fmt.Sprintf("proxies=%d", n))
			if c.steps != "" {
				j.Sets = append(j.Sets, "steps="+c.steps)
			}
			if j.Out, err = runDirIn(filepath.Join(c.out, dirName(cp)), fmt.Sprintf("proxies-%d", n)); err != nil {
				return Usagef("%s at %d proxies: %v", cp, n, err)
			}
			p, err := j.prepare(&c.made)
			if err != nil {
				return fmt.Errorf("%s at %d proxies: %w", cp, n, err)
			}
			c.runs = append(c.runs, capacityRun{cp: cp, proxies: n, p: p})
		}
	}
	return nil
}

// execute runs the plan in order, then builds and writes the report from the runs made.
func (c *capacityCmd) execute(ctx context.Context, doing *activity, stdout, stderr io.Writer) error {
	started := time.Now()
	load0 := loadAverage()
	defer func() {
		paths := c.made.Paths()
		for _, r := range c.runs {
			paths = append(paths, r.p.Dir)
		}
		handOver(stderr, paths...)
	}()
	fmt.Fprintf(stderr, "capacity: %d runs (%s at %v proxies), into %s\n", len(c.runs), strings.Join(c.cps, ", "), c.fleets, c.out)
	var runs []capacity.Run
	var failed []string
	interrupted := ""
	for k, r := range c.runs {
		if ctx.Err() != nil {
			interrupted = fmt.Sprintf("interrupted (%v) before run %d of %d", context.Cause(ctx), k+1, len(c.runs))
			break
		}
		fmt.Fprintf(stderr, "\n[%d/%d] %s at %d proxies — elapsed %s\n", k+1, len(c.runs), r.cp, r.proxies, time.Since(started).Round(time.Second))
		doing.set(fmt.Sprintf("capacity run %d/%d (%s at %d proxies)", k+1, len(c.runs), r.cp, r.proxies))
		t0 := time.Now()
		s, err := r.p.execute(ctx, runner.NewProgress(stderr))
		fmt.Fprintf(stderr, "[%d/%d] %s at %d proxies: %s in %s\n", k+1, len(c.runs), r.cp, r.proxies, s.Verdict, time.Since(t0).Round(time.Second))
		if s.Verdict == "" {
			failed = append(failed, fmt.Sprintf("%s: %v", r.p.Dir, err))
			runs = append(runs, capacity.Run{ControlPlane: r.cp, Dir: r.p.Dir})
		} else {
			runs = append(runs, capacity.Run{ControlPlane: r.cp, Dir: r.p.Dir, Summary: &s})
		}
		if cutShort(ctx, s) {
			interrupted = fmt.Sprintf("interrupted (%v) during run %d of %d", context.Cause(ctx), k+1, len(c.runs))
			break
		}
	}
	rep := capacity.Build(runs, c.bytes, c.fleets)
	finished := time.Now()
	rep.StartedAt, rep.FinishedAt = &started, &finished
	rep.Notes = append(rep.Notes, fmt.Sprintf("%d CPUs; load average %s at the start, %s at the end", runtime.NumCPU(), load0, loadAverage()))
	if interrupted != "" {
		rep.Notes = append(rep.Notes, "**"+interrupted+"**: the report holds the runs made")
	}
	return c.finish(stdout, stderr, rep, failed, interrupted)
}

func (c *capacityCmd) finish(stdout, stderr io.Writer, rep *capacity.Report, failed []string, interrupted string) error {
	if err := c.made.MkdirAll(c.out); err != nil {
		return WithExitCode(2, err)
	}
	if err := capacity.Write(c.out, rep); err != nil {
		return WithExitCode(2, err)
	}
	handOver(stderr, filepath.Join(c.out, capacity.JSONFile), filepath.Join(c.out, capacity.MarkdownFile))
	if err := rep.WriteMarkdown(stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nreport: %s\n", filepath.Join(c.out, capacity.MarkdownFile))
	return capacityExit(rep, failed, interrupted)
}

// capacityExit is 0 when every run gave figures, 2 otherwise.
func capacityExit(rep *capacity.Report, failed []string, interrupted string) error {
	if interrupted != "" {
		return WithExitCode(2, errors.New(interrupted))
	}
	if len(failed) > 0 {
		return WithExitCode(2, fmt.Errorf("%d run(s) could not be carried out (%s)", len(failed), failed[0]))
	}
	for _, cp := range rep.ControlPlanes {
		if len(cp.Errors) > 0 {
			return WithExitCode(2, fmt.Errorf("%s: %s", cp.Name, cp.Errors[0]))
		}
	}
	return nil
}

// loadAverage is /proc/loadavg's three averages ("unknown" where there is none).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func newCapacityReportCmd() *cobra.Command {
	var out, budget, proxies string
	cmd := &cobra.Command{
		Use:   "report DIR… [--out DIR] [--memory-budget Q] [--proxies N,N…]",
		Short: "Rebuild capacity.md and capacity.json from serviceentry-scale run directories",
		Long: `DIR is a capacity directory, a run directory or any directory below which run directories lie:
every serviceentry-scale run found (a summary.json) is grouped by its control plane and fleet
size (its proxies parameter) and fitted as 'meshchaos capacity' does. The report goes to --out
(default: the first DIR); an existing report there is replaced.

Exit code: 0 every run found gave figures, 2 bad input or a run without figures.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := parseBudget(budget)
			if err != nil {
				return err
			}
			var fleets []int
			if proxies != "" {
				if fleets, err = parseInts("proxies", proxies, 0, 10000); err != nil {
					return err
				}
				slices.Sort(fleets)
			}
			runs, err := findCapacityRuns(args)
			if err != nil {
				return err
			}
			if out == "" {
				out = args[0]
			}
			rep := capacity.Build(runs, b, fleets)
			c := capacityCmd{out: out}
			return c.finish(cmd.OutOrStdout(), cmd.ErrOrStderr(), rep, nil, "")
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "where to write capacity.md and capacity.json (default: the first DIR)")
	cmd.Flags().StringVar(&budget, "memory-budget", "4Gi", "the RSS budget to project capacity for")
	cmd.Flags().StringVar(&proxies, "proxies", "", "fleet sizes to project for (default: the runs')")
	return cmd
}

// findCapacityRuns finds the serviceentry-scale run directories below dirs, in path order.
func findCapacityRuns(dirs []string) ([]capacity.Run, error) {
	var runs []capacity.Run
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() || e.Name() != results.SummaryFile {
				return nil
			}
			dir := filepath.Dir(path)
			s, err := results.Read(dir)
			if err != nil {
				return err
			}
			if s.Experiment == capacityExperiment {
				runs = append(runs, capacity.Run{ControlPlane: s.ControlPlane, Dir: dir, Summary: s})
			}
			return nil
		})
		if err != nil {
			return nil, Usagef("%v", err)
		}
	}
	if len(runs) == 0 {
		return nil, Usagef("no %s run below %s", capacityExperiment, strings.Join(dirs, ", "))
	}
	return runs, nil
}
