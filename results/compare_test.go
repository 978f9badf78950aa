package results

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results/stats"
)

func runs(ss ...*Summary) []Run {
	out := make([]Run, len(ss))
	for i, s := range ss {
		out[i] = Run{Dir: filepath.Join("runs", s.ControlPlane, string(rune('a'+i))), Summary: s}
	}
	return out
}

func compare(t *testing.T, base, cand []*Summary, maxRel ...float64) *Comparison {
	t.Helper()
	o := CompareOptions{}
	if len(maxRel) > 0 {
		o.MinRel = &maxRel[0]
	}
	for _, s := range cand {
		s.ControlPlane = "candidate"
	}
	c, err := Compare(runs(base...), runs(cand...), o)
	require.NoError(t, err)
	return c
}

func measure(t *testing.T, c *Comparison, name string) MeasureResult {
	t.Helper()
	require.Len(t, c.Groups, 1)
	for _, m := range c.Groups[0].Measures {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no measure %q", name)
	return MeasureResult{}
}

func TestCompareSameRunsNoRegression(t *testing.T) {
	c := compare(t, []*Summary{sample(), sample(), sample()}, []*Summary{sample(), sample(), sample()})
	assert.False(t, c.Regressed())
	assert.Empty(t, c.Incomplete())
	for _, m := range c.Groups[0].Measures {
		assert.Contains(t, []stats.Verdict{stats.NoEvidence, VerdictShown}, m.Verdict, m.Name)
	}
	assert.Zero(t, measure(t, c, "error rate").Stats.Difference.Estimate)
	assert.Equal(t, "no regression", c.Outcome())
}

func TestCompareRegressions(t *testing.T) {
	base, cand := sample(), sample()
	cand.Traffic.ErrorRate = base.Traffic.ErrorRate * 1.2 // +20 %, +0.75 points
	c := compare(t, []*Summary{base}, []*Summary{cand}, 0.10)
	r := measure(t, c, "error rate")
	assert.InDelta(t, 0.75, r.Stats.Difference.Estimate, 1e-9)
	assert.InDelta(t, 1.2, r.Stats.Ratio.Estimate, 1e-9)
	assert.Equal(t, stats.Regression, r.Verdict)
	assert.Equal(t, stats.Separated, r.Stats.Basis, "one run each: no test can be significant")
	assert.True(t, c.Regressed())

	c = compare(t, []*Summary{base}, []*Summary{cand}, 0.25)
	assert.False(t, c.Regressed(), "within a minimum effect of 25 %")

	// Tiny latencies: +50 % but +0.5 ms is under the floor.
	cand = sample()
	cand.Traffic.LatencyMs.P50 = 1.5
	c = compare(t, []*Summary{base}, []*Summary{cand})
	assert.Equal(t, stats.NoEvidence, measure(t, c, "latency p50").Verdict)

	// From zero to something is a regression.
	base.ControlPlaneStats.Pushes.Full, cand.ControlPlaneStats.Pushes.Full = 0, 2
	c = compare(t, []*Summary{base}, []*Summary{cand})
	r = measure(t, c, "full pushes")
	assert.Nil(t, r.Stats.Ratio, "no ratio to a zero base")
	assert.Equal(t, stats.Regression, r.Verdict)

	// Restarts are what the chaos does: shown, never gated.
	base, cand = sample(), sample()
	cand.ControlPlaneStats.Restarts = 5
	c = compare(t, []*Summary{base}, []*Summary{cand})
	assert.False(t, c.Regressed())
	assert.Equal(t, VerdictShown, measure(t, c, "restarts").Verdict)
	assert.Equal(t, 4.0, measure(t, c, "restarts").Stats.Difference.Estimate)

	// Improvement is not a regression.
	cand = sample()
	cand.Traffic.ErrorRate = 0
	c = compare(t, []*Summary{base}, []*Summary{cand}, 0)
	assert.False(t, c.Regressed())
	assert.Equal(t, stats.Improvement, measure(t, c, "error rate").Verdict)
}

// With three runs a side the test decides: a complete separation is p = 0.05; one overlapping
// run is not enough evidence, whatever the means say.
func TestCompareRepeatsUseTheTest(t *testing.T) {
	p99 := func(vs ...float64) []*Summary {
		var out []*Summary
		for _, v := range vs {
			s := sample()
			s.Traffic.LatencyMs.P99 = v
			out = append(out, s)
		}
		return out
	}
	c := compare(t, p99(10, 11, 12), p99(30, 31, 29))
	r := measure(t, c, "latency p99")
	assert.Equal(t, stats.Regression, r.Verdict)
	assert.Equal(t, stats.Significant, r.Stats.Basis)
	assert.InDelta(t, 0.05, r.Stats.PWorse, 1e-12)
	assert.Equal(t, []float64{10, 11, 12}, r.Base)

	// The mean rose by 17 ms (+150 %), but one candidate run is as good as the base.
	c = compare(t, p99(10, 11, 12), p99(11, 30, 40))
	assert.Equal(t, stats.NoEvidence, measure(t, c, "latency p99").Verdict)

	// One run fails a check the other passes: "mixed" in the base is not a pass to regress from.
	a, b := sample(), sample()
	b.Checks[1] = NewCheck("control-plane OOM kills", 0, GE, 1, "")
	c = compare(t, []*Summary{a, b}, []*Summary{sample()})
	assert.Equal(t, "mixed", c.Groups[0].Checks[1].Base)
	assert.False(t, c.Groups[0].Checks[1].Regression)
}

func TestCompareCheckRegression(t *testing.T) {
	base, cand := sample(), sample()
	cand.Checks[1] = NewCheck("control-plane OOM kills", 0, GE, 1, "")
	c := compare(t, []*Summary{base}, []*Summary{cand}, 1000)
	g := c.Groups[0]
	require.Len(t, g.Checks, 2)
	assert.Equal(t, CheckChange{Name: "control-plane OOM kills", Base: "pass", Candidate: "fail", Regression: true}, g.Checks[1])
	assert.False(t, g.Checks[0].Regression, "failed before, fails now")
	assert.True(t, c.Regressed())
	assert.Equal(t, []string{"check: control-plane OOM kills"}, g.Regressions())
}

// Runs are grouped by experiment and parameters; a group on one side only, or without a usable
// run, makes the comparison incomplete; errored runs are listed but not counted.
func TestCompareGroups(t *testing.T) {
	flap := func() *Summary { s := sample(); s.Experiment = "flap"; return s }
	slow := func() *Summary { s := sample(); s.Params = map[string]string{"rate": "10"}; return s }
	errored := flap()
	errored.Verdict, errored.Error, errored.Traffic.ErrorRate = VerdictError, "cluster did not come up", 0.9
	c := compare(t, []*Summary{sample(), flap(), slow()}, []*Summary{flap(), errored, sample()})
	require.Len(t, c.Groups, 3)
	assert.Equal(t, "cp-oom rate=100", c.Label(c.Groups[0]))
	assert.Equal(t, "flap", c.Label(c.Groups[1]))
	assert.Len(t, c.Groups[1].Candidate, 2)
	assert.Equal(t, []float64{100 * sample().Traffic.ErrorRate}, measure1(c.Groups[1], "error rate").Candidate, "the errored run is not counted")
	assert.Equal(t, []string{"cp-oom rate=10: no usable candidate run"}, c.Incomplete())
	assert.False(t, c.Regressed())
	assert.Contains(t, c.Outcome(), "INCOMPLETE")

	_, err := Compare(nil, runs(sample()), CompareOptions{})
	assert.Error(t, err)
}

func measure1(g Group, name string) MeasureResult {
	for _, m := range g.Measures {
		if m.Name == name {
			return m
		}
	}
	return MeasureResult{}
}

func TestComparisonRendering(t *testing.T) {
	base, cand := sample(), sample()
	cand.Traffic.ErrorWindowSeconds = 10
	cand.Checks[0] = NewCheck("error rate", 0, LE, 0, "%")
	c := compare(t, []*Summary{base}, []*Summary{cand})
	c.Base, c.Candidate = "reference", "reference:ungated"
	var b bytes.Buffer
	require.NoError(t, c.WriteTable(&b))
	out := b.String()
	assert.Regexp(t, `error window\s+lower\s+2 s \(2\)\s+10 s \(10\)\s+\+8 \[\+8, \+8\]\s+5 \[5, 5\]\s+0.5\s+REGRESSION \(separated\)`, out)
	assert.Regexp(t, `restarts\s+lower\s+1 \(1\)\s+1 \(1\)\s+0 \[0, 0\]\s+1 \[1, 1\]\s+1\s+shown`, out)
	assert.Regexp(t, `control-plane OOM kills\s+pass\s+pass\s+ok`, out)
	assert.Contains(t, out, "REGRESSION in cp-oom (error window)")

	dir := t.TempDir()
	require.NoError(t, WriteComparison(dir, c))
	md, err := os.ReadFile(filepath.Join(dir, ComparisonMarkdownFile))
	require.NoError(t, err)
	assert.Contains(t, string(md), "# Comparison: reference → reference:ungated")
	assert.Contains(t, string(md), "| error window (s) | lower | 2 s (2) | 10 s (10) |")
	assert.Contains(t, string(md), "**error window** regression: every candidate run is worse than every base run")
	js, err := os.ReadFile(filepath.Join(dir, ComparisonJSONFile))
	require.NoError(t, err)
	var back Comparison
	require.NoError(t, json.Unmarshal(js, &back))
	assert.Equal(t, ComparisonSchema, back.Schema)
	ew := measure1(back.Groups[0], "error window")
	assert.Equal(t, stats.Regression, ew.Verdict)
	assert.Equal(t, stats.LowerIsBetter, ew.Direction)
	assert.Equal(t, stats.Effect{Abs: 2, Rel: 0.25}, ew.Min)
	assert.Equal(t, []float64{10}, ew.Candidate)
}

// TestWriteComparisonFiles: comparison.json and comparison.md are written through a temporary
// file and a rename (none is left behind), readable by all (0644), and ComparisonIn finds them.
func TestWriteComparisonFiles(t *testing.T) {
	c := compare(t, []*Summary{sample()}, []*Summary{sample()})
	dir := t.TempDir()
	assert.Empty(t, ComparisonIn(dir))
	require.NoError(t, WriteComparison(dir, c))
	require.NoError(t, WriteComparison(dir, c), "WriteComparison itself replaces: the CLI decides whether it may")
	assert.Equal(t, []string{ComparisonJSONFile, ComparisonMarkdownFile}, ComparisonIn(dir))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary file left")
	for _, e := range entries {
		info, err := e.Info()
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o644), info.Mode().Perm(), e.Name())
	}
}

// TestInterruptedComparisonIsNoVerdict: a comparison upgrade-check stopped by a signal says so
// first, in its outcome, table and report, and neither "no regression" nor a regression is its
// conclusion, whatever the runs made show.
func TestInterruptedComparisonIsNoVerdict(t *testing.T) {
	in := &SuiteInterruption{Interruption: Interruption{Signal: "interrupt", At: time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC), Phase: "setup"}, Run: 2, Runs: 4}
	same := compare(t, []*Summary{sample()}, []*Summary{sample()})
	same.Interrupted = in
	assert.Equal(t, "INTERRUPTED: interrupted by SIGINT during run 2/4 (phase setup): no verdict (the runs made alone: no regression)", same.Outcome())
	var b bytes.Buffer
	require.NoError(t, same.WriteTable(&b))
	assert.NotContains(t, strings.ReplaceAll(b.String(), same.Outcome(), ""), "no regression", "no group and no outcome claims it")
	assert.Contains(t, b.String(), "nothing regressed in the runs made (interrupted: no verdict)")

	base, cand := sample(), sample()
	cand.Traffic.ErrorWindowSeconds = 10
	worse := compare(t, []*Summary{base}, []*Summary{cand})
	worse.Interrupted = in
	assert.True(t, strings.HasPrefix(worse.Outcome(), "INTERRUPTED: interrupted by SIGINT during run 2/4"), worse.Outcome())
	assert.Contains(t, worse.Outcome(), "the runs made alone: REGRESSION in cp-oom (error window)")

	dir := t.TempDir()
	require.NoError(t, WriteComparison(dir, worse))
	md, err := os.ReadFile(filepath.Join(dir, ComparisonMarkdownFile))
	require.NoError(t, err)
	assert.Contains(t, string(md), "**Interrupted by SIGINT during run 2/4 (phase setup) at 2026-01-01T02:00:00Z: no verdict.**")
	js, err := os.ReadFile(filepath.Join(dir, ComparisonJSONFile))
	require.NoError(t, err)
	var back Comparison
	require.NoError(t, json.Unmarshal(js, &back))
	assert.Equal(t, in, back.Interrupted)
}
