package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/suite"
)

// TestPoolOnlyForClustersOfTheRuns: --reuse-cluster pools only clusters the runs bring up
// themselves; a cluster that exists already, a control plane installed on one, or the flag off
// give no pool (each run as 'run' makes it).
func TestPoolOnlyForClustersOfTheRuns(t *testing.T) {
	for _, j := range []job{
		{ReuseCluster: false, Substrate: "local"},
		{ReuseCluster: true, Substrate: "existing"},
	} {
		p, err := j.newPool("reference")
		require.NoError(t, err)
		assert.Nil(t, p, "%+v", j)
	}
	j := job{ReuseCluster: true, Substrate: "local"}
	p, err := j.newPool("reference", "istiod:installed")
	require.NoError(t, err)
	assert.Nil(t, p, "an installed control plane lives on an existing cluster")
}

func TestSuiteCPs(t *testing.T) {
	s := suite.Suite{Entries: []suite.Entry{{Experiment: "a"}, {Experiment: "b", ControlPlane: "istiod:installed"}}}
	assert.Equal(t, []string{"reference", "istiod:installed"}, suiteCPs(s, "reference"))
}

func TestReuseFlagDefaultsOn(t *testing.T) {
	for _, name := range []string{"suite", "upgrade-check", "fidelity"} {
		cmd, _, err := NewRoot().Find([]string{name})
		require.NoError(t, err)
		f := cmd.Flags().Lookup("reuse-cluster")
		require.NotNil(t, f, "%s has --reuse-cluster", name)
		assert.Equal(t, "true", f.DefValue, name)
	}
}
