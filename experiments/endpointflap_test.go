package experiments

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/suite"
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
	spec := d.MeshSpec(v)
	assert.Equal(t, 200, spec.ADSLoad.Clients)
	assert.Equal(t, "flap", spec.ADSLoad.TrackService)
	assert.Equal(t, 1, v.Int("adsloadPods"))
	assert.Zero(t, spec.ADSLoad.Pods, "one pod by default, on the data plane's node")
	assert.Nil(t, spec.ADSLoad.Nodes)
	assert.Equal(t, spec.Nodes, spec.ADSLoad.Node)

	// A fleet spread over pods, round-robin over every node, the data plane's first.
	v, err = d.Resolve([]string{"nodes=3", "proxies=10000", "adsloadPods=4"})
	require.NoError(t, err)
	spec = d.MeshSpec(v)
	assert.Equal(t, 10000, spec.ADSLoad.Clients)
	assert.Equal(t, 4, spec.ADSLoad.Pods)
	assert.Equal(t, []int{3, 2, 1}, spec.ADSLoad.Nodes)
	for bad, want := range map[string]string{
		"proxies=3,adsloadPods=4": "adsloadPods=4: at most proxies (3)",
		"proxies=10000":           "proxies=10000 on 1 adsload pod(s) is 10000 a pod: at most 5000 (raise adsloadPods to 2 or more)",
		"adsloadPods=0":           "want a whole number from 1",
	} {
		_, err := d.Resolve(strings.Split(bad, ","))
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), want, bad)
		}
	}
	for bad, want := range map[string]string{
		"flap=wobble":   `want one of`,
		"flapFor=100s":  "at least steady + flapFor + 15s",
		"proxies=0":     "want a whole number from 1 to 20000",
		"hosts=2000":    "at most serviceEntries",
		"unready=100ms": "want a duration from 1s",
	} {
		_, err := d.Resolve([]string{bad})
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), want, bad)
		}
	}
}

func init() { caseAssertions["endpoint-flap"] = assertEndpointFlap }

// assertEndpointFlap: incident 2 at a small scale. The reference keeps a flapping single-pod
// service's changes incremental (an EDS push per change, no full push); the
// full-push-on-endpoint-reappear switch makes one full push per 0→1, each next to its change.
func assertEndpointFlap(t *testing.T, c suite.Case, s results.Summary, _ string) {
	require.NotNil(t, s.Convergence, "convergence was measured at the proxies")
	assert.Equal(t, 20, s.Convergence.Proxies)
	assert.Zero(t, s.Convergence.Missed, "every proxy received every endpoint change")
	require.NotNil(t, s.Fleet, "the fleet as read at the end of the chaos")
	assert.Equal(t, 20, s.Fleet.Clients)
	assert.EqualValues(t, 20, s.Fleet.Configured, "every client configured")
	require.Len(t, s.Fleet.Pods, 1)
	assert.Positive(t, s.Fleet.Pods[0].RSSBytes, "the adsload process's memory was read")
	require.NotNil(t, s.ControlPlaneStats.PushTime, "push times were read from the control plane's histogram")
	require.NotNil(t, s.ControlPlaneStats.CPUSeconds)
	require.NotNil(t, s.ControlPlaneStats.ChaosPushTime, "push times during the flapping alone")
	require.NotNil(t, s.ControlPlaneStats.ChaosCPUSeconds, "CPU during the flapping alone")
	require.NotNil(t, s.ControlPlaneStats.ChaosPeakHeapBytes, "heap during the flapping alone")
	assert.LessOrEqual(t, s.ControlPlaneStats.ChaosPushTime.Count, s.ControlPlaneStats.PushTime.Count)
	require.NotNil(t, s.ControlPlaneStats.ChaosPushes, "pushes counted over the flapping alone")
	// upFlaps counts the endpoint's 0→1 changes in the API.
	ups := 0
	for i, ch := range s.Convergence.Changes {
		if ch.Ready > 0 && (i == 0 || s.Convergence.Changes[i-1].Ready == 0) {
			ups++
		}
	}
	assert.GreaterOrEqual(t, ups, 2, "the pod flapped back Ready more than once")

	if c.Expect.Verdict == results.VerdictPass {
		if flap := s.Attacks[flapAttack]; assert.NotNil(t, flap, "traffic to the flapping service measured") {
			assert.Positive(t, flap.Requests)
			assert.Positive(t, flap.Errors, "a service with no ready endpoint fails its requests: proof the attack saw the flaps")
		}
		assert.Zero(t, s.ControlPlaneStats.ChaosPushes.Full)
		// ChaosPushes counts the chaos phase alone: the changes that fall in it, with a second
		// for the last one's push (debounce, scrape) before the phase ended. A crashed
		// container's restart back-off can put its last change at the phase's very end (the
		// nightly's flap=crash run: 4 changes, the last at the end, 3 pushes in the phase).
		inPhase := 0
		for _, p := range s.Phases {
			if p.Name != "chaos" || p.FinishedAt == nil {
				continue
			}
			for _, ch := range s.Convergence.Changes {
				if !ch.At.Before(p.StartedAt) && ch.At.Before(p.FinishedAt.Add(-time.Second)) && !ch.Coalesced {
					inPhase++
				}
			}
		}
		assert.GreaterOrEqual(t, inPhase, 2, "endpoint changes inside the chaos phase")
		assert.GreaterOrEqual(t, s.ControlPlaneStats.ChaosPushes.EDS, int64(inPhase), "an EDS push per endpoint change of the chaos phase: %+v", s.Convergence.Changes)
		for i, ch := range s.Convergence.Changes {
			if assert.NotNil(t, ch.Pushes, "change %d: pushes attributed", i) {
				assert.Zero(t, ch.Pushes.Full, "change %d", i)
			}
		}
		return
	}
	// A full push per 0→1 of the endpoint, to every proxy (counted per proxy, as istiod's).
	assert.GreaterOrEqual(t, s.ControlPlaneStats.ChaosPushes.Full, int64(ups-1), "a full push per 0→1 of the endpoint")
	// The per-change table puts each full push next to its 0→1. Counters are scraped every
	// 500 ms, so on a loaded machine one push may land in a neighbouring change's row.
	attributed := 0
	for i, ch := range s.Convergence.Changes {
		if ch.Ready > 0 && (i == 0 || s.Convergence.Changes[i-1].Ready == 0) && ch.Pushes != nil && ch.Pushes.Full >= 1 {
			attributed++
		}
	}
	assert.GreaterOrEqual(t, attributed, ups-1, "0→1 changes with their full push: %+v", s.Convergence.Changes)
}

// The flapping service's errors must fall inside its unready windows (0 ready endpoints in the
// API, ± grace); errors elsewhere fail the check with their seconds; no attack or no endpoint
// changes is an error, not a pass.
func TestFlapErrorsOutsideWindows(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	conv := &results.Convergence{Changes: []results.EndpointChange{
		{At: at(10), Ready: 0}, {At: at(12), Ready: 1}, // unready 10–12 s
		{At: at(20), Ready: 0}, {At: at(22.5), Ready: 1}, // unready 20–22.5 s
	}}
	series := func(errSeconds ...int) *results.Traffic {
		tr := &results.Traffic{StartedAt: t0, Requests: 600, ByFlag: map[string]int64{"UH": 1}}
		for s := 0; s < 30; s++ {
			sec := results.Second{T: s, Requests: 20}
			for _, e := range errSeconds {
				if e == s {
					sec.Errors, tr.Errors = 3, tr.Errors+3
				}
			}
			tr.Series = append(tr.Series, sec)
		}
		return tr
	}
	check := flapErrorsOutsideWindows(time.Second)
	// Inside, and within a second of, the windows (the change's way to the gateway).
	c, err := check(&results.Summary{Convergence: conv, Attacks: map[string]*results.Traffic{flapAttack: series(10, 11, 12, 20, 23)}})
	require.NoError(t, err)
	assert.True(t, c.Pass, c.Detail)
	assert.Contains(t, c.Detail, "15 of 600 requests failed, 2 unready windows")
	assert.Contains(t, c.Detail, "UH:1")
	// Errors while the service had a ready endpoint.
	c, err = check(&results.Summary{Convergence: conv, Attacks: map[string]*results.Traffic{flapAttack: series(11, 5, 16)}})
	require.NoError(t, err)
	assert.False(t, c.Pass)
	assert.Equal(t, 6.0, c.Observed)
	assert.Contains(t, c.Detail, "seconds [5 16]")
	// Not measured: error, never pass.
	_, err = check(&results.Summary{Convergence: conv})
	assert.ErrorContains(t, err, "not measured")
	_, err = check(&results.Summary{Attacks: map[string]*results.Traffic{flapAttack: series()}})
	assert.ErrorContains(t, err, "not followed")
}
