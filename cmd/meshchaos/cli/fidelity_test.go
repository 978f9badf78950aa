package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/results"
)

// TestFidelityWritesItsTableAndConcludesNothingUnmeasured: fidelity runs its plan as
// upgrade-check does, into istiod/ and reference/, and writes the comparison and the table;
// runs that measure none of the table's figures conclude nothing (exit 2), never "agrees".
func TestFidelityWritesItsTableAndConcludesNothingUnmeasured(t *testing.T) {
	out := filepath.Join(t.TempDir(), "fidelity")
	u := &upgradeCheck{name: "fidelity", labels: [2]string{"istiod", "reference"}, base: "istiod@2026-08", cand: "reference", suite: "fidelity", out: out}
	u.finish = finishFidelity(u)
	for _, side := range []string{"base", "candidate"} {
		cp := map[string]string{"base": u.base, "candidate": u.cand}[side]
		dir := filepath.Join(out, u.sideLabel(side), suiteRunName(0, "quick", "", 1, 1))
		u.runs = append(u.runs, upgradeRun{entry: 1, repeat: 1, repeats: 1, side: side, p: stubRun(dir, cp, false, nil, nil)})
	}
	var stdout, stderr bytes.Buffer
	err := u.execute(context.Background(), &stdout, &stderr)
	assert.Equal(t, 2, exitCode(err), "%v\n%s", err, stderr.String())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no figure of the table was measured")
	assert.NotContains(t, stdout.String(), "agrees with istiod")
	assert.Contains(t, stderr.String(), "fidelity: suite fidelity (0 entries), 2 runs, istiod istiod@2026-08, reference reference")
	assert.Contains(t, stderr.String(), "istiod istiod@2026-08, repeat 1/1")
	assert.FileExists(t, filepath.Join(out, "istiod", suiteRunName(0, "quick", "", 1, 1), results.SummaryFile))
	assert.FileExists(t, filepath.Join(out, "reference", suiteRunName(0, "quick", "", 1, 1), results.SummaryFile))
	assert.ElementsMatch(t, []string{results.FidelityJSONFile, results.FidelityMarkdownFile}, results.FidelityIn(out))
	c := readComparison(t, out)
	assert.Equal(t, "istiod@2026-08", c.Base, "istiod is the comparison's base")

	// A second fidelity into the same directory is refused before anything runs.
	assert.Equal(t, 2, exitCode(checkFidelityOut(out)))
}

// TestOnlyExperiments: --experiment keeps those entries of the suite, in the suite's order, and
// refuses a name the suite does not have, naming the ones it has.
func TestOnlyExperiments(t *testing.T) {
	s, ok := suite.Builtin(suite.Fidelity)
	require.True(t, ok)
	got, err := onlyExperiments(s, []string{"serviceentry-scale", "cp-oom-restart"})
	require.NoError(t, err)
	require.Len(t, got.Entries, 2)
	assert.Equal(t, "cp-oom-restart", got.Entries[0].Experiment)
	assert.Equal(t, "serviceentry-scale", got.Entries[1].Experiment)
	assert.Len(t, s.Entries, 4, "the built-in suite itself is untouched")
	_, err = onlyExperiments(s, []string{"soak"})
	assert.Equal(t, 2, exitCode(err))
	assert.ErrorContains(t, err, "suite fidelity has cp-oom-restart, endpoint-flap, cp-cpu-starvation, serviceentry-scale")
}
