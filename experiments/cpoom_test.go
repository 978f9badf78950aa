package experiments

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
)

func TestResolveParams(t *testing.T) {
	d, ok := Lookup("cp-oom-restart")
	require.True(t, ok)
	v, err := d.Resolve([]string{"rate=10", "cpMemoryLimit=1Gi"})
	require.NoError(t, err)
	assert.Equal(t, 10, v.Int("rate"))
	assert.Equal(t, int64(1<<30), v.Bytes("cpMemoryLimit"))
	assert.Equal(t, 60*time.Second, v.Duration("duration"))
	assert.Equal(t, "100m", v["cpCPULimit"])

	// Each bad value is refused with what is allowed.
	for bad, want := range map[string]string{
		"rate=0":             "rate=\"0\": want a whole number from 1 to 10000 rps",
		"rate=fast":          "want a whole number from 1 to 10000",
		"cpCPULimit=abc":     "cpCPULimit=\"abc\": want a quantity from 10m to 64",
		"duration=-1s":       "duration=\"-1s\": want a duration from 5s to 2h0m0s",
		"duration=1":         "want a duration",
		"cpMemoryLimit=lots": "want a quantity from 128Mi to 64Gi",
		"kubeProxyCPU=-1":    "want a number from 0.001 to 4 CPUs",
		"nodes=9":            "want a whole number from 1 to 8",
		"bogus=1":            "unknown parameter; known parameters: rate",
		"rate":               "use name=value",
		"hosts=5000":         "hosts=5000: at most serviceEntries (3000)",
		"steady=60s":         "must be shorter than duration",
		"cpMemoryLimit=":     "needs a memory limit",
	} {
		_, err := d.Resolve([]string{bad})
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), want, bad)
		}
	}
	for _, cp := range []string{"istiod", "reference:no-such-switch"} {
		_, err := subject.Parse(cp)
		assert.Error(t, err, cp)
	}
	ref, err := subject.Parse("reference:ungated,quadratic-scope")
	require.NoError(t, err)
	assert.Equal(t, "reference:ungated,quadratic-scope", ref.Name())
}

// TestCPOOMRestartBothWays is the harness's honesty test: at a small scale the experiment must
// pass against the sync-gated reference control plane and must catch the ungated one.
func TestCPOOMRestartBothWays(t *testing.T) { cpoomBothWays(t, newLocalRunner(t)) }

// TestCPOOMRestartBothWaysKind is the same on kind clusters: the verdicts do not depend on the
// substrate.
func TestCPOOMRestartBothWaysKind(t *testing.T) { cpoomBothWays(t, newKindRunner(t)) }

// TestCPOOMRestartBothWaysExisting is the same through the existing substrate: a local cluster
// used as someone else's, reached by its kubeconfig only, node chaos through the agent.
func TestCPOOMRestartBothWaysExisting(t *testing.T) { cpoomBothWays(t, newExistingRunner(t)) }

func cpoomBothWays(t *testing.T, l *localRunner) {
	sets := []string{"rate=100", "duration=40s", "steady=8s", "throttleWindow=20s", "serviceEntries=" + testServiceEntries}
	run := func(cp string) results.Summary {
		s, _ := l.run("cp-oom-restart", cp, sets, 10*time.Minute)
		return s
	}

	gated := run("reference")
	assert.Equal(t, results.VerdictPass, gated.Verdict, "the sync gate keeps the gateway serving: %+v", gated.Checks)
	assert.Zero(t, gated.Traffic.Errors)
	assert.GreaterOrEqual(t, gated.ControlPlaneStats.OOMKills, 1)

	ungated := run("reference:ungated")
	assert.Equal(t, results.VerdictFail, ungated.Verdict, "the experiment catches the ungated control plane: %+v", ungated.Checks)
	assert.GreaterOrEqual(t, ungated.ControlPlaneStats.OOMKills, 1)
	flagged := ungated.Traffic.ByFlag["NC"] + ungated.Traffic.ByFlag["NR"]
	assert.Positive(t, flagged, "errors carry NC/NR response flags: %v", ungated.Traffic.ByFlag)
}

// testServiceEntries is the default: with the default CPU limit it gives a restarted control
// plane a sync window of a couple of seconds on a 2-core machine.
const testServiceEntries = "3000"

// TestCPOOMRestartExternalReference runs the same experiment against the reference control
// plane deployed purely through its descriptor (examples/controlplanes/reference.yaml): the
// harness knows nothing of it but the descriptor, which names no ballast hook, so the OOM kill
// comes from the generic memory hog. The verdict must be the one --cp reference gets
// (TestCPOOMRestartBothWays): pass, with the kill and the restart proven.
func TestCPOOMRestartExternalReference(t *testing.T) {
	l := newLocalRunner(t)
	sets := []string{"rate=100", "duration=40s", "steady=8s", "throttleWindow=20s", "serviceEntries=" + testServiceEntries}
	s, _ := l.run("cp-oom-restart", "external:../examples/controlplanes/reference.yaml", sets, 10*time.Minute)
	assert.Equal(t, results.VerdictPass, s.Verdict, "the sync gate keeps the gateway serving: %+v", s.Checks)
	assert.Zero(t, s.Traffic.Errors)
	require.NotNil(t, s.ControlPlaneStats, "the descriptor's metrics were read")
	assert.GreaterOrEqual(t, s.ControlPlaneStats.OOMKills, 1)
	assert.GreaterOrEqual(t, s.ControlPlaneStats.Restarts, 1)
	require.NotNil(t, s.ControlPlaneStats.Pushes, "push counters were scraped through the descriptor's metric names")
	var ballast *results.Fault
	for i, f := range s.Faults {
		if f.Name == "memory-ballast/control-plane" {
			ballast = &s.Faults[i]
		}
	}
	require.NotNil(t, ballast, "faults: %+v", s.Faults)
	assert.True(t, ballast.Fallback, "no hook in the descriptor: the generic hog")
	assert.Contains(t, ballast.Implementation, "generic memory hog")
}
