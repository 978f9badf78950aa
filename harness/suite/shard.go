package suite

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/meshchaos/meshchaos/results"
)

// Shard is one of Count shares of a suite's runs (`meshchaos suite --shard Index/Count`), so that
// Count machines run one suite between them and `meshchaos suite merge` combines their results.
// The zero value is the whole suite.
type Shard struct {
	// Index counts from 1; Count is how many shares there are (0: unsharded).
	Index, Count int
}

// MaxShards bounds Count: more shares than that is a typo, not a CI fleet.
const MaxShards = 1000

// ParseShard reads "I/N": share I of N, 1 ≤ I ≤ N ≤ MaxShards.
func ParseShard(s string) (Shard, error) {
	i, n, ok := strings.Cut(s, "/")
	index, ierr := strconv.Atoi(strings.TrimSpace(i))
	count, nerr := strconv.Atoi(strings.TrimSpace(n))
	if !ok || ierr != nil || nerr != nil {
		return Shard{}, fmt.Errorf("shard %q: want I/N, share I of N (e.g. 1/3)", s)
	}
	if count < 1 || count > MaxShards {
		return Shard{}, fmt.Errorf("shard %q: N (how many shares) must be from 1 to %d", s, MaxShards)
	}
	if index < 1 || index > count {
		return Shard{}, fmt.Errorf("shard %q: I must be from 1 to N=%d (shares count from 1)", s, count)
	}
	return Shard{Index: index, Count: count}, nil
}

// Sharded reports whether sh is a share rather than the whole suite.
func (sh Shard) Sharded() bool { return sh.Count > 0 }

// String is "I/N", or "" for the whole suite.
func (sh Shard) String() string {
	if !sh.Sharded() {
		return ""
	}
	return fmt.Sprintf("%d/%d", sh.Index, sh.Count)
}

// Has reports whether the suite's run k (counted from 0 in the order the whole suite makes its
// runs: entry by entry, repeat by repeat) falls to this share. The runs are dealt round-robin: it
// needs nothing but the suite and its flags, so every machine computes the same split, every run
// lands in exactly one share, the shares differ by at most one run, and an entry's repeats
// spread over the machines (their timing differences then show as the spread of one entry rather
// than as one machine against another).
func (sh Shard) Has(k int) bool {
	if !sh.Sharded() {
		return true
	}
	return k%sh.Count == sh.Index-1
}

// Record is what the share's suite.json says of it: plan is every run of the whole suite in its
// order (identity only: entry, repeat, experiment, control plane, parameters, expectation), from
// which the merge learns that shards belong to one suite. nil for the whole suite.
func (sh Shard) Record(plan []results.SuiteRun) *results.SuiteShard {
	if !sh.Sharded() {
		return nil
	}
	return &results.SuiteShard{Index: sh.Index, Count: sh.Count, Of: len(plan), Plan: results.SuitePlanDigest(plan)}
}
