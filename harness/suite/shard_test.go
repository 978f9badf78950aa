package suite

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

// TestShardsPartitionEveryRun: for every split into n shares of a suite of any size, each run
// falls to exactly one share, and the shares differ by at most one run.
func TestShardsPartitionEveryRun(t *testing.T) {
	for n := 1; n <= 7; n++ {
		for runs := 0; runs <= 25; runs++ {
			owners := make([]int, runs)
			sizes := make([]int, n)
			for i := 1; i <= n; i++ {
				sh, err := ParseShard(Shard{Index: i, Count: n}.String())
				require.NoError(t, err)
				for k := range runs {
					if sh.Has(k) {
						owners[k]++
						sizes[i-1]++
					}
				}
			}
			for k, o := range owners {
				assert.Equal(t, 1, o, "n=%d runs=%d: run %d in %d shares", n, runs, k, o)
			}
			assert.LessOrEqual(t, slices.Max(sizes)-slices.Min(sizes), 1, "n=%d runs=%d: sizes %v", n, runs, sizes)
		}
	}
	assert.True(t, Shard{}.Has(3), "the whole suite has every run")
	assert.Equal(t, "", Shard{}.String())
}

func TestParseShardRefusesBadValues(t *testing.T) {
	sh, err := ParseShard("2/3")
	require.NoError(t, err)
	assert.Equal(t, Shard{Index: 2, Count: 3}, sh)
	for in, want := range map[string]string{
		"":       "want I/N",
		"2":      "want I/N",
		"a/3":    "want I/N",
		"1/b":    "want I/N",
		"1/2/3":  "want I/N",
		"0/3":    "I must be from 1 to N=3",
		"4/3":    "I must be from 1 to N=3",
		"-1/3":   "I must be from 1 to N=3",
		"1/0":    "N (how many shares) must be from 1 to 1000",
		"1/1001": "N (how many shares) must be from 1 to 1000",
	} {
		_, err := ParseShard(in)
		assert.ErrorContains(t, err, want, "%q", in)
		assert.ErrorContains(t, err, fmt.Sprintf("shard %q: ", in), "%q", in)
	}
}

// TestShardRecordNamesThePlan: shards of one plan carry the same digest; another parameter,
// control plane, expectation or order is another plan.
func TestShardRecordNamesThePlan(t *testing.T) {
	plan := []results.SuiteRun{
		{Entry: 0, Repeat: 1, Experiment: "endpoint-flap", ControlPlane: "reference", Expect: results.VerdictPass},
		{Entry: 1, Repeat: 1, Experiment: "cp-oom-restart", ControlPlane: "reference:ungated", Set: []string{"rate=50"}, Expect: results.VerdictFail, ExpectFailing: []string{"error rate"}},
	}
	a, b := Shard{Index: 1, Count: 2}.Record(plan), Shard{Index: 2, Count: 2}.Record(plan)
	assert.Equal(t, a.Plan, b.Plan)
	assert.Equal(t, 2, a.Of)
	assert.Equal(t, "1/2", a.String())
	assert.Nil(t, Shard{}.Record(plan), "a whole suite is no shard")

	// The outcome is not the plan: a verdict, a failed check or the time change nothing.
	ran := append([]results.SuiteRun{}, plan...)
	ran[0].Verdict, ran[0].Seconds, ran[0].Failed = results.VerdictFail, 12, []string{"x"}
	assert.Equal(t, a.Plan, results.SuitePlanDigest(ran))

	for name, change := range map[string]func(p []results.SuiteRun){
		"parameter":     func(p []results.SuiteRun) { p[1].Set = []string{"rate=60"} },
		"control plane": func(p []results.SuiteRun) { p[0].ControlPlane = "istiod" },
		"expectation":   func(p []results.SuiteRun) { p[1].ExpectFailing = nil },
		"order":         func(p []results.SuiteRun) { p[0], p[1] = p[1], p[0] },
		"repeat":        func(p []results.SuiteRun) { p[1].Repeat = 2 },
	} {
		other := append([]results.SuiteRun{}, plan...)
		change(other)
		assert.NotEqual(t, a.Plan, results.SuitePlanDigest(other), name)
	}
}
