package experiments

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

func TestEndpointFlapParams(t *testing.T) {
	d, ok := Lookup("endpoint-flap")
	require.True(t, ok)
	v, err := d.Resolve(nil)
	require.NoError(t, err)
	assert.Equal(t, "readiness", v.String("flap"))
	assert.Equal(t, 200, v.Int("proxies"))
	assert.Equal(t, 1000, v.Int("serviceEntries"))
	assert.Equal(t, 2*time.Second, v.Duration("unready"))
	assert.Equal(t, 4*time.Second, v.Duration("ready"))
	assert.Equal(t, 60*time.Second, v.Duration("flapFor"))
	spec := d.Mesh(v)
	assert.Equal(t, 200, spec.ADSLoad.Clients)
	assert.Equal(t, "||flap.default.svc.", spec.ADSLoad.Track)
	for bad, want := range map[string]string{
		"flap=wobble":   `want one of`,
		"flapFor=100s":  "at least steady + flapFor + 15s",
		"proxies=0":     "want a whole number from 1 to 5000",
		"hosts=2000":    "at most serviceEntries",
		"unready=100ms": "want a duration from 1s",
	} {
		_, err := d.Resolve([]string{bad})
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), want, bad)
		}
	}
}

// TestEndpointFlapBothWays runs incident 2 at a small scale: the reference control plane keeps a
// flapping single-pod service's changes incremental; the full-push-on-endpoint-reappear switch
// pushes everything on every 0→1, and the experiment must catch it.
func TestEndpointFlapBothWays(t *testing.T) {
	l := newLocalRunner(t)
	sets := []string{"rate=50", "duration=45s", "steady=5s", "flapFor=20s", "proxies=20", "serviceEntries=100"}
	run := func(cp string) results.Summary {
		s, _ := l.run("endpoint-flap", cp, sets, 10*time.Minute)
		require.NotNil(t, s.Convergence, "convergence was measured at the proxies")
		assert.Equal(t, 20, s.Convergence.Proxies)
		assert.Zero(t, s.Convergence.Missed, "every proxy received every endpoint change")
		require.NotNil(t, s.ControlPlaneStats.PushTime, "push times were read from the control plane's histogram")
		require.NotNil(t, s.ControlPlaneStats.CPUSeconds)
		return s
	}
	// upFlaps counts the endpoint's 0→1 changes in the API.
	upFlaps := func(c *results.Convergence) int {
		n := 0
		for i, ch := range c.Changes {
			if ch.Ready > 0 && (i == 0 || c.Changes[i-1].Ready == 0) {
				n++
			}
		}
		return n
	}

	plain := run("reference")
	assert.Equal(t, results.VerdictPass, plain.Verdict, "endpoint-only changes stay incremental: %+v", plain.Checks)
	assert.GreaterOrEqual(t, upFlaps(plain.Convergence), 2, "the pod flapped back Ready more than once")
	assert.Zero(t, plain.ControlPlaneStats.Pushes.Full)
	assert.GreaterOrEqual(t, plain.ControlPlaneStats.Pushes.EDS, int64(len(plain.Convergence.Changes)), "an EDS push per endpoint change")
	for i, ch := range plain.Convergence.Changes {
		if assert.NotNil(t, ch.Pushes, "change %d: pushes attributed", i) {
			assert.Zero(t, ch.Pushes.Full, "change %d", i)
		}
	}

	switched := run("reference:full-push-on-endpoint-reappear")
	assert.Equal(t, results.VerdictFail, switched.Verdict, "the experiment catches a full push per 0→1: %+v", switched.Checks)
	flaps := upFlaps(switched.Convergence)
	assert.GreaterOrEqual(t, flaps, 2)
	assert.InDelta(t, flaps, switched.ControlPlaneStats.Pushes.Full, 1, "one full push per 0→1 of the endpoint")
	// The per-change table puts each full push next to its 0→1. Counters are scraped every
	// 500 ms, so on a loaded machine one push may land in a neighbouring change's row.
	attributed := 0
	for i, ch := range switched.Convergence.Changes {
		if ch.Ready > 0 && (i == 0 || switched.Convergence.Changes[i-1].Ready == 0) && ch.Pushes != nil && ch.Pushes.Full == 1 {
			attributed++
		}
	}
	assert.GreaterOrEqual(t, attributed, flaps-1, "0→1 changes with their full push: %+v", switched.Convergence.Changes)
}
