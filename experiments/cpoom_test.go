package experiments

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/internal/crds"
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
	assert.Equal(t, "100m", v.String("cpCPULimit"))

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
	for _, cp := range []string{"linkerd", "istiod@no-such-pin", "reference:no-such-switch"} {
		_, err := subject.Parse(cp)
		assert.Error(t, err, cp)
	}
	ref, err := subject.Parse("reference:ungated,quadratic-scope")
	require.NoError(t, err)
	assert.Equal(t, "reference:ungated,quadratic-scope", ref.Name())
}

// cp-oom-restart's cases (harness/suite) run in TestBothWays on local clusters; the kind and
// existing substrates run the same cases in make test-nightly: the verdicts do not depend on
// the substrate.

func init() { caseAssertions["cp-oom-restart"] = assertCPOOMRestart }

// assertCPOOMRestart: the gated control plane keeps the gateway serving through a real OOM
// kill; the ungated one's errors carry the NC/NR flags of an emptied config.
func assertCPOOMRestart(t *testing.T, c suite.Case, s results.Summary, _ string) {
	require.NotNil(t, s.ControlPlaneStats)
	assert.GreaterOrEqual(t, s.ControlPlaneStats.OOMKills, 1, "the kernel killed the control plane")
	if slices.Contains(c.Variant, "dataPlane="+dataPlaneGRPC) {
		assertCPOOMRestartGRPC(t, c, s)
		return
	}
	if c.Expect.Verdict == results.VerdictPass {
		assert.Zero(t, s.Traffic.Errors)
		return
	}
	flagged := s.Traffic.ByFlag["NC"] + s.Traffic.ByFlag["NR"]
	assert.Positive(t, flagged, "errors carry NC/NR response flags: %v", s.Traffic.ByFlag)
}

// assertCPOOMRestartGRPC: with proxyless gRPC clients as the data plane no gateway traffic
// runs; the clients' RPCs all succeed through a gated restart, and an ungated one leaves
// channels without a usable config, their RPCs failing with a status other than OK.
func assertCPOOMRestartGRPC(t *testing.T, c suite.Case, s results.Summary) {
	assert.Nil(t, s.Traffic, "no HTTP traffic: the gRPC clients are the data plane")
	g := s.Attacks[observe.GRPCAttack]
	require.NotNil(t, g, "the gRPC clients' RPCs were measured")
	require.NotNil(t, g.NoConfigSeconds)
	assert.Positive(t, g.ByCode["OK"])
	t.Logf("gRPC clients: %d of %d RPCs failed, by code %v, longest time without config %.2f s", g.Errors, g.Requests, g.ByCode, *g.NoConfigSeconds)
	if c.Expect.Verdict == results.VerdictPass {
		assert.Zero(t, g.Errors)
		return
	}
	assert.Positive(t, g.Errors)
	assert.Positive(t, *g.NoConfigSeconds)
}

// TestCPOOMRestartBothWaysKind runs cp-oom-restart's cases on kind clusters.
func TestCPOOMRestartBothWaysKind(t *testing.T) {
	runCases(t, newKindRunner(t), referenceCasesOf("cp-oom-restart"), false, false) // one kind cluster at a time
}

// TestCPOOMRestartBothWaysExisting runs them through the existing substrate: a local cluster
// used as someone else's, reached by its kubeconfig only, node chaos through the agent.
func TestCPOOMRestartBothWaysExisting(t *testing.T) {
	runCases(t, newExistingRunner(t), referenceCasesOf("cp-oom-restart"), false, false) // one cluster, one run at a time
}

// TestCPOOMRestartExternalReference runs cp-oom-restart's cases against the reference control
// plane deployed purely through its descriptor (examples/controlplanes/reference.yaml): the
// harness knows nothing of it but the descriptor, which names no ballast hook, so the OOM kill
// comes from the generic memory hog. The gated build must pass, with the kill and the restart
// proven and the push counters read through the descriptor's names; the ungated build, rendered
// as `meshchaos controlplane manifests --regress ungated` does and deployed through a copy of
// the same descriptor, must fail on the checks that name incident 1.
func TestCPOOMRestartExternalReference(t *testing.T) {
	l := newLocalRunner(t)
	ungated := ungatedDescriptor(t, "../examples/controlplanes/reference.yaml")
	for _, c := range suite.BothWays() {
		if !referenceCasesOf("cp-oom-restart")(c) || c.Nightly {
			continue
		}
		cp := "external:../examples/controlplanes/reference.yaml"
		if c.ControlPlane == "reference:ungated" {
			cp = "external:" + ungated
		}
		t.Run(cp, func(t *testing.T) {
			s, _ := l.forTest(t).run(c.Experiment, cp, c.Entry(true).Set, caseTimeout)
			if miss := c.Expect.Judge(s.Verdict, s.Checks); miss != "" {
				t.Errorf("%s through its descriptor: %s", c.Name(), miss)
			}
			assertCPOOMRestart(t, c, s, "")
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
		})
	}
}

// ungatedDescriptor writes a copy of the descriptor at path whose manifests are the ungated
// reference's, and returns the copy's path.
func ungatedDescriptor(t *testing.T, path string) string {
	dir := t.TempDir()
	y, err := manifests.ControlPlane(manifests.Params{Regress: []string{string(regress.Ungated)}})
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "reference"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "reference", "controlplane.yaml"), y, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "reference", "crds.yaml"), crds.Istio, 0o644))
	desc, err := os.ReadFile(path)
	require.NoError(t, err)
	out := filepath.Join(dir, "reference-ungated.yaml")
	require.NoError(t, os.WriteFile(out, desc, 0o644))
	return out
}
