package experiments

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/semaphore"

	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
)

// The both-ways proof of every experiment is one table, harness/suite's BothWays (the honesty
// suites are built from it too): each case is an experiment on a control plane with the
// parameters of a side (a switch, a mode, an incident's configuration), and what it must give
// (pass, or fail on the checks that name the bug, and no other). TestBothWays runs every case
// but the nightly ones on local clusters, TestBothWaysNightly the nightly ones; what each
// experiment's runs show beyond their checks is asserted by its caseAssertions.

// caseAssertions are each experiment's assertions on a run of one of its cases, beyond the
// expectation (the experiment's _test.go file registers its own).
var caseAssertions = map[string]func(t *testing.T, c suite.Case, s results.Summary, dir string){}

// caseTimeout bounds one case's run.
const caseTimeout = 10 * time.Minute

// ran records the cases run to the end in this process (see TestMain).
var ran sync.Map

// TestBothWays is the harness's honesty at test scale: every experiment passes on the
// reference (or its mitigated configuration) and fails on each of its regression switches,
// incident configurations and modes, on the checks that name them.
// The existing substrate's smoke run shares the pool (one slot, ~45 s).
func TestBothWays(t *testing.T) {
	runCases(t, newLocalRunner(t), nil, false, true, job{name: "existing substrate smoke", seconds: 45, run: existingSubstrateSmoke})
}

// TestBothWaysNightly runs the slower cases (more modes, the soak) that make test-nightly runs.
func TestBothWaysNightly(t *testing.T) { runCases(t, newLocalRunner(t), nil, true, true) }

// referenceCasesOf accepts experiment's cases on the reference (its switches included).
func referenceCasesOf(experiment string) func(suite.Case) bool {
	return func(c suite.Case) bool {
		return c.Experiment == experiment && strings.HasPrefix(c.ControlPlane, "reference")
	}
}

// runSlots bounds the cases that run at once: two (each on its own cluster), a case marked
// Alone taking both.
const runSlots = 2

// caseSeconds is roughly how long a case of each experiment runs at test scale beside another
// (2026-11-26, the 2-core CI machine; an istiod case ~15 s more, sidecar-startup's mode=all
// ~40 s more). Only the order cases start in depends on it.
var caseSeconds = map[string]int{"cp-oom-restart": 66, "endpoint-flap": 65, "cp-cpu-starvation": 57,
	"sidecar-startup": 29, "serviceentry-scale": 25, "soak": 420}

func estimate(c suite.Case) int {
	s := caseSeconds[c.Experiment]
	if !strings.HasPrefix(c.ControlPlane, "reference") {
		s += 15
	}
	if slices.Contains(c.Variant, "mode=all") {
		s += 40
	}
	return s
}

// job is one run of the pool: a both-ways case, or another test that brings up a cluster.
type job struct {
	name    string
	alone   bool
	seconds int
	run     func(t *testing.T)
}

// runCases runs the cases of the tier that only accepts (every case: nil) on l's substrate, and
// extra, up to runSlots at a time when parallel. Parallel, runSlots workers take the jobs in
// order: those that run alone first (both slots are free at the start), then the longest first,
// so that the last minutes are not one case on one slot (left to go test's order, 490 s where
// 430 pack).
func runCases(t *testing.T, l *localRunner, only func(suite.Case) bool, nightly, parallel bool, extra ...job) {
	jobs := extra
	for _, c := range suite.BothWays() {
		if c.Nightly == nightly && (only == nil || only(c)) {
			jobs = append(jobs, job{name: c.Name(), alone: c.Alone, seconds: estimate(c), run: func(t *testing.T) { runCase(t, l, c) }})
		}
	}
	if !parallel {
		for _, j := range jobs {
			j.run(t)
		}
		return
	}
	sort.SliceStable(jobs, func(i, k int) bool {
		if jobs[i].alone != jobs[k].alone {
			return jobs[i].alone
		}
		return jobs[i].seconds > jobs[k].seconds
	})
	next := make(chan job, len(jobs))
	for _, j := range jobs {
		next <- j
	}
	close(next)
	slots := semaphore.NewWeighted(runSlots)
	var wg sync.WaitGroup
	for range runSlots {
		wg.Go(func() {
			for j := range next {
				need := int64(1)
				if j.alone {
					need = runSlots
				}
				if err := slots.Acquire(context.Background(), need); err != nil {
					panic(err) // a background context is never done
				}
				j.run(t)
				slots.Release(need)
			}
		})
	}
	wg.Wait()
}

// runCase runs one case as a subtest and judges it.
func runCase(t *testing.T, l *localRunner, c suite.Case) {
	t.Run(strings.ReplaceAll(c.Name(), " ", "/"), func(t *testing.T) {
		e := c.Entry(true)
		s, dir := l.forTest(t).run(e.Experiment, e.ControlPlane, e.Set, caseTimeout)
		if miss := c.Expect.Judge(s.Verdict, s.Checks); miss != "" {
			t.Errorf("%s: %s", c.Name(), miss)
		}
		if a := caseAssertions[c.Experiment]; a != nil {
			a(t, c, s, dir)
		}
		if !t.Failed() {
			ran.Store(c.Name(), true)
		}
	})
}

// TestMain runs the tests, then, when the whole package ran with the integration tests on (no
// -run: `make test`'s tier), fails unless every tier-1 case ran and met its expectation: a
// case cannot drop out of make test by a skip, a filter or a deleted test.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && os.Getenv(prereq.SkipIntegration) != "1" {
		var missing []string
		for _, c := range suite.BothWays() {
			if _, ok := ran.Load(c.Name()); !ok && !c.Nightly {
				missing = append(missing, c.Name())
			}
		}
		if len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: %d both-ways cases of make test did not run to the end as expected (TestBothWays skipped, filtered or deleted?):\n  %s\n",
				len(missing), strings.Join(missing, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}

// modeParams are the parameters whose every value is a way an experiment runs that needs its
// own proof. A flap kind is orthogonal to the bug: each must pass on the reference and fail on
// the switch. A start mode is itself the configuration under test (none is the incident, the
// others its fixes): each must be run where its checks are judged ("all" runs every value).
var modeParams = map[string]struct {
	param    string
	bothWays bool
}{"sidecar-startup": {"mode", false}, "endpoint-flap": {"flap", true}}

// TestBothWaysCoverEverything holds the table against the code: every regression switch fails
// some case, every experiment of the catalog has a passing and a failing case, every value of a
// mode parameter is run both ways, and every case resolves. Adding a switch, an experiment or a
// mode without its cases fails here.
func TestBothWaysCoverEverything(t *testing.T) {
	cases := suite.BothWays()
	caught := map[regress.Switch]bool{}
	sides := map[string]map[results.Verdict]bool{}
	for _, c := range cases {
		d, ok := Lookup(c.Experiment)
		require.True(t, ok, "%s: no such experiment", c.Name())
		_, err := d.Resolve(c.Entry(true).Set)
		require.NoError(t, err, c.Name())
		if sides[c.Experiment] == nil {
			sides[c.Experiment] = map[results.Verdict]bool{}
		}
		sides[c.Experiment][c.Expect.Verdict] = true
		if sw, ok := strings.CutPrefix(c.ControlPlane, "reference:"); ok && c.Expect.Verdict == results.VerdictFail {
			for _, s := range strings.Split(sw, ",") {
				caught[regress.Switch(s)] = true
			}
		}
	}
	for _, sw := range regress.All {
		assert.True(t, caught[sw], "regression switch %s fails no both-ways case (harness/suite's bothWays)", sw)
	}
	for _, d := range List() {
		assert.True(t, sides[d.Name][results.VerdictPass], "experiment %s has no passing both-ways case", d.Name)
		assert.True(t, sides[d.Name][results.VerdictFail], "experiment %s has no failing both-ways case", d.Name)
	}
	for x, m := range modeParams {
		d, _ := Lookup(x)
		param, ok := d.Params.Lookup(m.param)
		require.True(t, ok, "%s has no parameter %s", x, m.param)
		for _, mode := range param.Values {
			if mode == "all" {
				continue
			}
			if !m.bothWays {
				assert.True(t, slices.ContainsFunc(cases, func(c suite.Case) bool {
					return c.Experiment == x && runsMode(d.Params, c, m.param, mode)
				}), "%s %s=%s is run by no case", x, m.param, mode)
				continue
			}
			for _, want := range []results.Verdict{results.VerdictPass, results.VerdictFail} {
				assert.True(t, slices.ContainsFunc(cases, func(c suite.Case) bool {
					return c.Experiment == x && c.Expect.Verdict == want && runsMode(d.Params, c, m.param, mode)
				}), "%s %s=%s has no case that must %s", x, m.param, mode, want)
			}
		}
	}
}

// runsMode reports whether case c runs parameter p's value mode (given, the default, or "all").
func runsMode(ps params.Set, c suite.Case, p, mode string) bool {
	v := ""
	for _, kv := range c.Variant {
		if name, val, _ := strings.Cut(kv, "="); name == p {
			v = val
		}
	}
	if v == "" {
		param, _ := ps.Lookup(p)
		v = param.Default
	}
	return v == mode || v == "all"
}
