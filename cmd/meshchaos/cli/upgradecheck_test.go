package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/results/stats"
)

func suiteFile(t *testing.T, yaml string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "suite.yaml")
	require.NoError(t, os.WriteFile(f, []byte(yaml), 0o644))
	return f
}

func TestUpgradeCheckBadInputExitsTwo(t *testing.T) {
	withCP := suiteFile(t, "name: s\nentries:\n- experiment: cp-oom-restart\n  controlPlane: reference\n")
	unknown := suiteFile(t, "name: s\nentries:\n- experiment: no-such\n")
	for name, tc := range map[string]struct {
		args []string
		says string
	}{
		"no base":         {[]string{"upgrade-check", "--candidate", "reference"}, "give both --base and --candidate"},
		"unknown suite":   {[]string{"upgrade-check", "--base", "reference", "--candidate", "reference", "--suite", "nightly-x"}, "neither a built-in"},
		"entry with cp":   {[]string{"upgrade-check", "--base", "reference", "--candidate", "reference", "--suite", withCP}, "leave controlPlane empty"},
		"unknown exp":     {[]string{"upgrade-check", "--base", "reference", "--candidate", "reference", "--suite", unknown}, `unknown experiment "no-such"`},
		"unknown param":   {[]string{"upgrade-check", "--base", "reference", "--candidate", "reference", "--set", "wobble=1"}, `no experiment of suite pre-upgrade has a parameter "wobble"`},
		"unknown scope":   {[]string{"upgrade-check", "--base", "reference", "--candidate", "reference", "--set", "nope.rate=1"}, `unknown experiment "nope"`},
		"bad value":       {[]string{"upgrade-check", "--base", "reference", "--candidate", "reference", "--set", "rate=0"}, "rate"},
		"bad cp":          {[]string{"upgrade-check", "--base", "reference", "--candidate", "reference:no-such-switch"}, "no-such-switch"},
		"repeats":         {[]string{"upgrade-check", "--base", "reference", "--candidate", "reference", "--repeats", "-1"}, "--repeats"},
		"alpha":           {[]string{"upgrade-check", "--base", "reference", "--candidate", "reference", "--alpha", "1"}, "--alpha"},
		"positional args": {[]string{"upgrade-check", "reference"}, ""},
	} {
		start := time.Now()
		code, out := run(t, append(tc.args, "--out", t.TempDir())...)
		assert.Equal(t, 2, code, "%s: %s", name, out)
		assert.Contains(t, out, tc.says, name)
		assert.Less(t, time.Since(start), 5*time.Second, "%s: checked before anything starts", name)
	}
}

// The built-in pre-upgrade suite names real experiments with valid parameters, and none names a
// control plane (upgrade-check substitutes base and candidate).
func TestPreUpgradeSuiteResolves(t *testing.T) {
	s, ok := suite.Builtin(suite.PreUpgrade)
	require.True(t, ok)
	entries, err := resolveEntries(s, nil, "")
	require.NoError(t, err, "every entry's experiment exists and its parameters resolve")
	for _, e := range entries {
		assert.Empty(t, e.ControlPlane)
		assert.GreaterOrEqual(t, e.Repeats, 3, "%s: fewer than 3 runs a side can never reach α = 0.05", e.Experiment)
	}
}

// TestUpgradeCheckCatchesUngated is the upgrade gate end to end at a small scale: one quick
// cp-oom-restart, one run a side, reference against reference:ungated. The ungated restart
// serves an unsynced config: the candidate's errors make a regression on the error measures and
// its failed checks; exit 1, and the report names them.
func TestUpgradeCheckCatchesUngated(t *testing.T) {
	prereq.Root(t, "runs local clusters")
	f := suiteFile(t, `name: tiny-upgrade
entries:
- experiment: cp-oom-restart
  repeats: 1
  set: [rate=100, duration=40s, steady=8s, throttleWindow=20s]
`)
	out := filepath.Join(t.TempDir(), "uc")
	code, text := run(t, "upgrade-check", "--base", "reference", "--candidate", "reference:ungated", "--suite", f, "--out", out)
	t.Log(text)
	require.Equal(t, 1, code, "the ungated candidate is a regression")
	assert.Contains(t, text, "REGRESSION in cp-oom-restart")

	var c results.Comparison
	js, err := os.ReadFile(filepath.Join(out, results.ComparisonJSONFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(js, &c))
	require.Len(t, c.Groups, 1)
	g := c.Groups[0]
	assert.Equal(t, "tiny-upgrade", c.Suite)
	require.Len(t, g.Base, 1)
	require.Len(t, g.Candidate, 1)
	assert.Equal(t, results.VerdictPass, g.Base[0].Verdict, "the reference passes")
	assert.Equal(t, "reference:ungated", g.Candidate[0].ControlPlane)
	verdicts := map[string]stats.Verdict{}
	for _, m := range g.Measures {
		verdicts[m.Name] = m.Verdict
	}
	assert.Equal(t, stats.Regression, verdicts["error rate"], "%v", verdicts)
	assert.Contains(t, g.Regressions(), "check: error rate")
	assert.FileExists(t, filepath.Join(out, results.ComparisonMarkdownFile))
	assert.FileExists(t, filepath.Join(out, "base", "01-cp-oom-restart-r1", results.SummaryFile))
	assert.FileExists(t, filepath.Join(out, "candidate", "01-cp-oom-restart-r1", results.SummaryFile))

	// The runs it left are what compare reads: the same verdict again.
	code, _ = run(t, "compare", filepath.Join(out, "base"), filepath.Join(out, "candidate"))
	assert.Equal(t, 1, code)
}
