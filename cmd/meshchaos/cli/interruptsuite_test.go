package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/results"
)

// stubRun is quickRun with a check that fails when fail, parameters params, and a setup that
// calls during (where these tests deliver their signal) when given.
func stubRun(dir, cp string, fail bool, params map[string]string, during func()) *prepared {
	p := quickRun(dir, cp, false)
	p.exp.Params = params
	if fail {
		p.exp.Checks = []runner.Check{func(*results.Summary) (results.Check, error) {
			return results.NewCheck("always", 0, results.GE, 1, ""), nil
		}}
	}
	if during != nil {
		p.exp.Setup = func(context.Context, *runner.Run) error {
			during()
			return nil
		}
	}
	return p
}

// signalled is a context as interruptible makes it, and what the first signal does to it:
// cancel it with the runner.Interrupt a SIGTERM gives.
func signalled(t *testing.T) (context.Context, func()) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	return ctx, func() { cancel(&runner.Interrupt{Signal: syscall.SIGTERM.String(), At: time.Now()}) }
}

// onLine is a writer that calls fn once, at the first write containing substr (a signal that
// comes when the suite prints that line).
type onLine struct {
	bytes.Buffer
	substr string
	fn     func()
	once   sync.Once
}

func (w *onLine) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.substr) {
		w.once.Do(w.fn)
	}
	return w.Buffer.Write(p)
}

// threeRunSuite plans three runs of the stub into out: the second calls during in its setup.
func threeRunSuite(out, history string, during func()) *suiteExec {
	x := &suiteExec{suite: suite.Suite{Name: "mine"}, substrate: "local", out: out, opts: suiteOpts{Nights: 30, History: history}}
	for i := range 3 {
		var d func()
		if i == 1 {
			d = during
		}
		x.runs = append(x.runs, plannedRun{entry: i, repeat: 1, repeats: 1, expect: results.Expect{Verdict: results.VerdictPass},
			p: stubRun(filepath.Join(out, suiteRunName(i, "quick", "reference", 1, 1)), "reference", false, nil, d)})
	}
	return x
}

// TestSuiteInterruptedDuringARunGivesNoVerdict: a signal during run 2 of 3 (every run that
// ended passed as expected) is exit 2, not a verdict: suite.json records the signal, the run and
// its phase, junit.xml has an errored case saying so, the run cut short records the signal in
// its own summary, run 3 never starts, and the execution is not appended to the history. The
// same suite without the signal passes and is appended.
func TestSuiteInterruptedDuringARunGivesNoVerdict(t *testing.T) {
	ctx, signal := signalled(t)
	out, history := t.TempDir(), t.TempDir()
	var x *suiteExec
	var doing string
	x = threeRunSuite(out, history, func() {
		doing = x.doing.String()
		signal()
	})
	x.doing = newActivity("suite mine")
	var stdout, stderr bytes.Buffer
	err := x.execute(ctx, &stdout, &stderr)
	assert.Equal(t, 2, exitCode(err), "%v\n%s", err, stderr.String())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "suite mine: interrupted by SIGTERM during run 2/3 (phase setup): no verdict")
	assert.Equal(t, "suite mine run 2/3 quick [reference]", doing, "a second signal names the run being torn down")

	res := readSuite(t, out)
	require.NotNil(t, res.Interrupted, "suite.json records the interruption")
	assert.Equal(t, "terminated", res.Interrupted.Signal, "spelled as the run's summary spells it")
	assert.Equal(t, []int{2, 3}, []int{res.Interrupted.Run, res.Interrupted.Runs})
	assert.Equal(t, "setup", res.Interrupted.Phase)
	assert.False(t, res.Interrupted.BetweenRuns)
	assert.WithinDuration(t, time.Now(), res.Interrupted.At, time.Minute)
	require.Len(t, res.Runs, 2, "run 3 did not start")
	assert.Equal(t, 3, res.Planned)
	assert.Equal(t, results.VerdictPass, res.Runs[0].Verdict)
	assert.Equal(t, results.VerdictError, res.Runs[1].Verdict)
	assert.Contains(t, res.Runs[1].Error, "interrupted by terminated")
	assert.NoFileExists(t, filepath.Join(x.runs[2].p.Dir, results.SummaryFile))

	s, err := results.Read(x.runs[1].p.Dir)
	require.NoError(t, err)
	assert.Equal(t, results.VerdictError, s.Verdict)
	require.NotNil(t, s.Interrupted, "the run cut short records the signal itself")
	assert.Equal(t, "terminated", s.Interrupted.Signal)

	junit, err := os.ReadFile(filepath.Join(out, results.JUnitFile))
	require.NoError(t, err)
	assert.Contains(t, string(junit), `type="Interrupted"`)
	assert.Contains(t, string(junit), "interrupted by SIGTERM during run 2/3 (phase setup) at ")
	assert.Contains(t, string(junit), "no verdict; 1 of 3 planned runs did not run")
	page, err := os.ReadFile(filepath.Join(out, results.SuiteIndexFile))
	require.NoError(t, err)
	assert.Contains(t, string(page), "Interrupted — no verdict: interrupted by SIGTERM during run 2/3")

	hf := results.HistoryFile(history, "mine")
	assert.NoFileExists(t, hf, "an interrupted execution is not a night")
	assert.Contains(t, stderr.String(), "suite mine: not appended to the history "+hf+": an interrupted execution is not a night of the trends")
	assert.Contains(t, stdout.String(), "cut         quick [reference] #1: error", "the run cut short is not shown as a failure of its own")
	assert.Contains(t, stdout.String(), "interrupted by SIGTERM during run 2/3 (phase setup): no verdict; 1 of 3 runs did not run")

	// Without the signal: the same suite passes and is a night of the history.
	out = t.TempDir()
	x = threeRunSuite(out, history, func() {})
	stdout.Reset()
	stderr.Reset()
	require.NoError(t, x.execute(context.Background(), &stdout, &stderr), stderr.String())
	assert.Nil(t, readSuite(t, out).Interrupted)
	assert.FileExists(t, hf)
}

// TestSuiteInterruptedBetweenRuns: a signal after run 1 of 2 had given its verdict — while its
// reports were rendered, or once the suite had counted it — and before run 2 started is exit 2
// naming run 2 as the one that did not start; run 1 keeps its verdict. A signal before the first
// run is the same, with no run made. A signal after the last run's verdict cuts nothing short:
// the suite's verdict stands, and it is a night of the history.
func TestSuiteInterruptedBetweenRuns(t *testing.T) {
	for _, line := range []string{
		"verdict pass — ", // the runner's last line, after the run's verdict is written
		"suite mine: run 1/2 quick [reference]: pass",
	} {
		ctx, signal := signalled(t)
		out := t.TempDir()
		x := threeRunSuite(out, "", nil)
		x.runs = x.runs[:2]
		stderr := &onLine{substr: line, fn: signal}
		var stdout bytes.Buffer
		err := x.execute(ctx, &stdout, stderr)
		assert.Equal(t, 2, exitCode(err), "%q: %v\n%s", line, err, stderr.String())
		assert.ErrorContains(t, err, "suite mine: interrupted by SIGTERM before run 2/2 started: no verdict", line)
		res := readSuite(t, out)
		require.NotNil(t, res.Interrupted, line)
		assert.True(t, res.Interrupted.BetweenRuns, line)
		assert.Equal(t, 2, res.Interrupted.Run, line)
		require.Len(t, res.Runs, 1, line)
		assert.Equal(t, results.VerdictPass, res.Runs[0].Verdict, line)
		assert.NoFileExists(t, filepath.Join(x.runs[1].p.Dir, results.SummaryFile), line)
	}

	ctx, signal := signalled(t)
	signal()
	out := t.TempDir()
	x := threeRunSuite(out, t.TempDir(), nil)
	err := x.execute(ctx, &bytes.Buffer{}, &bytes.Buffer{})
	assert.Equal(t, 2, exitCode(err), "%v", err)
	res := readSuite(t, out)
	require.NotNil(t, res.Interrupted, "suite.json is written even when no run was made")
	assert.Equal(t, []int{1, 3}, []int{res.Interrupted.Run, res.Interrupted.Runs})
	assert.Empty(t, res.Runs)
	assert.NoFileExists(t, results.HistoryFile(x.opts.History, "mine"))

	ctx, signal = signalled(t)
	out = t.TempDir()
	x = threeRunSuite(out, t.TempDir(), nil)
	stderr := &onLine{substr: "/03-quick-reference/report.html", fn: signal} // run 3's "verdict pass — …" line
	require.NoError(t, x.execute(ctx, &bytes.Buffer{}, stderr), stderr.String())
	assert.Contains(t, stderr.String(), "suite mine: interrupted by terminated after its last run had given its verdict: nothing was cut short, the suite's verdict stands")
	assert.Nil(t, readSuite(t, out).Interrupted)
	assert.FileExists(t, results.HistoryFile(x.opts.History, "mine"))
}

// upgradePlan is two entries, base and candidate each: entry 1's candidate fails its check (a
// regression) and entry 2's base run calls during in its setup.
func upgradePlan(out string, during func()) *upgradeCheck {
	u := &upgradeCheck{base: "reference", cand: "reference:ungated", suite: "mine", out: out}
	for e := 1; e <= 2; e++ {
		params := map[string]string{"entry": string(rune('0' + e))}
		for _, side := range []string{"base", "candidate"} {
			cp := map[string]string{"base": u.base, "candidate": u.cand}[side]
			var d func()
			if e == 2 && side == "base" {
				d = during
			}
			u.runs = append(u.runs, upgradeRun{entry: e, repeat: 1, repeats: 1, side: side,
				p: stubRun(filepath.Join(out, side, suiteRunName(e-1, "quick", "", 1, 1)), cp, e == 1 && side == "candidate", params, d)})
		}
	}
	return u
}

func readComparison(t *testing.T, dir string) *results.Comparison {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, results.ComparisonJSONFile))
	require.NoError(t, err)
	var c results.Comparison
	require.NoError(t, json.Unmarshal(b, &c))
	return &c
}

// TestUpgradeCheckInterruptedGivesNoVerdict: an upgrade-check stopped by a signal in run 3 of 4
// exits 2 even though the runs made show a regression (exit 1 without the signal): its
// comparison says which signal came during which run and that it gives no verdict, lists the run
// never made, and never says "no regression".
func TestUpgradeCheckInterruptedGivesNoVerdict(t *testing.T) {
	ctx, signal := signalled(t)
	out := filepath.Join(t.TempDir(), "upgrade")
	var u *upgradeCheck
	var doing string
	u = upgradePlan(out, func() {
		doing = u.doing.String()
		signal()
	})
	u.doing = newActivity("upgrade-check")
	var stdout, stderr bytes.Buffer
	err := u.execute(ctx, &stdout, &stderr)
	assert.Equal(t, 2, exitCode(err), "%v\n%s", err, stderr.String())
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "INTERRUPTED: interrupted by SIGTERM during run 3/4 (phase setup): no verdict"), err.Error())
	assert.Equal(t, "upgrade-check run 3/4 (entry 2 quick, base reference)", doing)
	assert.NotContains(t, stdout.String(), "no regression")
	assert.Contains(t, stdout.String(), "REGRESSION: check: always", "what the runs made show is still shown")
	assert.Contains(t, stderr.String(), "upgrade-check: interrupted by SIGTERM during run 3/4 (phase setup): no verdict; 1 of 4 runs not made")

	c := readComparison(t, out)
	require.NotNil(t, c.Interrupted, "comparison.json records the interruption")
	assert.Equal(t, "terminated", c.Interrupted.Signal)
	assert.Equal(t, []int{3, 4}, []int{c.Interrupted.Run, c.Interrupted.Runs})
	assert.Equal(t, "setup", c.Interrupted.Phase)
	require.Len(t, c.Groups, 2)
	g := c.Groups[1]
	assert.Equal(t, "no usable base run", g.Error)
	require.Len(t, g.Base, 1)
	assert.Contains(t, g.Base[0].Error, "interrupted by terminated", "the run cut short")
	require.Len(t, g.Candidate, 1)
	assert.Equal(t, "not run: the upgrade-check was interrupted by SIGTERM during run 3/4 (phase setup)", g.Candidate[0].Error)
	md, err := os.ReadFile(filepath.Join(out, results.ComparisonMarkdownFile))
	require.NoError(t, err)
	assert.Contains(t, string(md), "**INTERRUPTED: interrupted by SIGTERM during run 3/4 (phase setup): no verdict")
	assert.Contains(t, string(md), "no verdict.** The runs made until then are compared below for information only")

	// Without the signal: the regression is the verdict, exit 1.
	out = filepath.Join(t.TempDir(), "upgrade")
	u = upgradePlan(out, func() {})
	stdout.Reset()
	err = u.execute(context.Background(), &stdout, &stderr)
	assert.Equal(t, 1, exitCode(err), "%v", err)
	assert.Nil(t, readComparison(t, out).Interrupted)
}

// TestUpgradeCheckInterruptedBeforeItsFirstRun: a signal before any run leaves a comparison
// that says so (every run listed as not run), exit 2, not "no comparison" without a report.
func TestUpgradeCheckInterruptedBeforeItsFirstRun(t *testing.T) {
	ctx, signal := signalled(t)
	signal()
	out := filepath.Join(t.TempDir(), "upgrade")
	u := upgradePlan(out, nil)
	var stdout, stderr bytes.Buffer
	err := u.execute(ctx, &stdout, &stderr)
	assert.Equal(t, 2, exitCode(err), "%v\n%s", err, stderr.String())
	assert.ErrorContains(t, err, "interrupted by SIGTERM before run 1/4 started: no verdict")
	c := readComparison(t, out)
	require.NotNil(t, c.Interrupted)
	assert.True(t, c.Interrupted.BetweenRuns)
	for _, g := range c.Groups {
		assert.NotEmpty(t, g.Error, g.Experiment)
		for _, r := range append(g.Base, g.Candidate...) {
			assert.Equal(t, results.VerdictError, r.Verdict)
			assert.Contains(t, r.Error, "not run: ")
		}
	}
	assert.NotContains(t, stdout.String(), "no regression")
}

// TestUpgradeCheckSignalAfterItsLastRun: a signal after the last run had given its verdict cut
// nothing short: the comparison is the verdict (here the regression, exit 1), not interrupted.
func TestUpgradeCheckSignalAfterItsLastRun(t *testing.T) {
	ctx, signal := signalled(t)
	out := filepath.Join(t.TempDir(), "upgrade")
	u := upgradePlan(out, nil)
	last := u.runs[len(u.runs)-1].p.Dir
	stderr := &onLine{substr: filepath.Join(last, results.HTMLFile), fn: signal} // its "verdict … — …" line
	err := u.execute(ctx, &bytes.Buffer{}, stderr)
	assert.Equal(t, 1, exitCode(err), "%v\n%s", err, stderr.String())
	assert.Contains(t, stderr.String(), "upgrade-check: interrupted by terminated after its last run had given its verdict: nothing was cut short, the comparison stands")
	assert.Nil(t, readComparison(t, out).Interrupted)
}
