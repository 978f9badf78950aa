package suite

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

var update = flag.Bool("update", false, "rewrite examples/suites/honesty-ci.yaml from the both-ways cases")

const honestyCIFile = "../../examples/suites/honesty-ci.yaml"

// The test-scale honesty file is the built-in honesty suite's entries at the both-ways cases'
// test scale: neither drifts from the other (go test ./harness/suite -run HonestyCI -update
// rewrites it).
func TestHonestyCIFileIsHonestyAtTestScale(t *testing.T) {
	if *update {
		writeHonestyCI(t)
	}
	s, err := Load(honestyCIFile)
	require.NoError(t, err)
	want := honestyEntries(true)
	require.Len(t, s.Entries, len(want))
	for i := range want {
		assert.Equal(t, want[i].Experiment, s.Entries[i].Experiment, "entry %d", i+1)
		assert.Equal(t, want[i].ControlPlane, s.Entries[i].ControlPlane, "entry %d", i+1)
		assert.ElementsMatch(t, want[i].Set, s.Entries[i].Set, "entry %d", i+1)
		assert.Equal(t, want[i].Expectation(), s.Entries[i].Expectation(), "entry %d", i+1)
	}
}

// Every case is valid, every fail names the checks that must fail, and the suites built from the
// cases keep them.
func TestCasesNameTheirFailingChecks(t *testing.T) {
	for _, c := range BothWays() {
		require.NoError(t, c.Expect.Validate(), c.Name())
		if c.Expect.Verdict == results.VerdictFail {
			assert.NotEmpty(t, c.Expect.Failing, "%s: a fail names the checks that must fail", c.Name())
		}
		assert.NotNil(t, TestScale(c.Experiment), "%s: a test scale", c.Name())
	}
	h, ok := Builtin("honesty")
	require.True(t, ok)
	for _, e := range h.Entries {
		if e.Expect == results.VerdictFail {
			assert.NotEmpty(t, e.Failing, "%s %s", e.Experiment, e.ControlPlane)
		}
	}
	n, ok := Builtin("nightly")
	require.True(t, ok)
	assert.Len(t, n.Entries, len(experimentOrder), "nightly runs every experiment once")
	for _, e := range n.Entries {
		assert.Equal(t, results.VerdictPass, e.Expectation().Verdict)
	}
	c, ok := Builtin("capacity")
	require.True(t, ok)
	assert.Contains(t, c.Entries[0].Set, "memoryBudget=1Gi")
}

func writeHonestyCI(t *testing.T) {
	entries := honestyEntries(true)
	var b strings.Builder
	fmt.Fprintf(&b, `# The honesty suite at the scale of the experiments' both-ways tests (harness/suite's cases,
# which experiments/ runs in make test): every experiment passes on the reference control plane
# (or its mitigated configuration) and fails on each of its regression switches (or its
# incident's configuration), on the checks that name the bug. %d runs, about 15 minutes on a
# 2-core machine. Generated: go test ./harness/suite -run HonestyCI -update
#   meshchaos suite examples/suites/honesty-ci.yaml
name: honesty-ci
summary: every experiment both ways at test scale (reference passes, each switch or incident configuration fails on its checks)
entries:
`, len(entries))
	quote := func(ss []string) string {
		q := make([]string, len(ss))
		for i, s := range ss {
			q[i] = fmt.Sprintf("%q", s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	for _, e := range entries {
		fmt.Fprintf(&b, "- {experiment: %s, controlPlane: %q, expect: %s, set: %s", e.Experiment, e.ControlPlane, e.Expectation().Verdict, quote(e.Set))
		if len(e.Failing) > 0 {
			fmt.Fprintf(&b, ", failing: %s", quote(e.Failing))
		}
		b.WriteString("}\n")
	}
	require.NoError(t, os.WriteFile(honestyCIFile, []byte(b.String()), 0o644))
}
