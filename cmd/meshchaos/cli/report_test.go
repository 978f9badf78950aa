package cli

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

// runDir writes a finished run with the given check observations (threshold: ≤ 1).
func runDir(t *testing.T, experiment string, errorRate float64, observed ...float64) string {
	t.Helper()
	dir := t.TempDir()
	start := time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	end := start.Add(time.Minute)
	s := &results.Summary{
		Schema: results.SchemaVersion, Experiment: experiment, StartedAt: start, FinishedAt: &end,
		Traffic: &results.Traffic{StartedAt: start, Requests: 1000, Errors: int64(errorRate * 1000), ErrorRate: errorRate,
			ByCode: map[string]int64{}, ByFlag: map[string]int64{}, LatencyMs: results.Latency{P50: 2, P90: 4, P99: 8, Max: 20}},
		Events: []results.Event{},
	}
	for i, o := range observed {
		s.Checks = append(s.Checks, results.NewCheck([]string{"a", "b", "c"}[i], o, results.LE, 1, ""))
	}
	s.Verdict = results.DecideVerdict(s.Checks)
	require.NoError(t, results.Write(dir, s))
	return dir
}

func TestReportExitCodes(t *testing.T) {
	pass := runDir(t, "x", 0, 0, 1)
	code, out := run(t, "report", pass)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "x: pass")
	for _, f := range []string{"report.html", "report.md", "junit.xml"} {
		assert.FileExists(t, filepath.Join(pass, f))
	}

	fail := runDir(t, "x", 0, 0, 3)
	code, out = run(t, "report", fail)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "x failed 1 of 2 checks")
	assert.Contains(t, out, "  fail  b: observed 3, want ≤ 1")

	// A run that could not be carried out: still rendered, exit 2.
	errDir := t.TempDir()
	rec, err := results.NewRecorder(errDir, results.Summary{Experiment: "x"})
	require.NoError(t, err)
	_, err = rec.Finish(errors.New("cluster did not come up"))
	require.NoError(t, err)
	code, out = run(t, "report", errDir)
	assert.Equal(t, 2, code)
	assert.Contains(t, out, "could not be carried out: cluster did not come up")
	assert.FileExists(t, filepath.Join(errDir, "report.html"))
}

func TestReportBadInput(t *testing.T) {
	code, out := run(t, "report", filepath.Join(t.TempDir(), "nope"))
	assert.Equal(t, 2, code)
	assert.Contains(t, out, "does not exist")

	corrupt := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(corrupt, "summary.json"), []byte(`{"schema":`), 0o644))
	code, out = run(t, "report", corrupt)
	assert.Equal(t, 2, code)
	assert.Contains(t, out, "not a valid meshchaos/v1 summary")

	code, _ = run(t, "report")
	assert.Equal(t, 2, code, "missing argument")
}

func TestCompareCLI(t *testing.T) {
	base := runDir(t, "x", 0.010, 0)
	same := runDir(t, "x", 0.0105, 0)
	worse := runDir(t, "x", 0.020, 0)

	code, out := run(t, "compare", base, same)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "no regression")
	assert.Regexp(t, `error rate\s+lower\s+1 % \(1\)\s+1.05 % \(1.05\)\s+\+0.05 \[\+0.05, \+0.05\]\s+1.05 \[1.05, 1.05\]\s+0.5\s+no evidence`, out)

	code, out = run(t, "compare", base, worse)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "REGRESSION (separated)")
	assert.Contains(t, out, "the candidate regressed: REGRESSION in x (error rate)")

	code, out = run(t, "compare", base, worse, "--max-regression", "150")
	assert.Equal(t, 0, code, out)

	// Repeat runs: a directory of run directories; --out writes the report.
	repeats := t.TempDir()
	for i, d := range []string{base, same} {
		require.NoError(t, os.Rename(d, filepath.Join(repeats, []string{"r1", "r2"}[i])))
	}
	report := filepath.Join(t.TempDir(), "cmp")
	code, out = run(t, "compare", repeats, worse, "--out", report)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "base 2 run(s)")
	assert.FileExists(t, filepath.Join(report, results.ComparisonJSONFile))
	assert.FileExists(t, filepath.Join(report, results.ComparisonMarkdownFile))

	// Experiments on one side only: bad input.
	code, out = run(t, "compare", repeats, runDir(t, "y", 0, 0))
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "no usable candidate run")
}

func TestCompareBadInput(t *testing.T) {
	good := runDir(t, "x", 0, 0)
	for name, args := range map[string][]string{
		"missing base": {"compare", filepath.Join(t.TempDir(), "nope"), good},
		"empty dir":    {"compare", good, t.TempDir()},
		"other exp":    {"compare", good, runDir(t, "y", 0, 0)},
		"negative":     {"compare", good, good, "--max-regression", "-1"},
		"alpha":        {"compare", good, good, "--alpha", "0.7"},
		"not a number": {"compare", good, good, "--max-regression", "ten"},
		"NaN":          {"compare", good, good, "--max-regression", "NaN"},
		"Inf":          {"compare", good, good, "--max-regression", "Inf"},
		"one argument": {"compare", good},
	} {
		code, out := run(t, args...)
		assert.Equal(t, 2, code, "%s: %s", name, out)
	}
	errDir := t.TempDir()
	_, err := results.NewRecorder(errDir, results.Summary{Experiment: "x"})
	require.NoError(t, err) // never finished: verdict error on disk, as after a crash
	code, out := run(t, "compare", good, errDir)
	assert.Equal(t, 2, code)
	assert.Contains(t, out, "could not be carried out")
}

// TestCompareKeepsAnEarlierComparison: `compare --out DIR` into a directory that holds a
// comparison is exit 2 before anything is read or written, and the earlier one is left as it
// was; --force replaces it. The files are 0644 and no temporary file is left behind.
func TestCompareKeepsAnEarlierComparison(t *testing.T) {
	t.Setenv("MESHCHAOS_HOME", t.TempDir())
	base := runDir(t, "x", 0.010, 0)
	same := runDir(t, "x", 0.0105, 0)
	worse := runDir(t, "x", 0.020, 0)
	out := filepath.Join(t.TempDir(), "cmp")
	code, msg := run(t, "compare", base, same, "--out", out)
	require.Equal(t, 0, code, msg)
	read := func() (string, string) {
		md, err := os.ReadFile(filepath.Join(out, results.ComparisonMarkdownFile))
		require.NoError(t, err)
		js, err := os.ReadFile(filepath.Join(out, results.ComparisonJSONFile))
		require.NoError(t, err)
		return string(md), string(js)
	}
	md, js := read()

	code, msg = run(t, "compare", base, worse, "--out", out)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "--out "+out+" already holds a comparison (comparison.json, comparison.md): choose another directory or remove it, or pass --force to replace it")
	assert.NotContains(t, msg, "REGRESSION", "refused before comparing")
	md2, js2 := read()
	assert.Equal(t, md, md2, "the earlier comparison is kept")
	assert.Equal(t, js, js2)

	// upgrade-check, which writes the same files, refuses such a DIR before its first run.
	code, msg = run(t, "upgrade-check", "--base", "reference", "--candidate", "reference:ungated", "--out", out)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "--out "+out+" already holds a comparison")
	assertNothingStarted(t, os.Getenv("MESHCHAOS_HOME"), false)

	// One of the two files is enough to refuse.
	require.NoError(t, os.Remove(filepath.Join(out, results.ComparisonJSONFile)))
	code, msg = run(t, "compare", base, worse, "--out", out)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "already holds a comparison (comparison.md)")

	code, msg = run(t, "compare", base, worse, "--out", out, "--force")
	assert.Equal(t, 1, code, msg)
	md3, _ := read()
	assert.NotEqual(t, md, md3, "--force replaces it")
	assert.Contains(t, md3, "REGRESSION")
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		info, err := e.Info()
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o644), info.Mode().Perm(), e.Name())
	}
	assert.ElementsMatch(t, []string{results.ComparisonJSONFile, results.ComparisonMarkdownFile}, names, "no temporary file left")
}
