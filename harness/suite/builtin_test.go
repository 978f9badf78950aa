package suite

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

// The test-scale honesty file `make test` and CI run is the built-in honesty suite's entries at
// the both-ways tests' scale: neither drifts from the other.
func TestHonestyCIFileIsHonestyAtTestScale(t *testing.T) {
	s, err := Load("../../examples/suites/honesty-ci.yaml")
	require.NoError(t, err)
	want := honestyEntries(ciScale)
	require.Len(t, s.Entries, len(want))
	for i := range want {
		assert.Equal(t, want[i].Experiment, s.Entries[i].Experiment, "entry %d", i+1)
		assert.Equal(t, want[i].ControlPlane, s.Entries[i].ControlPlane, "entry %d", i+1)
		assert.ElementsMatch(t, want[i].Set, s.Entries[i].Set, "entry %d", i+1)
		assert.Equal(t, want[i].Expect, s.Entries[i].Expect, "entry %d", i+1)
	}
}

func TestHonestyCatchesEverySwitchAndPassesEveryExperiment(t *testing.T) {
	h, ok := Builtin("honesty")
	require.True(t, ok)
	passes := map[string]bool{}
	caught := map[string]bool{}
	for _, e := range h.Entries {
		if e.Expect == results.VerdictPass {
			assert.Equal(t, "reference", e.ControlPlane, "%s passes on the plain reference", e.Experiment)
			passes[e.Experiment] = true
		} else if e.ControlPlane != "reference" {
			caught[e.ControlPlane[len("reference:"):]] = true
		}
	}
	for _, x := range experimentOrder {
		assert.True(t, passes[x], "%s must pass somewhere", x)
	}
	for _, sws := range switches {
		for _, sw := range sws {
			assert.True(t, caught[sw], "switch %s must be caught", sw)
		}
	}
	n, ok := Builtin("nightly")
	require.True(t, ok)
	assert.Len(t, n.Entries, len(experimentOrder), "nightly runs every experiment once")
	c, ok := Builtin("capacity")
	require.True(t, ok)
	assert.Contains(t, c.Entries[0].Set, "memoryBudget=1Gi")
}
