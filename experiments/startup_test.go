package experiments

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

func TestSidecarStartupParams(t *testing.T) {
	d, ok := Lookup("sidecar-startup")
	require.True(t, ok)
	v, err := d.Resolve(nil)
	require.NoError(t, err)
	assert.Equal(t, "all", v["mode"])
	assert.Equal(t, 20, v.Int("replicas"))
	assert.Equal(t, []string{"none", "hold", "native", "resilient"}, modesOf(v))
	for bad, want := range map[string]string{
		"mode=later":            "mode=\"later\"",
		"replicas=0":            "want a whole number from 1 to 500",
		"retryMaxInterval=10ms": "at least retryInterval",
	} {
		_, err := d.Resolve([]string{bad})
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), want, bad)
		}
	}
	// A mode that was never measured is an error, never a pass.
	for _, c := range startupChecks(v) {
		_, err := c(&results.Summary{})
		assert.ErrorContains(t, err, "was not measured")
	}
}

// TestSidecarStartupBothWays: the app started before its sidecar's configuration (mode none,
// the incident) must fail the checks; a native sidecar, which gates the app on the proxy's
// readiness, must pass them. Both at a small scale, each on its own 1-node cluster.
func TestSidecarStartupBothWays(t *testing.T) {
	l := newLocalRunner(t)
	run := func(mode string) (results.Summary, string) {
		s, dir := l.run("sidecar-startup", "reference", []string{"mode=" + mode, "replicas=" + testStartupReplicas,
			"serviceEntries=" + testStartupServiceEntries, "nodes=1", "duration=5s", "steady=1s"}, 8*time.Minute)
		require.Len(t, s.Startup, 1)
		r := s.Startup[0]
		assert.Equal(t, mode, r.Mode)
		assert.Equal(t, r.Pods, r.Started, "every pod reported its start-up")
		return s, dir
	}

	none, dir := run("none")
	assert.Equal(t, results.VerdictFail, none.Verdict, "the app first, before its proxy's config: %+v", none.Checks)
	r := none.Startup[0]
	assert.Positive(t, r.AppRestarts, "the incident: the app exits and is restarted")
	assert.Positive(t, r.FailedFirstCalls)
	assert.Positive(t, r.ExitCodes["1"], "the app exits 1: %v", r.ExitCodes)
	spec, err := os.ReadFile(filepath.Join(dir, r.PodSpec))
	require.NoError(t, err, "the injected pod spec is kept")
	assert.Contains(t, string(spec), "sidecar.meshchaos.io/status: none")

	native, dir := run("native")
	assert.Equal(t, results.VerdictPass, native.Verdict, "a native sidecar holds the app until the proxy is ready: %+v", native.Checks)
	r = native.Startup[0]
	assert.Zero(t, r.AppRestarts)
	assert.Zero(t, r.FailedFirstCalls)
	assert.Positive(t, r.ProxyFirstConfigMs.P50, "the proxies' time to first config is measured")
	assert.GreaterOrEqual(t, r.FirstSuccessMs.P50, r.ProxyFirstConfigMs.P50, "the app's first success comes after its proxy's first config")
	spec, err = os.ReadFile(filepath.Join(dir, r.PodSpec))
	require.NoError(t, err)
	assert.Contains(t, string(spec), "restartPolicy: Always", "the proxy is a native sidecar")
	injected := ""
	for _, e := range native.Events {
		if e.Kind == "cp.sidecar-injections" {
			injected = e.Detail
		}
	}
	assert.Contains(t, injected, testStartupReplicas+" pods injected, 0 injection failures", "the control plane's webhook did the injecting")
}

// The small test scale: enough pods to see the race in every one, few enough for a 1-node
// cluster on a shared 2-core machine.
const (
	testStartupReplicas       = "4"
	testStartupServiceEntries = "500"
)
