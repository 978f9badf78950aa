package results

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// SuiteShard is what a shard's suite.json says of the share it ran (`meshchaos suite --shard
// I/N`): which share, and of which whole, so that `meshchaos suite merge` knows what it has.
type SuiteShard struct {
	// Index counts from 1; Count is how many shares the suite was split into.
	Index int `json:"index"`
	Count int `json:"count"`
	// Of is how many runs the whole suite makes; Plan is SuitePlanDigest of all of them.
	Of   int    `json:"of"`
	Plan string `json:"plan"`
}

// String is "I/N".
func (s *SuiteShard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// SuitePlanDigest fingerprints a suite's plan: every run's entry, repeat, experiment, control
// plane, parameters and expectation, in order (a run's outcome is not part of it). Shards with
// the same digest were cut from the same plan; the merged shards' runs must give it back.
func SuitePlanDigest(runs []SuiteRun) string {
	plan := make([]SuiteRun, len(runs))
	for i, r := range runs {
		// The identity alone: the outcome's fields stay zero.
		plan[i] = SuiteRun{Entry: r.Entry, Repeat: r.Repeat, Experiment: r.Experiment, ControlPlane: r.ControlPlane,
			Set: r.Set, Expect: r.Expect, ExpectFailing: r.ExpectFailing}
	}
	b, err := json.Marshal(plan)
	if err != nil {
		panic("results: encode a suite plan: " + err.Error()) // strings and ints only
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// ShardResult is one shard's suite.json and the directory it was read from.
type ShardResult struct {
	Dir    string
	Result *SuiteResult
}

// MergeShards combines the shards of one suite into the result the whole suite would have given
// on one machine: the same runs in the same order with the same verdicts, Planned the whole
// suite's. What cannot be the same is time: StartedAt is the earliest shard's start and
// FinishedAt the latest shard's end (the span the shards ran in, not the sum of their runs), and
// each run keeps its own seconds. MergedShards records that it is a merge.
//
// It refuses, naming every problem and the directories involved: a directory that is no shard
// (or already a merge), shards of different suites, plans, splits, harness builds or substrates,
// a shard given twice or missing, and a shard that was interrupted or did not finish (its
// missing runs would count as failures of the suite).
func MergeShards(shards []ShardResult) (*SuiteResult, error) {
	if len(shards) == 0 {
		return nil, fmt.Errorf("no shard to merge")
	}
	var problems []string
	var ref *ShardResult
	byIndex := map[int]string{}
	for i := range shards {
		sh := &shards[i]
		r := sh.Result
		switch {
		case r.Schema != SuiteSchema:
			problems = append(problems, fmt.Sprintf("%s: schema %q, not %q", sh.Dir, r.Schema, SuiteSchema))
			continue
		case r.Shard == nil && r.MergedShards > 0:
			problems = append(problems, fmt.Sprintf("%s: already a merged result (of %d shards), not a shard", sh.Dir, r.MergedShards))
			continue
		case r.Shard == nil:
			problems = append(problems, fmt.Sprintf("%s: not a shard: suite %s ran whole there (without --shard)", sh.Dir, r.Suite))
			continue
		}
		name := fmt.Sprintf("shard %s (%s)", r.Shard, sh.Dir)
		if r.Interrupted != nil {
			problems = append(problems, fmt.Sprintf("%s was %s: it gave no verdict; run that shard again", name, r.Interrupted))
		} else if len(r.Runs) != r.Planned {
			problems = append(problems, fmt.Sprintf("%s holds %d of its %d runs: it did not finish (killed?); run that shard again", name, len(r.Runs), r.Planned))
		}
		if ref == nil {
			ref = sh
		} else if p := shardMismatch(ref, sh); p != "" {
			problems = append(problems, p)
			continue
		}
		if other, dup := byIndex[r.Shard.Index]; dup {
			problems = append(problems, fmt.Sprintf("shard %s given twice: %s and %s", r.Shard, other, sh.Dir))
		}
		byIndex[r.Shard.Index] = sh.Dir
	}
	if ref == nil {
		return nil, refusal(problems)
	}
	n := ref.Result.Shard.Count
	var missing, given []string
	for i := 1; i <= n; i++ {
		if _, ok := byIndex[i]; ok {
			given = append(given, fmt.Sprintf("%d/%d", i, n))
		} else {
			missing = append(missing, fmt.Sprintf("%d/%d", i, n))
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("shard %s of suite %s missing (given: %s)", strings.Join(missing, ", "), ref.Result.Suite, strings.Join(given, ", ")))
	}
	if len(problems) > 0 {
		return nil, refusal(problems)
	}

	first := ref.Result
	m := &SuiteResult{Schema: SuiteSchema, Suite: first.Suite, Summary: first.Summary, Substrate: first.Substrate,
		StartedAt: first.StartedAt, FinishedAt: first.FinishedAt, Planned: first.Shard.Of,
		HarnessVersion: first.HarnessVersion, HarnessCommit: first.HarnessCommit, MergedShards: n}
	from := map[[2]int]string{}
	for _, sh := range shards {
		r := sh.Result
		m.StartedAt = earlier(m.StartedAt, r.StartedAt)
		if r.FinishedAt.After(m.FinishedAt) {
			m.FinishedAt = r.FinishedAt
		}
		for _, run := range r.Runs {
			k := [2]int{run.Entry, run.Repeat}
			if other, dup := from[k]; dup {
				problems = append(problems, fmt.Sprintf("entry %d repeat %d (%s) is in %s and in %s", run.Entry+1, run.Repeat, run.Key(), other, sh.Dir))
			}
			from[k] = sh.Dir
			m.Runs = append(m.Runs, run)
		}
	}
	// The whole suite makes its runs entry by entry, repeat by repeat.
	slices.SortStableFunc(m.Runs, func(a, b SuiteRun) int {
		return cmp.Or(cmp.Compare(a.Entry, b.Entry), cmp.Compare(a.Repeat, b.Repeat))
	})
	if got := SuitePlanDigest(m.Runs); len(problems) == 0 && got != first.Shard.Plan {
		problems = append(problems, fmt.Sprintf("the shards' %d runs are not the plan of suite %s they name (%d runs, plan %s; theirs %s): a suite.json edited by hand?",
			len(m.Runs), first.Suite, first.Shard.Of, first.Shard.Plan, got))
	}
	if len(problems) > 0 {
		return nil, refusal(problems)
	}
	return m, nil
}

// shardMismatch says how shard b cannot be merged with shard a ("" when it can).
func shardMismatch(a, b *ShardResult) string {
	ra, rb := a.Result, b.Result
	switch {
	case ra.Suite != rb.Suite:
		return fmt.Sprintf("shards of different suites: %s is suite %s, %s is suite %s", a.Dir, ra.Suite, b.Dir, rb.Suite)
	case ra.Shard.Count != rb.Shard.Count:
		return fmt.Sprintf("shards of different splits of suite %s: %s is shard %s, %s is shard %s", ra.Suite, a.Dir, ra.Shard, b.Dir, rb.Shard)
	case ra.Shard.Of != rb.Shard.Of || ra.Shard.Plan != rb.Shard.Plan:
		return fmt.Sprintf("shards of different plans of suite %s (the suite file, the parameter settings or the control planes differ): %s has %d runs, plan %s; %s has %d runs, plan %s",
			ra.Suite, a.Dir, ra.Shard.Of, ra.Shard.Plan, b.Dir, rb.Shard.Of, rb.Shard.Plan)
	case ra.HarnessVersion != rb.HarnessVersion || ra.HarnessCommit != rb.HarnessCommit:
		return fmt.Sprintf("shards of different harness versions: %s ran meshchaos %s, %s ran meshchaos %s (one build must measure the whole suite)",
			a.Dir, harnessName(ra), b.Dir, harnessName(rb))
	case ra.Substrate != rb.Substrate:
		return fmt.Sprintf("shards on different substrates: %s ran on %s, %s on %s", a.Dir, ra.Substrate, b.Dir, rb.Substrate)
	}
	return ""
}

// harnessName is the build as a refusal names it: version and commit.
func harnessName(r *SuiteResult) string {
	v := cmp.Or(r.HarnessVersion, "(unknown)")
	if r.HarnessCommit != "" {
		v += " (" + r.HarnessCommit + ")"
	}
	return v
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// refusal is the merge's error: every problem on a line of its own.
func refusal(problems []string) error {
	return fmt.Errorf("refusing to merge:\n  %s", strings.Join(problems, "\n  "))
}
