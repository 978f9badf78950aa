package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/results"
)

// quickRun is a prepared run of an experiment that needs no cluster (one check that passes)
// into dir. With lost, its teardown puts a file where the run directory was, as a disk that
// fails at the end would: the run has a verdict that its final summary cannot be written with.
func quickRun(dir, cp string, lost bool) *prepared {
	exp := runner.Experiment{Name: "quick", Substrate: "local", ControlPlane: cp, Checks: []runner.Check{
		func(*results.Summary) (results.Check, error) {
			return results.NewCheck("always", 1, results.GE, 1, ""), nil
		},
	}}
	if lost {
		exp.Teardown = func(context.Context, *runner.Run) error {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			return os.WriteFile(dir, nil, 0o644)
		}
	}
	return &prepared{job: job{Experiment: "quick", Substrate: "local", CP: cp}, Dir: dir, exp: exp}
}

// exitCode is the process exit code err ends meshchaos with.
func exitCode(err error) int {
	var ec ExitCoder
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return ec.ExitCode()
	}
	return 1
}

// TestRunExitsTwoWhenItsVerdictIsNotWritten: a run whose final summary cannot be written exits 2
// saying so and what the verdict was, not 0 for a pass its run directory does not hold (it
// still says "in progress").
func TestRunExitsTwoWhenItsVerdictIsNotWritten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	err := quickRun(dir, "reference", true).run(context.Background(), nil, outputText, &stdout, &stderr)
	assert.Equal(t, 2, exitCode(err), "%v\n%s", err, stderr.String())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "run quick: write the run's summary: ")
	assert.Contains(t, err.Error(), ": the verdict was pass")
	assert.Contains(t, stdout.String(), "quick (local, reference): pass", "what was measured is still shown")
	assert.NotContains(t, stdout.String(), "report:", "no report to point at")

	// The same run written whole is a pass.
	stdout.Reset()
	dir = filepath.Join(t.TempDir(), "run")
	assert.NoError(t, quickRun(dir, "reference", false).run(context.Background(), nil, outputText, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "report: "+filepath.Join(dir, results.MarkdownFile))
}

// TestSuiteExitsTwoWhenARunsVerdictIsNotWritten: a suite run whose final summary cannot be
// written counts as a run that could not be carried out (suite.json says why, with the verdict
// it had), the suite carries on with its other runs and exits 2 naming it.
func TestSuiteExitsTwoWhenARunsVerdictIsNotWritten(t *testing.T) {
	out := t.TempDir()
	x := &suiteExec{suite: suite.Suite{Name: "mine"}, substrate: "local", out: out, opts: suiteOpts{Nights: 30}}
	for i, lost := range []bool{true, false} {
		x.runs = append(x.runs, plannedRun{entry: i, repeat: 1, repeats: 1, expect: results.Expect{Verdict: results.VerdictPass},
			p: quickRun(filepath.Join(out, suiteRunName(i, "quick", "reference", 1, 1)), "reference", lost)})
	}
	var stdout, stderr bytes.Buffer
	err := x.execute(context.Background(), &stdout, &stderr)
	assert.Equal(t, 2, exitCode(err), "%v\n%s", err, stderr.String())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "suite mine: the results of 1 of 2 runs could not be written, the first: quick [reference]")
	assert.Contains(t, err.Error(), ": the verdict was pass")

	res := readSuite(t, out)
	require.Len(t, res.Runs, 2, "the suite carried on")
	assert.Equal(t, results.VerdictError, res.Runs[0].Verdict)
	assert.Contains(t, res.Runs[0].Error, "write the run's summary: ")
	assert.Contains(t, res.Runs[0].Error, "the verdict was pass")
	assert.Equal(t, results.VerdictPass, res.Runs[1].Verdict)
}

// TestUpgradeCheckCountsAnUnwrittenRunAsNotCarriedOut: a run of an upgrade-check whose final
// summary cannot be written is not compared as the verdict its directory does not hold: the
// check exits 2 and the comparison names it.
func TestUpgradeCheckCountsAnUnwrittenRunAsNotCarriedOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "upgrade")
	u := &upgradeCheck{base: "reference", cand: "reference:ungated", suite: "mine", out: out}
	for _, side := range []string{"base", "candidate"} {
		cp := map[string]string{"base": u.base, "candidate": u.cand}[side]
		u.runs = append(u.runs, upgradeRun{entry: 1, repeat: 1, repeats: 1, side: side,
			p: quickRun(filepath.Join(out, side, "01-quick-r1"), cp, side == "candidate")})
	}
	var stdout, stderr bytes.Buffer
	err := u.execute(context.Background(), &stdout, &stderr)
	assert.Equal(t, 2, exitCode(err), "%v\n%s", err, stderr.String())
	md, rerr := os.ReadFile(filepath.Join(out, results.ComparisonMarkdownFile))
	require.NoError(t, rerr)
	assert.Contains(t, string(md), "the verdict was pass", "the comparison says why the candidate run is missing")
	assert.Contains(t, string(md), "no usable candidate run")
}

// TestComparisonNotWrittenSaysTheOutcome: a comparison that cannot be written is exit 2 with the
// outcome it had.
func TestComparisonNotWrittenSaysTheOutcome(t *testing.T) {
	a, b := runDir(t, "x", 0, 0.5), runDir(t, "x", 0, 0.5)
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	code, msg := run(t, "compare", a, b, "--out", filepath.Join(blocker, "cmp"))
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "write comparison: ")
	assert.Contains(t, msg, ": the outcome was no regression")
}

// twoEntrySuite writes a suite whose second entry is refused only when its run is prepared
// (node access on an existing cluster, checked after the first entry's run directory is
// claimed), and a kubeconfig that gets the existing substrate that far without a cluster.
func twoEntrySuite(t *testing.T) (file string, substrate []string) {
	t.Helper()
	dir := t.TempDir()
	file = filepath.Join(dir, "late.yaml")
	require.NoError(t, os.WriteFile(file, []byte("name: late\nentries:\n- {experiment: endpoint-flap}\n- {experiment: cp-oom-restart}\n"), 0o644))
	return file, []string{"--substrate", "existing", "--kubeconfig", unreachableKubeconfig(t, "c")}
}

// unreachableKubeconfig writes a kubeconfig whose current context (named context) is a cluster
// nobody listens for (127.0.0.1:1), and returns its path.
func unreachableKubeconfig(t *testing.T, context string) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kc, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: %[1]s, context: {cluster: c, user: u}}]
current-context: %[1]s
`, context), 0o600))
	return kc
}

// TestRefusedSuiteLeavesNoRunDirectory: a suite refused after it claimed its first run's
// directory removes the directories it made, and only those: an --out that was there before
// stays, empty.
func TestRefusedSuiteLeavesNoRunDirectory(t *testing.T) {
	file, substrate := twoEntrySuite(t)
	out := t.TempDir() // there before
	code, msg := run(t, append([]string{"suite", file, "--out", out}, substrate...)...)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "entry 2 (cp-oom-restart")
	assert.Contains(t, msg, "--allow-node-chaos")
	assert.DirExists(t, out, "not this command's to remove")
	ents, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Empty(t, ents, "entry 1's run directory is gone")

	parent := t.TempDir()
	code, msg = run(t, append([]string{"suite", file, "--out", filepath.Join(parent, "a", "b")}, substrate...)...)
	assert.Equal(t, 2, code, msg)
	assert.NoDirExists(t, filepath.Join(parent, "a"), "every directory it made")
	assert.DirExists(t, parent)
}

// TestRefusedUpgradeCheckLeavesNothing: an upgrade-check refused after it claimed run
// directories removes them and the output directory it made.
func TestRefusedUpgradeCheckLeavesNothing(t *testing.T) {
	file, substrate := twoEntrySuite(t)
	out := filepath.Join(t.TempDir(), "upgrade")
	code, msg := run(t, append([]string{"upgrade-check", "--base", "reference", "--candidate", "reference:ungated", "--suite", file, "--out", out}, substrate...)...)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "--allow-node-chaos")
	assert.NoDirExists(t, out)
}

// TestSuiteReadsPastATornHistory: a history whose last line a crash tore is read with a warning
// naming the file and line, not refused (which made every later --history run exit 2).
func TestSuiteReadsPastATornHistory(t *testing.T) {
	file, substrate := twoEntrySuite(t)
	history := t.TempDir()
	whole, err := json.Marshal(results.SuiteResult{Schema: results.SuiteSchema, Suite: "late", StartedAt: time.Now().UTC()})
	require.NoError(t, err)
	hf := results.HistoryFile(history, "late")
	require.NoError(t, os.WriteFile(hf, append(append(whole, '\n'), whole[:30]...), 0o644))
	code, msg := run(t, append([]string{"suite", file, "--out", filepath.Join(t.TempDir(), "out"), "--history", history}, substrate...)...)
	// Past the history: refused for the suite's own entry, as it would be without one.
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "warning: history "+hf+" line 2: skipped")
	assert.Contains(t, msg, "entry 2 (cp-oom-restart")
}

// sudoAs makes the process look as if sudo had started it for uid:gid (it is root already).
func sudoAs(t *testing.T, uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("hands files to another user: needs root (results' own tests cover the walk without)")
	}
	t.Setenv("SUDO_UID", strconv.Itoa(uid))
	t.Setenv("SUDO_GID", strconv.Itoa(gid))
}

// ownedBy asserts path and everything under it belong to uid:gid.
func ownedBy(t *testing.T, path string, uid, gid int) {
	t.Helper()
	n := 0
	require.NoError(t, filepath.WalkDir(path, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		assert.Equal(t, []int{uid, gid}, []int{int(st.Uid), int(st.Gid)}, p)
		n++
		return nil
	}))
	assert.Positive(t, n)
}

// TestRunUnderSudoBelongsToTheUser: under sudo the run directory it made (and the parents it
// made for it) and every file in it belong to the user who ran sudo, who can then move,
// re-render and delete them without root; a parent that was there before is left alone.
func TestRunUnderSudoBelongsToTheUser(t *testing.T) {
	const uid, gid = 4242, 4343 // no such user is needed: root may give files to any id
	sudoAs(t, uid, gid)
	parent := t.TempDir()
	out := filepath.Join(parent, "a", "run")
	var made results.Created
	dir, err := claimRunDir(&made, out, "quick", "reference")
	require.NoError(t, err)
	var stdout, stderr bytes.Buffer
	require.NoError(t, quickRun(dir, "reference", false).run(context.Background(), &made, outputText, &stdout, &stderr))
	assert.NotContains(t, stderr.String(), "warning")
	ownedBy(t, filepath.Join(parent, "a"), uid, gid)
	fi, err := os.Stat(parent)
	require.NoError(t, err)
	assert.EqualValues(t, 0, fi.Sys().(*syscall.Stat_t).Uid, "there before: not handed over")
	assert.Equal(t, results.DirMode, mustStat(t, out).Mode().Perm())
	assert.Equal(t, results.FileMode, mustStat(t, filepath.Join(out, results.SummaryFile)).Mode().Perm())

	// `report` hands over what it re-rendered, and only that.
	require.NoError(t, os.Lchown(filepath.Join(out, results.SummaryFile), 0, 0))
	sudoAs(t, uid+1, gid+1)
	code, msg := run(t, "report", out)
	assert.Equal(t, 0, code, msg)
	ownedBy(t, filepath.Join(out, results.HTMLFile), uid+1, gid+1)
	ownedBy(t, filepath.Join(out, results.ChartsDir), uid+1, gid+1)
	ownedBy(t, filepath.Join(out, results.SummaryFile), 0, 0)
}

func mustStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(p)
	require.NoError(t, err)
	return fi
}
