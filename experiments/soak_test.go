package experiments

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/results"
)

func TestSoakFaultCycle(t *testing.T) {
	d, ok := Lookup("soak")
	require.True(t, ok)
	v, err := d.Resolve(nil)
	require.NoError(t, err)
	// An hour, the first fault after 30 s of steady traffic, one every 5 minutes while half a
	// period remains: 12, every fault of the cycle at least twice.
	assert.Equal(t, 12, soakFaults(v))
	assert.Len(t, soakCycle(), 5)
	v, err = d.Resolve([]string{"duration=4m", "steady=20s", "faultEvery=1m", "faultFor=10s"})
	require.NoError(t, err)
	assert.Equal(t, 4, soakFaults(v))

	for want, bad := range map[string][]string{
		"room for at least two faults": {"duration=6m"},
		"shorter than faultEvery":      {"faultFor=5m"},
		"needs a memory limit":         {"cpMemoryLimit="},
	} {
		_, err := d.Resolve(bad)
		assert.ErrorContains(t, err, want, bad)
	}
}

func TestSoakChecksNeedTheSoakRecorded(t *testing.T) {
	d, _ := Lookup("soak")
	v, err := d.Resolve(nil)
	require.NoError(t, err)
	// Without the soak section every check is an error (verdict error), never a pass.
	for _, c := range d.Checks(v) {
		_, err := c(&results.Summary{})
		assert.ErrorContains(t, err, "the soak was not recorded")
	}
	// A soak whose fault did not recover, whose heap grew and which leaked goroutines fails.
	s := &results.Summary{Soak: &results.Soak{
		Faults:                 []results.SoakFault{{Name: "pod-kill/flap"}},
		Settled:                []results.SoakSample{{RecentRequests: 1200, RecentErrors: 3}},
		ControlPlaneHeap:       &results.Growth{SlopePerHour: 8 << 20},
		HarnessHeap:            &results.Growth{SlopePerHour: 1 << 20},
		ControlPlaneGoroutines: &results.GoroutineDelta{Start: 40, End: 41},
		HarnessGoroutines:      &results.GoroutineDelta{Start: 40, End: 90},
	}}
	pass := map[string]bool{}
	for _, c := range d.Checks(v) {
		r, err := c(s)
		require.NoError(t, err)
		pass[r.Name] = r.Pass
	}
	assert.Equal(t, map[string]bool{
		"soak faults injected": false, "soak faults not recovered": false,
		"control-plane live heap growth": false, "harness live heap growth": true,
		"control-plane goroutine growth": true, "harness goroutine growth": false,
		"traffic errors in the minute before each fault and the end": false,
	}, pass)

	// A fit too coarse to tell 4 MiB/h from noise is no verdict: istiod's heap over a 6-minute
	// soak, 27.8 ± 15.3 MiB/h from four samples.
	s.Soak.ControlPlaneHeap = &results.Growth{SlopePerHour: 27.8 * (1 << 20), StdErr: 15.3 * (1 << 20), Points: 4}
	var heapCheck runner.Check
	for _, c := range d.Checks(v) {
		if _, err := c(&results.Summary{Soak: &results.Soak{}}); err != nil && strings.Contains(err.Error(), "control plane's heap") {
			heapCheck = c
		}
	}
	require.NotNil(t, heapCheck)
	_, err = heapCheck(s)
	assert.ErrorContains(t, err, "27.8 ± 15.3 MiB/h over 4 settled samples: too few to judge growth against 4.0 MiB/h")
	s.Soak.ControlPlaneHeap = &results.Growth{SlopePerHour: 1 << 20, StdErr: 0.4 * (1 << 20), Points: 4}
	r, err := heapCheck(s)
	require.NoError(t, err)
	assert.True(t, r.Pass, "the reference's 6-minute soak: 1.0 ± 0.4 MiB/h is judged")
}
