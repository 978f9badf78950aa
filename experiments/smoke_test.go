package experiments

import (
	"testing"

	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/results"
)

// existingSubstrateSmoke is make test's run through the existing substrate (the both-ways
// cases there are nightly), a subtest of TestBothWays in its pool: serviceentry-scale's passing
// case on a local cluster reached by its kubeconfig only, which the run must leave as it found
// it.
func existingSubstrateSmoke(t *testing.T) {
	t.Run("existing-substrate/serviceentry-scale/reference", func(t *testing.T) { smokeExisting(t) })
}

func smokeExisting(t *testing.T) {
	l := newExistingRunner(t)
	for _, c := range suite.BothWays() {
		if c.Experiment == "serviceentry-scale" && c.ControlPlane == "reference" && c.Expect.Verdict == results.VerdictPass {
			e := c.Entry(true)
			s, dir := l.run(e.Experiment, e.ControlPlane, e.Set, caseTimeout)
			if miss := c.Expect.Judge(s.Verdict, s.Checks); miss != "" {
				t.Errorf("%s through the existing substrate: %s", c.Name(), miss)
			}
			assertServiceEntryScale(t, c, s, dir)
			return
		}
	}
	t.Fatal("no passing serviceentry-scale case")
}
