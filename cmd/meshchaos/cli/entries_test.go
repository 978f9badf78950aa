package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/suite"
)

// --set applies to every entry whose experiment has the parameter, EXPERIMENT.name to that
// experiment only, after the suite's own values (so it wins); the entry's control plane falls
// back to the default. suite and upgrade-check both resolve entries this way.
func TestResolveEntriesSets(t *testing.T) {
	s := suite.Suite{Name: "s", Entries: []suite.Entry{
		{Experiment: "cp-oom-restart", Set: []string{"rate=100"}, ControlPlane: "reference:ungated"},
		{Experiment: "endpoint-flap"},
	}}
	got, err := resolveEntries(s, []string{"rate=20", "endpoint-flap.proxies=5", "throttleWindow=10s"}, "reference")
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, []string{"rate=100", "rate=20", "throttleWindow=10s"}, got[0].Sets)
	assert.Equal(t, []string{"rate=20", "proxies=5"}, got[1].Sets)
	assert.Equal(t, "reference:ungated", got[0].CP)
	assert.Equal(t, "reference", got[1].CP, "the default control plane")
	def, _ := experiments.Lookup("cp-oom-restart")
	v, err := def.Resolve(got[0].Sets)
	require.NoError(t, err)
	assert.Equal(t, "20", v.String("rate"))
	assert.Equal(t, []string{"rate=100"}, s.Entries[0].Set, "the suite itself is not changed")

	for set, want := range map[string]string{
		"rate":                  `want [EXPERIMENT.]name=value`,
		"nope.rate=1":           `unknown experiment "nope"`,
		"wobble=1":              `no experiment of suite s has a parameter "wobble"`,
		"cp-oom-restart.flap=x": `no experiment of suite s has a parameter "flap"`,
		"proxies=0":             `suite s entry 2 (endpoint-flap, reference): parameter proxies="0"`,
	} {
		_, err := resolveEntries(s, []string{set}, "reference")
		if assert.Error(t, err, set) {
			assert.Contains(t, err.Error(), want, set)
			var ec ExitCoder
			if assert.ErrorAs(t, err, &ec, set) {
				assert.Equal(t, 2, ec.ExitCode(), set)
			}
		}
	}
	_, err = resolveEntries(suite.Suite{Name: "s", Entries: []suite.Entry{{Experiment: "endpoint-flap", ControlPlane: "reference:nope"}}}, nil, "")
	assert.ErrorContains(t, err, `unknown regression switch "nope"`)
}
