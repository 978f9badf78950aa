package cli

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
)

// Every built-in suite and example file names real experiments, parameters and control planes.
func TestBuiltinSuitesResolve(t *testing.T) {
	all := suite.Builtins()
	files, _ := filepath.Glob("../../../examples/suites/*.yaml")
	require.NotEmpty(t, files)
	for _, f := range files {
		s, err := suite.Load(f)
		require.NoError(t, err, f)
		all = append(all, s)
	}
	for _, s := range all {
		// An entry without a control plane runs on --cp, or on upgrade-check's base and candidate.
		_, err := resolveEntries(s, nil, "reference")
		assert.NoError(t, err, s.Name)
	}
}

// TestSuiteHelpListsTheBuiltins: the help's "NAME is a built-in suite (see below)" has them below.
func TestSuiteHelpListsTheBuiltins(t *testing.T) {
	code, out := run(t, "suite", "--help")
	require.Equal(t, 0, code, out)
	list := out[strings.Index(out, "(see below)"):]
	require.NotEmpty(t, suite.Builtins())
	for _, s := range suite.Builtins() {
		assert.Regexp(t, `\n  `+s.Name+` +\d+ runs  `, list, "suite --help lists %s below", s.Name)
	}
}

// TestSuiteBadInputExitsTwo: every entry is checked before the first run; a bad one is exit 2
// naming the entry, and no output directory is left behind.
func TestSuiteBadInputExitsTwo(t *testing.T) {
	dir := t.TempDir()
	good := "- {experiment: serviceentry-scale, set: [\"steps=50,100\"]}\n"
	for name, tc := range map[string]struct{ entries, want string }{
		"unknown experiment":    {good + "- {experiment: nope}\n", `entry 2: unknown experiment "nope"`},
		"bad parameter value":   {good + "- {experiment: endpoint-flap, set: [proxies=0]}\n", `entry 2 (endpoint-flap, reference): parameter proxies="0": want a whole number from 1 to 20000`},
		"unknown parameter":     {good + "- {experiment: endpoint-flap, set: [steps=5]}\n", "unknown parameter"},
		"unknown control plane": {good + "- {experiment: endpoint-flap, controlPlane: \"reference:nope\"}\n", `unknown regression switch "nope"`},
		"bad expect":            {good + "- {experiment: endpoint-flap, expect: maybe}\n", "want pass or fail"},
	} {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			require.NoError(t, os.WriteFile(f, []byte("name: bad\nentries:\n"+tc.entries), 0o644))
			out := filepath.Join(dir, "out-"+filepath.Base(f))
			code, msg := run(t, "suite", f, "--out", out)
			assert.Equal(t, 2, code, msg)
			assert.Contains(t, msg, tc.want)
			assert.NoDirExists(t, out, "nothing ran, nothing left")
		})
	}
	code, msg := run(t, "suite", "nightly", "--set", "bogus=1", "--out", filepath.Join(dir, "x"))
	assert.Equal(t, 2, code)
	assert.Contains(t, msg, `no experiment of suite nightly has a parameter "bogus"`)
	code, msg = run(t, "suite", "no-such-suite")
	assert.Equal(t, 2, code)
	assert.Contains(t, msg, "neither a built-in (capacity, fidelity, honesty, nightly")
}

// TestSuiteTinyBothWays is the small honesty run `make test` makes through the suite runner:
// serviceentry-scale at small steps passes on the reference and is failed by se-endpoint-port,
// and the suite (exit 0: both as expected) leaves each run's directory, a combined junit.xml,
// suite.json, index.html and a history line.
func TestSuiteTinyBothWays(t *testing.T) {
	prereq.Integration(t)
	require.NoError(t, local.Preflight())
	t.Setenv("MESHCHAOS_HOME", t.TempDir())
	out := filepath.Join(t.TempDir(), "suite")
	history := t.TempDir()
	code, msg := run(t, "suite", "../../../examples/suites/tiny.yaml", "--out", out, "--history", history)
	t.Log(msg)
	require.Equal(t, 0, code, "every run gave its expected verdict")
	assert.Contains(t, msg, "shared cluster: 1 cluster(s) brought up, 1 run(s) on a cluster an earlier run had used",
		"the two runs share one cluster (--reuse-cluster's default), the second on a cluster checked clean")

	res := readSuite(t, out)
	require.Len(t, res.Runs, 2)
	assert.Equal(t, results.VerdictPass, res.Runs[0].Verdict)
	assert.Equal(t, results.VerdictFail, res.Runs[1].Verdict, "the switch is caught")
	assert.Contains(t, strings.Join(res.Runs[1].Failed, "\n"), "endpoint-port oracle mismatches", "on the check that names it")
	for _, r := range res.Runs {
		s, err := results.Read(filepath.Join(out, r.Dir))
		require.NoError(t, err, "each run's directory is complete")
		assert.Equal(t, r.Verdict, s.Verdict)
		assert.Contains(t, r.Measures, "heap growth exponent", "the checks' figures are the main measures")
	}

	b, err := os.ReadFile(filepath.Join(out, results.JUnitFile))
	require.NoError(t, err)
	var doc struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Errors   int `xml:"errors,attr"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(b, &doc))
	require.Len(t, doc.Suites, 1)
	assert.Equal(t, 2, doc.Suites[0].Tests)
	assert.Zero(t, doc.Suites[0].Failures+doc.Suites[0].Errors)

	page, err := os.ReadFile(filepath.Join(out, results.SuiteIndexFile))
	require.NoError(t, err)
	assert.Contains(t, string(page), `href="`+res.Runs[1].Dir+"/"+results.HTMLFile+`"`)
	var warn strings.Builder
	nights, err := results.ReadHistory(history, "tiny", 10, &warn)
	require.NoError(t, err)
	assert.Empty(t, warn.String(), "a whole history")
	require.Len(t, nights, 1)
	assert.Equal(t, res.Runs[1].Measures, nights[0].Runs[1].Measures)
}

func readSuite(t *testing.T, dir string) *results.SuiteResult {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, results.SuiteFile))
	require.NoError(t, err)
	var s results.SuiteResult
	require.NoError(t, json.Unmarshal(b, &s))
	return &s
}

// TestSuiteRefusesUnsafeNames: a suite file whose name is a path (it would put the history's
// NAME.jsonl outside --history) is exit 2 before anything is created or written.
func TestSuiteRefusesUnsafeNames(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"../evil", "a/b", "/tmp/evil", ".."} {
		f := filepath.Join(dir, "s.yaml")
		require.NoError(t, os.WriteFile(f, []byte("name: "+name+"\nentries:\n- {experiment: endpoint-flap}\n"), 0o644))
		history := filepath.Join(dir, "history", "h")
		out := filepath.Join(dir, "out")
		code, msg := run(t, "suite", f, "--out", out, "--history", history)
		assert.Equal(t, 2, code, "%s: %s", name, msg)
		assert.Contains(t, msg, fmt.Sprintf("suite name %q: want letters, digits", name))
		assert.NoDirExists(t, out, name)
		assert.NoDirExists(t, filepath.Join(dir, "history"), name)
		assert.NoFileExists(t, filepath.Join(dir, "evil.jsonl"), name)
	}
}

// TestSuiteRunDirsStayInsideOut: every entry's run directory is one directory directly inside
// --out, whatever its control plane is spelled like (external:FILE with ../ or an absolute
// path); a name that would land elsewhere is refused.
func TestSuiteRunDirsStayInsideOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	for _, cp := range []string{"reference", "reference:ungated,quadratic-scope", "istiod@2026-04", "external:../../../etc/cp.yaml", "external:/abs/cp.yaml", "external:a/../../b.yaml"} {
		for _, r := range []int{1, 2} {
			name := suiteRunName(0, "cp-oom-restart", cp, r, 2)
			dir, err := runDirIn(out, name)
			require.NoError(t, err, cp)
			assert.Equal(t, out, filepath.Dir(dir), "%s: directly inside --out", cp)
		}
	}
	for _, name := range []string{"../x", "a/../../x", "a/b", "..", "", ".", "/abs"} {
		_, err := runDirIn(out, name)
		assert.ErrorContains(t, err, "would not be a directory of its own inside "+out, "%q", name)
	}
}
