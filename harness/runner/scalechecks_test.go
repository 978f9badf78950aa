package runner

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

func TestScaleChecks(t *testing.T) {
	s := &results.Summary{}
	// Unmeasured: every scale check is an error, never a pass.
	for _, c := range []Check{GrowthExponent(results.LE, 1.15), BytesPerEndpoint(results.LE, 2048), OracleMismatches("config", results.LE, 0), CapacityVerified(results.LE, 1024)} {
		_, err := c(s)
		assert.ErrorContains(t, err, "scale-steps")
	}
	s.Measurements = []results.Measurement{{Name: "scale-steps", Role: "control-plane", OK: true, Samples: 2}}
	s.Scale = &results.Scale{
		Steps: []results.ScaleStep{{Endpoints: 1000, BytesPerEndpoint: 2500, Converged: true}, {Endpoints: 2000, BytesPerEndpoint: 1900, Converged: true},
			{Endpoints: 9000, BytesPerEndpoint: 9999, Verify: true, Converged: true}},
		MismatchCount: map[string]int{"endpoint-port": 4},
		Mismatches:    []results.Mismatch{{Step: 50, Scenario: "endpoint-port", Cluster: "outbound|80||p.mesh.test", Want: "10.0.0.1:9000", Got: "10.0.0.1:80"}},
	}
	_, err := GrowthExponent(results.LE, 1.15)(s)
	assert.ErrorContains(t, err, "no growth fit")
	s.Scale.Fit = &results.PowerFit{Exponent: 1.8, StdErr: 0.05, Points: 2}
	c, err := GrowthExponent(results.LE, 1.15)(s)
	require.NoError(t, err)
	assert.False(t, c.Pass)
	assert.Contains(t, c.Detail, "endpoints^1.800 ± 0.050")
	// An exponent the steps cannot resolve is an error (whatever its value), not a verdict.
	s.Scale.Fit = &results.PowerFit{Exponent: 2.011, Points: 2, Resolution: 1.28}
	_, err = GrowthExponent(results.LE, 2)(s)
	assert.ErrorContains(t, err, "resolve the exponent only to ±1.28")
	assert.ErrorContains(t, err, "use larger steps")
	s.Scale.Fit = &results.PowerFit{Exponent: 0.25, Points: 2, Resolution: 1.28}
	_, err = GrowthExponent(results.LE, 2)(s)
	assert.Error(t, err, "a noise exponent that happens to be low is not a pass")
	s.Scale.Fit = &results.PowerFit{Exponent: 1.08, StdErr: 0.1, Points: 3, Resolution: 0.21}
	c, err = GrowthExponent(results.LE, 1.15)(s)
	require.NoError(t, err)
	assert.True(t, c.Pass)

	c, err = BytesPerEndpoint(results.LE, 2048)(s)
	require.NoError(t, err)
	assert.True(t, c.Pass, "the largest step of the sequence counts, not the verification step")
	assert.Equal(t, 1900.0, c.Observed)

	c, err = OracleMismatches("endpoint-port", results.LE, 0)(s)
	require.NoError(t, err)
	assert.False(t, c.Pass)
	assert.Contains(t, c.Detail, "want 10.0.0.1:9000 got 10.0.0.1:80 (step 50)")
	c, err = OracleMismatches("workload-entry", results.LE, 0)(s)
	require.NoError(t, err)
	assert.True(t, c.Pass)
	// A step that timed out before the client held it whole: its mismatches are no verdict.
	s.Scale.Steps[1].Converged, s.Scale.Steps[1].ServiceEntries = false, 400
	_, err = OracleMismatches("endpoint-port", results.LE, 0)(s)
	assert.ErrorContains(t, err, "step 400 never reached the oracle client")
	s.Scale.Steps[1].Converged = true

	_, err = CapacityVerified(results.LE, 1024)(s)
	assert.ErrorContains(t, err, "not verified")
	s.Scale.Projection = &results.Projection{Verified: true, VerifiedRSSBytes: 900 << 20}
	c, err = CapacityVerified(results.LE, 1024)(s)
	require.NoError(t, err)
	assert.True(t, c.Pass)
}
