package experiments

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/results"
)

func TestSidecarStartupParams(t *testing.T) {
	d, ok := Lookup("sidecar-startup")
	require.True(t, ok)
	v, err := d.Resolve(nil)
	require.NoError(t, err)
	assert.Equal(t, "all", v.String("mode"))
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

func init() { caseAssertions["sidecar-startup"] = assertSidecarStartup }

// assertSidecarStartup: each mode's record is whole (every pod reported its start-up) and
// shows what the mode does. The app started before its proxy's config (none, the incident)
// exits 1 and is restarted; hold and a native sidecar keep it until the proxy is ready (no
// restart, no failed first call); the resilient app retries its first calls instead of exiting.
func assertSidecarStartup(t *testing.T, c suite.Case, s results.Summary, dir string) {
	require.NotEmpty(t, s.Startup)
	injected := ""
	for _, e := range s.Events {
		if e.Kind == "cp.sidecar-injections" {
			injected = e.Detail
		}
	}
	for _, r := range s.Startup {
		assert.Equal(t, r.Pods, r.Started, "%s: every pod reported its start-up", r.Mode)
		spec, err := os.ReadFile(filepath.Join(dir, r.PodSpec))
		require.NoError(t, err, "%s: the injected pod spec is kept", r.Mode)
		switch r.Mode {
		case "none":
			assert.Positive(t, r.AppRestarts, "the incident: the app exits and is restarted")
			assert.Positive(t, r.FailedFirstCalls)
			assert.Positive(t, r.ExitCodes["1"], "the app exits 1: %v", r.ExitCodes)
			assert.Contains(t, string(spec), "sidecar.meshchaos.io/status: none")
		case "hold", "native":
			assert.Zero(t, r.AppRestarts, r.Mode)
			assert.Zero(t, r.FailedFirstCalls, r.Mode)
			assert.Positive(t, r.ProxyFirstConfigMs.P50, "%s: the proxies' time to first config is measured", r.Mode)
			assert.GreaterOrEqual(t, r.FirstSuccessMs.P50, r.ProxyFirstConfigMs.P50, "%s: the app's first success comes after its proxy's first config", r.Mode)
			if r.Mode == "native" {
				assert.Contains(t, string(spec), "restartPolicy: Always", "the proxy is a native sidecar")
			}
		case "resilient":
			assert.Zero(t, r.AppRestarts, "the resilient app retries instead of exiting")
			assert.Positive(t, r.FailedFirstCalls, "its first calls fail before the proxy is ready, and are retried")
		}
	}
	if c.Expect.Verdict == results.VerdictPass {
		replicas := ""
		for _, kv := range c.Entry(true).Set {
			if v, ok := strings.CutPrefix(kv, "replicas="); ok {
				replicas = v
			}
		}
		assert.Contains(t, injected, replicas+" pods injected, 0 injection failures", "the control plane's webhook did the injecting")
	}
}
