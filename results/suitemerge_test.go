package results

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mergePlan is a suite of five runs: entry 0 once, entry 1 three times, entry 2 once.
func mergePlan() []SuiteRun {
	var plan []SuiteRun
	for e, repeats := range []int{1, 3, 1} {
		for r := 1; r <= repeats; r++ {
			plan = append(plan, SuiteRun{Entry: e, Repeat: r, Experiment: fmt.Sprintf("x%d", e), ControlPlane: "reference",
				Expect: VerdictPass, Verdict: VerdictPass, Dir: fmt.Sprintf("%02d-x%d-r%d", e+1, e, r), Seconds: float64(10 * (e + r))})
		}
	}
	return plan
}

// shardsOf deals plan round-robin into n shards (as suite.Shard does), each started a minute
// after the one before.
func shardsOf(plan []SuiteRun, n int) []ShardResult {
	t0 := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	digest := SuitePlanDigest(plan)
	out := make([]ShardResult, n)
	for i := range n {
		r := &SuiteResult{Schema: SuiteSchema, Suite: "mine", Substrate: "local", HarnessVersion: "v1", HarnessCommit: "abc",
			StartedAt: t0.Add(time.Duration(i) * time.Minute), FinishedAt: t0.Add(time.Duration(i+5) * time.Minute),
			Shard: &SuiteShard{Index: i + 1, Count: n, Of: len(plan), Plan: digest}}
		for k, run := range plan {
			if k%n == i {
				r.Runs = append(r.Runs, run)
			}
		}
		r.Planned = len(r.Runs)
		out[i] = ShardResult{Dir: fmt.Sprintf("shard%d", i+1), Result: r}
	}
	return out
}

func TestMergeShardsGivesTheWholeSuite(t *testing.T) {
	plan := mergePlan()
	for n := 1; n <= 6; n++ {
		shards := shardsOf(plan, n)
		// Given in any order.
		for i, j := 0, len(shards)-1; i < j; i, j = i+1, j-1 {
			shards[i], shards[j] = shards[j], shards[i]
		}
		m, err := MergeShards(shards)
		require.NoError(t, err, "n=%d", n)
		assert.Equal(t, plan, m.Runs, "n=%d: the runs in the whole suite's order", n)
		assert.Equal(t, len(plan), m.Planned)
		assert.Equal(t, n, m.MergedShards)
		assert.Nil(t, m.Shard)
		assert.Equal(t, []string{"mine", "local", "v1", "abc"}, []string{m.Suite, m.Substrate, m.HarnessVersion, m.HarnessCommit})
		assert.Equal(t, time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC), m.StartedAt, "the first shard's start")
		assert.Equal(t, time.Date(2026, 11, 26, 2, n+4, 0, 0, time.UTC), m.FinishedAt, "the last shard's end")
		assert.True(t, m.OK())
	}
}

// TestMergeShardsRefuses: every reason to refuse is named with the directories involved.
func TestMergeShardsRefuses(t *testing.T) {
	plan := mergePlan()
	for name, tc := range map[string]struct {
		change func([]ShardResult) []ShardResult
		want   []string
	}{
		"a shard missing": {func(s []ShardResult) []ShardResult { return s[:2] }, []string{"shard 3/3 of suite mine missing (given: 1/3, 2/3)"}},
		"a shard twice": {func(s []ShardResult) []ShardResult { return append(s, ShardResult{Dir: "again", Result: s[0].Result}) },
			[]string{"shard 1/3 given twice: shard1 and again"}},
		"another suite": {func(s []ShardResult) []ShardResult { s[1].Result.Suite = "theirs"; return s },
			[]string{"shards of different suites: shard1 is suite mine, shard2 is suite theirs"}},
		"another plan": {func(s []ShardResult) []ShardResult { s[2].Result.Shard.Plan = "sha256:0"; return s },
			[]string{"shards of different plans of suite mine (the suite file, the parameter settings or the control planes differ): shard1 has 5 runs, plan sha256:", "shard3 has 5 runs, plan sha256:0"}},
		"another split": {func(s []ShardResult) []ShardResult { s[1].Result.Shard.Count = 2; return s },
			[]string{"shards of different splits of suite mine: shard1 is shard 1/3, shard2 is shard 2/2"}},
		"another build": {func(s []ShardResult) []ShardResult { s[1].Result.HarnessVersion = "v2"; return s },
			[]string{"shards of different harness versions: shard1 ran meshchaos v1 (abc), shard2 ran meshchaos v2 (abc)"}},
		"another commit": {func(s []ShardResult) []ShardResult { s[2].Result.HarnessCommit = "def"; return s },
			[]string{"shard3 ran meshchaos v1 (def)"}},
		"another substrate": {func(s []ShardResult) []ShardResult { s[1].Result.Substrate = "kind"; return s },
			[]string{"shards on different substrates: shard1 ran on local, shard2 on kind"}},
		"an interrupted shard": {func(s []ShardResult) []ShardResult {
			r := s[1].Result
			r.Runs = r.Runs[:1]
			r.Interrupted = &SuiteInterruption{Interruption: Interruption{Signal: "terminated", Phase: "chaos"}, Run: 2, Runs: 2}
			return s
		}, []string{"shard 2/3 (shard2) was interrupted by SIGTERM during run 2/2 (phase chaos): it gave no verdict; run that shard again"}},
		"an unfinished shard": {func(s []ShardResult) []ShardResult { s[0].Result.Runs = s[0].Result.Runs[:1]; return s },
			[]string{"shard 1/3 (shard1) holds 1 of its 2 runs: it did not finish (killed?)"}},
		"a whole suite": {func(s []ShardResult) []ShardResult { s[0].Result.Shard = nil; return s },
			[]string{"shard1: not a shard: suite mine ran whole there (without --shard)", "shard 1/3 of suite mine missing"}},
		"a merged result": {func(s []ShardResult) []ShardResult { s[0].Result.Shard, s[0].Result.MergedShards = nil, 3; return s },
			[]string{"shard1: already a merged result (of 3 shards), not a shard"}},
		"another schema": {func(s []ShardResult) []ShardResult { s[0].Result.Schema = "meshchaos-suite/v0"; return s },
			[]string{`shard1: schema "meshchaos-suite/v0", not "meshchaos-suite/v1"`}},
		"a run edited into another shard": {func(s []ShardResult) []ShardResult {
			s[0].Result.Runs[1] = s[1].Result.Runs[0]
			return s
		}, []string{"entry 2 repeat 1 (x1 [reference]) is in shard1 and in shard2"}},
		"a run edited": {func(s []ShardResult) []ShardResult { s[0].Result.Runs[0].ControlPlane = "istiod"; return s },
			[]string{"the shards' 5 runs are not the plan of suite mine they name (5 runs, plan sha256:"}},
	} {
		_, err := MergeShards(tc.change(shardsOf(plan, 3)))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "refusing to merge:", name)
		for _, w := range tc.want {
			assert.Contains(t, err.Error(), w, name)
		}
	}
	_, err := MergeShards(nil)
	assert.ErrorContains(t, err, "no shard to merge")
}
