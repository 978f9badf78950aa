package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/harness/cluster/reuse"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/internal/version"
	"github.com/meshchaos/meshchaos/results"
)

func init() { register(newSuiteCmd) }

// suiteOpts are the suite command's inputs besides the shared job flags.
type suiteOpts struct {
	Out     string
	History string
	Nights  int
	Sets    []string
	// Output is -o: text or json.
	Output string
	// Shard is --shard I/N as given ("": the whole suite).
	Shard string
}

func newSuiteCmd() *cobra.Command {
	var (
		j job
		o suiteOpts
	)
	cmd := &cobra.Command{
		Use:   "suite NAME|FILE [--shard I/N] [--out DIR] [--history DIR] [--set k=v]… [--substrate local] [-o text|json]",
		Short: "Run a suite of experiments one after another: combined junit.xml and index.html (exit 0 every run gave its expected verdict, 1 not, 2 bad input, interrupted, or results that could not be written)",
		Long: `Run a suite: experiments × control planes × parameters × repeats, one run after another on this
machine, each with the verdict it is expected to give. NAME is a built-in suite (see below) or FILE a
YAML file:

  name: mine
  entries:
  - experiment: cp-oom-restart
    controlPlane: reference:ungated   # default: --cp
    set: [rate=50, duration=40s]
    repeats: 2
    expect: fail                      # default: pass
    failing: [error rate, error window]  # the checks a fail must fail, and no other;
                                         # "NAME?" may fail or pass (default: any failed check)

Every entry is checked before the first run starts. The output directory holds each run's
directory, a combined junit.xml, suite.json and index.html. With --history DIR the suite's result
is appended to DIR/NAME.jsonl and index.html shows each main measure's trend over the last
--nights executions, flagging a change beyond the noise seen so far. With -o json, stdout holds
the suite's result as one JSON document (what suite.json holds) instead of the table.

With --shard I/N this machine makes share I of N of the suite's runs (dealt round-robin in the
suite's order: the same split on every machine, every run in exactly one share); suite.json
records the share, and 'meshchaos suite merge' combines the N shards' directories into the
result the whole suite gives (and appends it to --history, which a shard refuses).

SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the suite: the run in progress records the signal
(verdict error) and tears its cluster down, no further run starts, suite.json, junit.xml and
index.html say which signal came during which run, the execution is not appended to --history
(a partial night would distort the trends), and the exit code is 2: no verdict. A second signal
says which run is still being torn down.

` + suitesText(),
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			if len(args) != 1 {
				printSuites(cmd.ErrOrStderr())
				return Usagef("give one suite: a built-in name or a YAML file")
			}
			s, err := suite.Load(args[0])
			if err != nil {
				printSuites(cmd.ErrOrStderr())
				return Usagef("%v", err)
			}
			doing := newActivity("suite " + s.Name)
			ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr(), doing)
			defer stop()
			return runSuite(ctx, s, j, o, doing, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	j.flags(cmd)
	j.reuseFlag(cmd)
	cmd.Flags().StringVar(&o.Out, "out", "", "the suite's directory to create: a run directory per run, suite.json, junit.xml, index.html (default runs/suite-NAME-TIME)")
	cmd.Flags().StringVar(&o.History, "history", "", "history directory: append this execution and show trends across nights")
	cmd.Flags().StringVar(&o.Shard, "shard", "", "run share I of N of the suite's runs (1/3, 2/3, 3/3 on three machines; then 'suite merge')")
	cmd.Flags().IntVar(&o.Nights, "nights", 30, "how many executions of the history the trends show")
	outputFlag(cmd, &o.Output)
	cmd.AddCommand(newSuiteMergeCmd())
	cmd.Flags().StringArrayVar(&o.Sets, "set", nil, "[EXPERIMENT.]name=value for every entry whose experiment has the parameter (after the entry's own; EXPERIMENT. limits it to that experiment's entries)")
	return cmd
}

func printSuites(w io.Writer) { fmt.Fprint(w, suitesText()) }

// suitesText lists the built-in suites, a line each: name, runs, what it is for.
func suitesText() string {
	var b strings.Builder
	b.WriteString("built-in suites:\n")
	for _, s := range suite.Builtins() {
		fmt.Fprintf(&b, "  %-12s %d runs  %s\n", s.Name, s.Runs(), s.Summary)
	}
	return b.String()
}

// plannedRun is one run of a suite, prepared (every input checked, its directory claimed).
type plannedRun struct {
	entry, repeat, repeats int
	expect                 results.Expect
	set                    []string
	p                      *prepared
}

// planSuite checks every entry and prepares every run of the shard sh (the whole suite when it is
// the zero Shard) before anything starts, recording in made the directories it creates; on bad
// input it returns an exit-2 error naming the entry. Every run is checked, the shard's or not, so
// that every shard of a bad suite refuses it alike. It returns the shard's record (nil unsharded).
func planSuite(made *results.Created, s suite.Suite, j job, o suiteOpts, out string, sh suite.Shard) ([]plannedRun, *results.SuiteShard, error) {
	entries, err := resolveEntries(s, o.Sets, j.CP)
	if err != nil {
		return nil, nil, err
	}
	var runs []plannedRun
	var plan []results.SuiteRun
	for i, e := range entries {
		sets, cp := e.Sets, e.CP
		expect := e.Expectation()
		n := max(e.Repeats, 1)
		for r := 1; r <= n; r++ {
			rj := j
			rj.Experiment, rj.Sets, rj.CP = e.Experiment, sets, cp
			rj.poolRun = len(plan) + 1
			if rj.Out, err = runDirIn(out, suiteRunName(i, e.Experiment, cp, r, n)); err != nil {
				return nil, nil, Usagef("suite %s entry %d (%s, %s): %v", s.Name, i+1, e.Experiment, cp, err)
			}
			mine := sh.Has(len(plan))
			plan = append(plan, results.SuiteRun{Entry: i, Repeat: r, Experiment: e.Experiment, ControlPlane: cp, Set: sets,
				Expect: expect.Verdict, ExpectFailing: expect.Failing})
			var p *prepared
			if mine {
				p, err = rj.prepare(made)
			} else {
				_, err = rj.check() // another machine's run: checked, its directory not claimed
			}
			if err != nil {
				var ec ExitCoder
				if errors.As(err, &ec) && ec.ExitCode() == 2 {
					return nil, nil, Usagef("suite %s entry %d (%s, %s): %v", s.Name, i+1, e.Experiment, cp, err)
				}
				return nil, nil, err
			}
			if mine {
				runs = append(runs, plannedRun{entry: i, repeat: r, repeats: n, expect: expect, set: sets, p: p})
			}
		}
	}
	return runs, sh.Record(plan), nil
}

// suiteRunName names the run directory of entry i's repeat r of n: the entry's number, its
// experiment and its control plane (with no path separator: external:../../FILE stays one name).
func suiteRunName(i int, experiment, cp string, r, n int) string {
	name := fmt.Sprintf("%02d-%s-%s", i+1, experiment, dirName(cp))
	if n > 1 {
		name += fmt.Sprintf("-r%d", r)
	}
	return name
}

// runDirIn is the run directory called name directly inside out; a name that would land
// elsewhere, or be out itself, is refused.
func runDirIn(out, name string) (string, error) {
	dir := filepath.Join(out, name)
	rel, err := filepath.Rel(out, dir)
	if err != nil || rel != name || rel == "." || !filepath.IsLocal(rel) || strings.ContainsRune(rel, filepath.Separator) {
		return "", fmt.Errorf("run directory %q would not be a directory of its own inside %s: rename the entry's experiment or control plane", name, out)
	}
	return dir, nil
}

// claimSuiteDir creates the suite's output directory, recording in made what it creates; one
// that already holds a suite is refused (its evidence would be overwritten).
func claimSuiteDir(made *results.Created, out, name string) (string, error) {
	if out == "" {
		out = filepath.Join("runs", fmt.Sprintf("suite-%s-%s", filepath.Base(name), time.Now().Format("20060102-150405")))
	}
	if _, err := os.Stat(filepath.Join(out, results.SuiteFile)); err == nil {
		return "", Usagef("--out %s already holds a suite (%s): choose another directory or remove it", out, results.SuiteFile)
	}
	if err := made.MkdirAll(out); err != nil {
		return "", WithExitCode(2, fmt.Errorf("create suite directory: %w", err))
	}
	return out, nil
}

// runSuite checks the suite's options, plans its runs and executes them; doing is told which run
// is on its way.
func runSuite(ctx context.Context, s suite.Suite, j job, o suiteOpts, doing *activity, stdout, stderr io.Writer) error {
	if o.Nights < 2 {
		return Usagef("--nights %d: at least 2 (a trend needs two nights)", o.Nights)
	}
	var sh suite.Shard
	if o.Shard != "" {
		var err error
		if sh, err = suite.ParseShard(o.Shard); err != nil {
			return Usagef("--shard: %v", err)
		}
		if o.History != "" {
			// A shard is part of a night: the merge appends the whole night once.
			return Usagef("--history with --shard: a shard is not a night of the trends; give --history to 'meshchaos suite merge', which appends the merged result once")
		}
	}
	if err := j.checkSubstrate(); err != nil {
		return err
	}
	past, err := readPast(o, s.Name, stderr)
	if err != nil {
		return err
	}
	x := &suiteExec{suite: s, substrate: j.Substrate, opts: o, past: past, doing: doing}
	if j.pool, err = j.newPool(suiteCPs(s, j.CP)...); err != nil {
		return err
	}
	x.pool = j.pool
	if x.out, err = claimSuiteDir(&x.made, o.Out, suiteDirName(s.Name, sh)); err == nil {
		x.runs, x.shard, err = planSuite(&x.made, s, j, o, x.out, sh)
	}
	if err == nil && x.pool != nil {
		var ps []*prepared
		for _, r := range x.runs {
			ps = append(ps, r.p)
		}
		planPool(x.pool, ps)
	}
	if err != nil {
		// Nothing ran: the directories this refusal made go again (only those, and only empty).
		x.made.RemoveEmpty()
		return err
	}
	return x.execute(ctx, stdout, stderr)
}

// suiteExec is a suite whose runs are planned (every input checked, every run directory
// claimed), on its way.
type suiteExec struct {
	suite     suite.Suite
	substrate string
	opts      suiteOpts
	out       string
	runs      []plannedRun
	// past is the history before this execution (oldest first).
	past []results.SuiteResult
	// made is what this invocation created: handed to the user who ran it through sudo.
	made results.Created
	// doing is told which run is on its way (nil: nobody asks).
	doing *activity
	// shard is the share of the suite's runs this execution makes (nil: all of them).
	shard *results.SuiteShard
	// pool is the cluster the runs share (nil: a cluster per run).
	pool *reuse.Pool
}

// handOver gives everything the suite wrote to the user who ran it through sudo: what it created
// (its directory, run directories, history) and the suite's own files, in an --out that may have
// been there before.
func (x *suiteExec) handOver(stderr io.Writer) {
	paths := x.made.Paths()
	for _, r := range x.runs {
		paths = append(paths, r.p.Dir)
	}
	for _, f := range []string{results.JUnitFile, results.SuiteFile, results.SuiteIndexFile} {
		paths = append(paths, filepath.Join(x.out, f))
	}
	handOver(stderr, paths...)
}

// readPast is the history before this execution, oldest first (none without --history).
func readPast(o suiteOpts, name string, stderr io.Writer) ([]results.SuiteResult, error) {
	if o.History == "" {
		return nil, nil
	}
	past, err := results.ReadHistory(o.History, name, o.Nights-1, stderr)
	if err != nil {
		return nil, Usagef("%v", err)
	}
	return past, nil
}

// suiteDirName names the default output directory's suite: with its share, so that two shards
// run on one machine do not collide.
func suiteDirName(name string, sh suite.Shard) string {
	if !sh.Sharded() {
		return name
	}
	return fmt.Sprintf("%s-shard%dof%d", name, sh.Index, sh.Count)
}

// execute makes the suite's runs one after another and writes its output (and history line).
// Exit code: 0 every run gave its expected verdict, 1 not, 2 when ctx ended before the last run
// did (an interrupted suite gives no verdict: the runs it cut short or never started would
// count as failures) or when a run's or the suite's results could not be written (a verdict
// nobody can read back is no verdict).
func (x *suiteExec) execute(ctx context.Context, stdout, stderr io.Writer) error {
	s, out, runs := x.suite, x.out, x.runs
	defer x.handOver(stderr)
	defer closePool(ctx, x.pool, stderr)
	build := version.Get()
	res := &results.SuiteResult{Schema: results.SuiteSchema, Suite: s.Name, Summary: s.Summary,
		Substrate: x.substrate, StartedAt: time.Now().UTC(), Planned: len(runs),
		HarnessVersion: build.Version, HarnessCommit: build.Revision, Shard: x.shard}
	eta := newSuiteETA(x.past)
	// unsaved are the runs whose verdict their run directory does not hold.
	var unsaved []string
	if x.shard != nil {
		fmt.Fprintf(stderr, "suite %s: shard %s: %d of the suite's %d runs into %s\n", s.Name, x.shard, len(runs), x.shard.Of, out)
	} else {
		fmt.Fprintf(stderr, "suite %s: %d runs into %s\n", s.Name, len(runs), out)
	}
	for i, r := range runs {
		if ctx.Err() != nil {
			// The signal came between two runs (the run before it had recorded its verdict).
			res.Interrupted = suiteInterruption(ctx, i+1, len(runs))
			res.Interrupted.BetweenRuns = true
			break
		}
		key := results.SuiteRun{Experiment: r.p.Experiment, ControlPlane: r.p.CP, Set: r.set}.Key()
		fmt.Fprintf(stderr, "suite %s: run %d/%d %s (expect %s) · elapsed %s · %s\n", s.Name, i+1, len(runs), key,
			expectText(r.expect), time.Since(res.StartedAt).Round(time.Second), eta.remaining(runs[i:]))
		x.doing.set(fmt.Sprintf("suite %s run %d/%d %s", s.Name, i+1, len(runs), key))
		start := time.Now()
		sum, err := r.p.execute(ctx, runner.NewProgress(stderr))
		if cutShort(ctx, sum) {
			res.Interrupted = suiteInterruption(ctx, i+1, len(runs))
			if sum.Interrupted != nil {
				res.Interrupted.Phase = sum.Interrupted.Phase
			}
		}
		secs := time.Since(start).Seconds()
		eta.done(key, secs)
		rel, _ := filepath.Rel(out, r.p.Dir)
		var sp *results.Summary
		if sum.Verdict != "" && err == nil {
			sp = &sum
		}
		if err != nil && sum.Verdict != "" {
			// The run's final summary or reports could not be written (the error says the
			// verdict): it counts as a run that could not be carried out, not as its verdict.
			unsaved = append(unsaved, fmt.Sprintf("%s (%s): %v", key, r.p.Dir, err))
		}
		sr := results.NewSuiteRun(sp, r.entry, r.repeat, r.p.Experiment, r.p.CP, r.set, r.expect, rel, secs, err)
		res.Runs = append(res.Runs, sr)
		mark := "ok"
		switch {
		case res.Interrupted != nil && !sr.AsExpected():
			mark = "interrupted" // not the run's own doing
		case !sr.AsExpected():
			mark = "UNEXPECTED"
		}
		fmt.Fprintf(stderr, "suite %s: run %d/%d %s: %s (expected %s) %s in %s\n", s.Name, i+1, len(runs), key, sr.Verdict, expectText(r.expect), mark, time.Duration(secs*float64(time.Second)).Round(time.Second))
		if sr.Unexpected != "" {
			fmt.Fprintf(stderr, "suite %s: run %d/%d: %s\n", s.Name, i+1, len(runs), sr.Unexpected)
		}
		// Written after every run, so an interrupted suite still leaves its junit and index.
		res.FinishedAt = time.Now().UTC()
		if err := results.WriteSuite(out, res, nil); err != nil {
			return WithExitCode(2, fmt.Errorf("suite %s: write the suite's results after run %d/%d: %w: %s", s.Name, i+1, len(runs), err, suiteOutcome(res)))
		}
		if res.Interrupted != nil {
			break
		}
	}
	res.FinishedAt = time.Now().UTC()
	if res.Interrupted != nil {
		fmt.Fprintf(stderr, "suite %s: %s: no verdict; %d of %d runs did not run\n", s.Name, res.Interrupted, res.Planned-len(res.Runs), res.Planned)
	} else if ctx.Err() != nil {
		fmt.Fprintf(stderr, "suite %s: %v after its last run had given its verdict: nothing was cut short, the suite's verdict stands\n", s.Name, context.Cause(ctx))
	}
	return x.conclude(res, unsaved, stdout, stderr)
}

// conclude records a suite's result once its runs are over (made here, or merged from shards):
// the history line (not for an interrupted suite), suite.json, junit.xml and index.html, the
// outcome on stdout, and the exit code: 0 every run gave its expected verdict, 1 not, 2 an
// interruption, runs whose results (unsaved) or the suite's own could not be written.
func (x *suiteExec) conclude(res *results.SuiteResult, unsaved []string, stdout, stderr io.Writer) error {
	s, out, o := x.suite, x.out, x.opts
	var nights []results.SuiteResult
	var historyErr error
	switch {
	case o.History == "":
	case res.Interrupted != nil:
		// The nights' trends compare whole executions: one cut short (a run with verdict error,
		// runs missing) would show as a change that is none, and shift the noise band after it.
		fmt.Fprintf(stderr, "suite %s: not appended to the history %s: an interrupted execution is not a night of the trends\n", s.Name, results.HistoryFile(o.History, s.Name))
	default:
		if historyErr = x.appendHistory(res, stderr); historyErr == nil {
			nights = append(x.past, *res)
		}
	}
	// Written even when the history could not be: this execution's own record comes first.
	if err := results.WriteSuite(out, res, nights); err != nil {
		return WithExitCode(2, fmt.Errorf("suite %s: write the suite's results: %w: %s", s.Name, err, suiteOutcome(res)))
	}
	if historyErr != nil {
		return WithExitCode(2, fmt.Errorf("suite %s: %w: %s", s.Name, historyErr, suiteOutcome(res)))
	}

	if err := printSuiteResult(stdout, stderr, x.opts.Output, res, out); err != nil {
		return WithExitCode(2, fmt.Errorf("suite %s: %w: %s", s.Name, err, suiteOutcome(res)))
	}
	bad := 0
	for _, r := range res.Runs {
		if !r.AsExpected() {
			bad++
		}
	}
	if res.Interrupted != nil {
		return WithExitCode(2, fmt.Errorf("suite %s: %s: no verdict (%d of %d runs made, %d as expected)", s.Name, res.Interrupted, len(res.Runs), res.Planned, len(res.Runs)-bad))
	}
	if len(unsaved) > 0 {
		return WithExitCode(2, fmt.Errorf("suite %s: the results of %d of %d runs could not be written, the first: %s", s.Name, len(unsaved), res.Planned, unsaved[0]))
	}
	if res.OK() {
		return nil
	}
	missing := res.Planned - len(res.Runs)
	return WithExitCode(1, fmt.Errorf("suite %s: %d of %d runs did not give their expected verdict, %d did not run", s.Name, bad, res.Planned, missing))
}

// printSuiteResult prints the suite's outcome on stdout: each run against its expectation and
// where the junit and index are (text), or the document suite.json holds (json; the paths then
// go to stderr, so stdout holds the document alone). out is the suite's directory.
func printSuiteResult(stdout, stderr io.Writer, format string, res *results.SuiteResult, out string) error {
	paths := fmt.Sprintf("junit: %s\nindex: %s\n", filepath.Join(out, results.JUnitFile), filepath.Join(out, results.SuiteIndexFile))
	if format == outputJSON {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
		_, err := fmt.Fprint(stderr, paths)
		return err
	}
	name := res.Suite
	switch {
	case res.Shard != nil:
		name += fmt.Sprintf(" shard %s, %d of %d runs", res.Shard, res.Planned, res.Shard.Of)
	case res.MergedShards > 0:
		name += fmt.Sprintf(" merged from %d shards", res.MergedShards)
	}
	fmt.Fprintf(stdout, "suite %s (%s, %s):\n", name, res.Substrate, res.FinishedAt.Sub(res.StartedAt).Round(time.Second))
	for i, r := range res.Runs {
		// Whether the run met its expectation (a fail side that failed is ok), not its verdict,
		// which follows.
		status := "ok"
		switch {
		case r.AsExpected():
		case res.Interrupted != nil && i == len(res.Runs)-1 && !res.Interrupted.BetweenRuns:
			status = "cut" // the signal cut it short: not a failure of its own
		default:
			status = "UNEXPECTED"
		}
		fmt.Fprintf(stdout, "  %-10s  %s #%d: %s (expected %s)\n", status, r.Key(), r.Repeat, r.Verdict,
			expectText(results.Expect{Verdict: r.Expect, Failing: r.ExpectFailing}))
		for _, f := range r.Failed {
			fmt.Fprintf(stdout, "              %s\n", f)
		}
		if r.Unexpected != "" {
			fmt.Fprintf(stdout, "              unexpected: %s\n", r.Unexpected)
		}
	}
	if res.Interrupted != nil {
		fmt.Fprintf(stdout, "  %s: no verdict; %d of %d runs did not run\n", res.Interrupted, res.Planned-len(res.Runs), res.Planned)
	}
	_, err := fmt.Fprint(stdout, paths)
	return err
}

// cutShort reports whether ctx ended while the run that returned s was on its way: the run
// recorded the signal, or ctx ended otherwise than by a signal. A signal that came after the run
// had given its verdict (while its reports were rendered) cut nothing short: the next run is the
// one it stops.
func cutShort(ctx context.Context, s results.Summary) bool {
	if ctx.Err() == nil {
		return false
	}
	_, signalled := runner.AsInterrupt(context.Cause(ctx))
	return s.Interrupted != nil || !signalled
}

// suiteInterruption is what ended ctx, as the interruption of run k of n: the signal the handler
// named, or, for a context ended otherwise, its cause.
func suiteInterruption(ctx context.Context, k, n int) *results.SuiteInterruption {
	in, ok := runner.AsInterrupt(context.Cause(ctx))
	if !ok {
		in = &runner.Interrupt{Signal: fmt.Sprint(context.Cause(ctx)), At: time.Now()}
	}
	return &results.SuiteInterruption{Interruption: results.Interruption{Signal: in.Signal, At: in.At.UTC()}, Run: k, Runs: n}
}

// appendHistory adds res to the history, recording the history directories and file it creates.
func (x *suiteExec) appendHistory(res *results.SuiteResult, stderr io.Writer) error {
	dir := x.opts.History
	if err := x.made.MkdirAll(dir); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	file := results.HistoryFile(dir, res.Suite)
	_, statErr := os.Lstat(file)
	err := results.AppendHistory(dir, res, stderr)
	if errors.Is(statErr, fs.ErrNotExist) {
		x.made.Note(file)
	}
	return err
}

// suiteOutcome says what the suite's verdict was, for an error saying it could not be written.
func suiteOutcome(res *results.SuiteResult) string {
	if res.Interrupted != nil {
		return fmt.Sprintf("the suite was %s: no verdict", res.Interrupted)
	}
	if res.OK() {
		return fmt.Sprintf("the verdict was ok (all %d runs as expected)", res.Planned)
	}
	bad := 0
	for _, r := range res.Runs {
		if !r.AsExpected() {
			bad++
		}
	}
	return fmt.Sprintf("the verdict was not ok (%d of %d runs not as expected, %d did not run)", bad, res.Planned, res.Planned-len(res.Runs))
}

// expectText is an expectation as the suite prints it: "pass", or "fail on CHECK, CHECK".
func expectText(e results.Expect) string {
	if len(e.Failing) == 0 {
		return string(e.Verdict)
	}
	return fmt.Sprintf("%s on %s", e.Verdict, strings.Join(e.Failing, ", "))
}

// suiteETA estimates the time left: a run takes what the same entry took last night, else the
// mean of this execution's finished runs.
type suiteETA struct {
	last     map[string]float64
	sum      float64
	finished int
}

func newSuiteETA(past []results.SuiteResult) *suiteETA {
	e := &suiteETA{last: map[string]float64{}}
	if len(past) > 0 {
		for _, r := range past[len(past)-1].Runs {
			e.last[r.Key()] = r.Seconds
		}
	}
	return e
}

func (e *suiteETA) done(key string, secs float64) {
	e.sum += secs
	e.finished++
	e.last[key] = secs
}

func (e *suiteETA) remaining(left []plannedRun) string {
	total := 0.0
	for _, r := range left {
		key := results.SuiteRun{Experiment: r.p.Experiment, ControlPlane: r.p.CP, Set: r.set}.Key()
		switch {
		case e.last[key] > 0:
			total += e.last[key]
		case e.finished > 0:
			total += e.sum / float64(e.finished)
		default:
			return "ETA after the first run"
		}
	}
	return "ETA " + time.Duration(total*float64(time.Second)).Round(time.Second).String()
}
