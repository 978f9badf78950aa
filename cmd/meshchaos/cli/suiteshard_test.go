package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
)

// TestSuiteShardsPartitionThePlan plans built-in suites whole and as every shard of n = 1…5:
// each run of the whole plan is planned by exactly one shard, under the same directory name,
// only the shard's own run directories are claimed, and every shard records the same plan.
func TestSuiteShardsPartitionThePlan(t *testing.T) {
	j := job{Substrate: "local", CP: "reference", XDS: "auto"}
	for _, name := range []string{"honesty", "nightly"} {
		s, ok := suite.Builtin(name)
		require.True(t, ok)
		whole, rec, err := planSuite(nil, s, j, suiteOpts{}, t.TempDir(), suite.Shard{})
		require.NoError(t, err, name)
		require.Nil(t, rec, "a whole suite is no shard")
		require.Len(t, whole, s.Runs())
		var want []string
		for _, r := range whole {
			want = append(want, filepath.Base(r.p.Dir))
		}
		for n := 1; n <= 5; n++ {
			var got []string
			var plans []string
			for i := 1; i <= n; i++ {
				out := t.TempDir()
				runs, rec, err := planSuite(nil, s, j, suiteOpts{}, out, suite.Shard{Index: i, Count: n})
				require.NoError(t, err, "%s %d/%d", name, i, n)
				require.NotNil(t, rec)
				assert.Equal(t, []int{i, n, len(whole)}, []int{rec.Index, rec.Count, rec.Of})
				plans = append(plans, rec.Plan)
				claimed, err := os.ReadDir(out)
				require.NoError(t, err)
				assert.Len(t, claimed, len(runs), "%s %d/%d: only the shard's run directories are claimed", name, i, n)
				for _, r := range runs {
					assert.DirExists(t, r.p.Dir)
					got = append(got, filepath.Base(r.p.Dir))
				}
			}
			slices.Sort(got)
			sorted := slices.Sorted(slices.Values(want))
			assert.Equal(t, sorted, got, "%s into %d: every run in exactly one shard", name, n)
			assert.Len(t, slices.Compact(plans), 1, "%s into %d: one plan", name, n)
		}
	}
}

// stubSuite plans a suite of five stub runs into out, the shard sh of it (all for the zero
// Shard): entry 1 once, entry 2 three times (its second repeat fails when failing: a run
// that misses its expected pass), entry 3 once, expected to fail, and failing.
func stubSuite(out string, sh suite.Shard, failing bool) *suiteExec {
	x := &suiteExec{suite: suite.Suite{Name: "mine", Summary: "five stub runs"}, substrate: "local", out: out, opts: suiteOpts{Nights: 30}}
	var plan []results.SuiteRun
	for e, repeats := range []int{1, 3, 1} {
		cp, expect := "reference", results.Expect{Verdict: results.VerdictPass}
		if e == 2 {
			cp, expect = "reference:ungated", results.Expect{Verdict: results.VerdictFail, Failing: []string{"always"}}
		}
		for r := 1; r <= repeats; r++ {
			k := len(plan)
			plan = append(plan, results.SuiteRun{Entry: e, Repeat: r, Experiment: "quick", ControlPlane: cp, Expect: expect.Verdict, ExpectFailing: expect.Failing})
			if !sh.Has(k) {
				continue
			}
			fail := e == 2 || (failing && e == 1 && r == 2)
			dir := filepath.Join(out, suiteRunName(e, "quick", cp, r, repeats))
			x.runs = append(x.runs, plannedRun{entry: e, repeat: r, repeats: repeats, expect: expect, p: stubRun(dir, cp, fail, nil, nil)})
		}
	}
	x.shard = sh.Record(plan)
	return x
}

// shardNormalized is a suite.json with what a merge cannot reproduce zeroed: the times (the
// shards ran side by side, each run took what it took) and the merge's own record.
func shardNormalized(t *testing.T, dir string) results.SuiteResult {
	r := *readSuite(t, dir)
	r.StartedAt, r.FinishedAt, r.MergedShards = time.Time{}, time.Time{}, 0
	for i := range r.Runs {
		r.Runs[i].Seconds = 0
		delete(r.Runs[i].Measures, results.MeasureWallTime)
	}
	return r
}

var (
	// junit.xml's times: the testsuite's start and duration.
	junitTimes = regexp.MustCompile(` (timestamp|time)="[^"]*"`)
	junitMerge = regexp.MustCompile(`\s*<property name="mergedShards" value="\d+"></property>`)
	// index.html's times: start and wall time, each run's seconds; and the merge's line.
	indexTimes = regexp.MustCompile(`started [0-9: -]+ UTC · [^·]+ · |<td class="num">\d+ s</td>`)
	indexMerge = regexp.MustCompile(`<p>Merged from \d+ shards[^\n]*\n`)
)

func normalizedFile(t *testing.T, path string, drop ...*regexp.Regexp) string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, re := range drop {
		b = re.ReplaceAll(b, nil)
	}
	return string(b)
}

// TestSuiteShardsMergeAsOneMachine: the stub suite run whole and as 2, 3 and 6 shards, merged
// with suite merge: the merged suite.json, junit.xml and index.html are the whole run's but for
// the times and the merge's own record (mergedShards), the exit code is the same (0 when every
// run gave its expected verdict, 1 when one did not), the run directories are copied, and the
// merged night is appended to --history once.
func TestSuiteShardsMergeAsOneMachine(t *testing.T) {
	for _, failing := range []bool{false, true} {
		whole := t.TempDir()
		var stderr bytes.Buffer
		x := stubSuite(whole, suite.Shard{}, failing)
		x.opts.History = t.TempDir() // as the merge's: the index then shows the history's first night
		wantCode := exitCode(x.execute(context.Background(), &bytes.Buffer{}, &stderr))
		require.Equal(t, map[bool]int{false: 0, true: 1}[failing], wantCode, stderr.String())
		for _, n := range []int{2, 3, 6} { // 6: more shards than runs, the last one empty
			var dirs []string
			for i := 1; i <= n; i++ {
				dir := t.TempDir()
				stderr.Reset()
				x := stubSuite(dir, suite.Shard{Index: i, Count: n}, failing)
				err := x.execute(context.Background(), &bytes.Buffer{}, &stderr)
				// The shard holding entry 2's second repeat (run 3 of the suite) fails alone.
				assert.Equal(t, map[bool]int{false: 0, true: 1}[failing && (2%n == i-1)], exitCode(err), "%d/%d: %v", i, n, err)
				assert.Contains(t, stderr.String(), "suite mine: shard "+suite.Shard{Index: i, Count: n}.String()+": ")
				sh := readSuite(t, dir).Shard
				require.NotNil(t, sh, "suite.json records the shard")
				assert.Equal(t, []int{i, n, 5}, []int{sh.Index, sh.Count, sh.Of})
				assert.Contains(t, normalizedFile(t, filepath.Join(dir, results.JUnitFile)), `<property name="shard" value="`+sh.String()+` of 5 runs">`)
				assert.Contains(t, normalizedFile(t, filepath.Join(dir, results.SuiteIndexFile)), fmt.Sprintf("Shard %d of %d", i, n))
				dirs = append(dirs, dir)
			}
			merged, history := filepath.Join(t.TempDir(), "merged"), t.TempDir()
			slices.Reverse(dirs) // in any order
			code, msg := run(t, append(append([]string{"suite", "merge"}, dirs...), "--out", merged, "--history", history)...)
			assert.Equal(t, wantCode, code, "failing=%v n=%d: the whole suite's exit code\n%s", failing, n, msg)
			assert.Contains(t, msg, fmt.Sprintf("suite mine merged from %d shards (local, ", n))

			assert.Equal(t, shardNormalized(t, whole), shardNormalized(t, merged), "failing=%v n=%d: suite.json", failing, n)
			assert.Equal(t, n, readSuite(t, merged).MergedShards)
			assert.Equal(t, normalizedFile(t, filepath.Join(whole, results.JUnitFile), junitTimes),
				normalizedFile(t, filepath.Join(merged, results.JUnitFile), junitTimes, junitMerge), "failing=%v n=%d: junit.xml", failing, n)
			assert.Equal(t, normalizedFile(t, filepath.Join(whole, results.SuiteIndexFile), indexTimes),
				normalizedFile(t, filepath.Join(merged, results.SuiteIndexFile), indexTimes, indexMerge), "failing=%v n=%d: index.html", failing, n)
			for _, r := range readSuite(t, merged).Runs {
				s, err := results.Read(filepath.Join(merged, r.Dir))
				require.NoError(t, err, "the run directory is copied whole")
				assert.Equal(t, r.Verdict, s.Verdict)
				assert.FileExists(t, filepath.Join(merged, r.Dir, results.HTMLFile), "index.html's link works")
			}
			nights, err := results.ReadHistory(history, "mine", 10, &bytes.Buffer{})
			require.NoError(t, err)
			require.Len(t, nights, 1, "one night for the merged result")
			assert.Equal(t, n, nights[0].MergedShards)
			assert.Len(t, nights[0].Runs, 5)
		}
	}
}

// TestSuiteMergeRefuses: merge refuses, exit 2 and nothing created, a shard missing or given
// twice, a shard that was interrupted (named), shards of different suites or builds, a whole
// suite's directory, a shard without its run directories, and an --out that holds a suite.
func TestSuiteMergeRefuses(t *testing.T) {
	shard := func(i, n int, edit func(x *suiteExec)) string {
		dir := t.TempDir()
		x := stubSuite(dir, suite.Shard{Index: i, Count: n}, false)
		if edit != nil {
			edit(x)
		}
		_ = x.execute(context.Background(), &bytes.Buffer{}, &bytes.Buffer{})
		return dir
	}
	one, two := shard(1, 2, nil), shard(2, 2, nil)
	whole := t.TempDir()
	require.NoError(t, stubSuite(whole, suite.Shard{}, false).execute(context.Background(), &bytes.Buffer{}, &bytes.Buffer{}))

	ctx, signal := signalled(t)
	signal()
	cut := t.TempDir()
	err := stubSuite(cut, suite.Shard{Index: 2, Count: 2}, false).execute(ctx, &bytes.Buffer{}, &bytes.Buffer{})
	require.Equal(t, 2, exitCode(err), "%v", err)

	theirs := shard(2, 2, func(x *suiteExec) { x.suite.Name = "theirs" })
	// Another build: suite.json as another version of meshchaos writes it.
	other := shard(2, 2, nil)
	r := readSuite(t, other)
	r.HarnessVersion, r.HarnessCommit = "v0.0.1-other", "0123abcd"
	require.NoError(t, results.WriteSuiteResult(other, r))
	// The shard's suite.json without its run directories.
	bare := t.TempDir()
	b, err := os.ReadFile(filepath.Join(two, results.SuiteFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(bare, results.SuiteFile), b, 0o644))

	for name, tc := range map[string]struct {
		dirs []string
		want string
	}{
		"missing":     {[]string{one}, "shard 2/2 of suite mine missing (given: 1/2)"},
		"twice":       {[]string{one, two, one}, "shard 1/2 given twice: " + one + " and " + one},
		"interrupted": {[]string{one, cut}, "shard 2/2 (" + cut + ") was interrupted by SIGTERM before run 1/2 started: it gave no verdict; run that shard again"},
		"suites":      {[]string{one, theirs}, "shards of different suites: " + one + " is suite mine, " + theirs + " is suite theirs"},
		"builds":      {[]string{one, other}, "shards of different harness versions: " + one + " ran meshchaos "},
		"whole":       {[]string{one, whole}, whole + ": not a shard: suite mine ran whole there (without --shard)"},
		"no runs":     {[]string{one, bare}, "shard 2/2 (" + bare + "): run quick [reference]: lstat " + bare + "/02-quick-reference-r1"},
		"no suite":    {[]string{one, t.TempDir()}, "holds no suite result (a suite's --out)"},
	} {
		out := filepath.Join(t.TempDir(), "merged")
		code, msg := run(t, append(append([]string{"suite", "merge"}, tc.dirs...), "--out", out, "--history", filepath.Join(t.TempDir(), "h"))...)
		assert.Equal(t, 2, code, "%s: %s", name, msg)
		assert.Contains(t, msg, tc.want, name)
		assert.NoDirExists(t, out, "%s: nothing created", name)
	}
	code, msg := run(t, "suite", "merge", one, two, "--out", whole)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "--out "+whole+" already holds a suite")
	// And the good pair merges.
	code, msg = run(t, "suite", "merge", one, two, "--out", filepath.Join(t.TempDir(), "merged"))
	assert.Equal(t, 0, code, msg)
}

// TestSuiteTinyShardedMerge is the real thing on the local substrate: the tiny suite (one run
// passing on the reference, one failing on se-endpoint-port) as two shards, one run each, then
// merged: exit 0 as the whole suite gives, the runs in the suite's order with their verdicts,
// junit.xml with both cases as expected, index.html linking the copied run directories, and one
// history line.
func TestSuiteTinyShardedMerge(t *testing.T) {
	prereq.Integration(t)
	require.NoError(t, local.Preflight())
	t.Setenv("MESHCHAOS_HOME", t.TempDir())
	tiny := "../../../examples/suites/tiny.yaml"
	var dirs []string
	for i := 1; i <= 2; i++ {
		out := filepath.Join(t.TempDir(), "shard")
		start := time.Now()
		code, msg := run(t, "suite", tiny, "--shard", suite.Shard{Index: i, Count: 2}.String(), "--out", out)
		t.Logf("shard %d/2 in %s:\n%s", i, time.Since(start).Round(time.Second), msg)
		require.Equal(t, 0, code, "each shard's one run gives its expected verdict")
		require.Len(t, readSuite(t, out).Runs, 1)
		dirs = append(dirs, out)
	}
	merged, history := filepath.Join(t.TempDir(), "merged"), t.TempDir()
	code, msg := run(t, "suite", "merge", dirs[1], dirs[0], "--out", merged, "--history", history)
	t.Log(msg)
	require.Equal(t, 0, code, msg)
	res := readSuite(t, merged)
	require.Len(t, res.Runs, 2)
	assert.Equal(t, []results.Verdict{results.VerdictPass, results.VerdictFail}, []results.Verdict{res.Runs[0].Verdict, res.Runs[1].Verdict})
	assert.Equal(t, []string{"reference", "reference:se-endpoint-port"}, []string{res.Runs[0].ControlPlane, res.Runs[1].ControlPlane})
	assert.True(t, res.OK())
	junit := normalizedFile(t, filepath.Join(merged, results.JUnitFile))
	assert.Contains(t, junit, `tests="2" failures="0" errors="0"`)
	page := normalizedFile(t, filepath.Join(merged, results.SuiteIndexFile))
	for _, r := range res.Runs {
		assert.Contains(t, page, `href="`+r.Dir+"/"+results.HTMLFile+`"`)
		assert.FileExists(t, filepath.Join(merged, r.Dir, results.HTMLFile))
	}
	nights, err := results.ReadHistory(history, "tiny", 10, &bytes.Buffer{})
	require.NoError(t, err)
	require.Len(t, nights, 1)
	assert.Equal(t, 2, nights[0].MergedShards)
}
