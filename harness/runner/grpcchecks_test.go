package runner

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/results"
)

// The gRPC clients' checks are errors, never passes, while the clients were not read or made
// no RPC; measured, they judge the failed RPCs and the longest time without config.
func TestGRPCChecks(t *testing.T) {
	checks := []Check{GRPCFailedRPCs(results.LE, 0), GRPCNoConfig(results.LE, 0)}
	s := &results.Summary{}
	for _, c := range checks {
		_, err := c(s)
		assert.ErrorContains(t, err, "were not measured")
	}
	s.Measurements = []results.Measurement{{Name: "rpcs", Role: "grpc-client", Failures: 3, Error: "connection refused"}}
	for _, c := range checks {
		_, err := c(s)
		assert.ErrorContains(t, err, "connection refused")
	}
	s.Measurements[0].OK = true
	for _, c := range checks {
		_, err := c(s)
		assert.ErrorContains(t, err, "no RPC")
	}
	noConfig := 1.25
	s.Attacks = map[string]*results.Traffic{observe.GRPCAttack: {Requests: 100, Errors: 4, ByCode: map[string]int64{"OK": 96, "Unavailable": 4},
		ErrorWindow: &results.ErrorWindow{FirstSecond: 3, LastSecond: 4}, Series: []results.Second{{T: 3, Errors: 3}, {T: 4, Errors: 1}}, NoConfigSeconds: &noConfig}}
	failed, err := checks[0](s)
	require.NoError(t, err)
	assert.False(t, failed.Pass)
	assert.Equal(t, "4 of 100 RPCs failed; by code OK: 96, Unavailable: 4; in seconds 3–4 of the traffic, at most 3 a second; longest time a channel had no usable config 1.25 s", failed.Detail)
	nc, err := checks[1](s)
	require.NoError(t, err)
	assert.False(t, nc.Pass)
	assert.Equal(t, 1.25, nc.Observed)
}
