package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/results"
)

// runSplit runs the CLI with stdout and stderr apart: -o json must leave stdout a document alone.
func runSplit(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	root := NewRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	_, err := root.ExecuteC()
	if err != nil && isCobraUsageError(err) {
		err = Usagef("%v", err)
	}
	var ec ExitCoder
	switch {
	case err == nil:
	case errors.As(err, &ec):
		code = ec.ExitCode()
		errOut.WriteString(err.Error())
	default:
		code = 1
		errOut.WriteString(err.Error())
	}
	return code, out.String(), errOut.String()
}

func TestListJSON(t *testing.T) {
	code, out, _ := runSplit(t, "list", "-o", "json")
	require.Equal(t, 0, code)
	var doc catalogDoc
	dec := json.NewDecoder(bytes.NewReader([]byte(out)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&doc), out)
	require.Len(t, doc.Experiments, len(experiments.List()))
	for _, e := range doc.Experiments {
		d, ok := experiments.Lookup(e.Name)
		require.True(t, ok, e.Name)
		assert.Equal(t, d.Summary, e.Summary)
		assert.Equal(t, d.NodeAccess, nilIfEmpty(e.NodeAccess), e.Name)
		assert.Equal(t, d.CPFaults, nilIfEmpty(e.CPFaults), e.Name)
		require.Len(t, e.Params, len(d.Params), e.Name)
		for i, p := range e.Params {
			want := d.Params[i]
			assert.Equal(t, want.Name, p.Name)
			assert.Equal(t, want.Default, p.Default, "%s.%s", e.Name, p.Name)
			assert.Equal(t, want.Range(), p.Range, "%s.%s", e.Name, p.Name)
			assert.Equal(t, string(want.Kind), p.Kind)
			assert.Equal(t, want.Unit, p.Unit)
			assert.NotEmpty(t, p.Help, "%s.%s", e.Name, p.Name)
		}
	}
	// The arrays are there even when empty: scripts index them without a null check.
	assert.NotContains(t, out, "null")
	oom, _ := experiments.Lookup("cp-oom-restart")
	assert.NotEmpty(t, oom.NodeAccess, "the test needs an experiment with node access")
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// TestOutputRefusesOtherFormats: every command with -o refuses a format it does not know, with
// exit 2 naming the choices, before it does anything.
func TestOutputRefusesOtherFormats(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("MESHCHAOS_HOME", t.TempDir())
	for _, args := range [][]string{
		{"version", "-o", "yaml"},
		{"list", "-o", "yaml"},
		{"run", "cp-oom-restart", "-o", "yaml"},
		{"compare", "a", "b", "-o", "yaml"},
		{"suite", "nightly", "-o", "yaml"},
	} {
		code, out, errOut := runSplit(t, args...)
		assert.Equal(t, 2, code, "%v: %s", args, errOut)
		assert.Contains(t, errOut, `--output "yaml": want text or json`, "%v", args)
		assert.Empty(t, out, "%v", args)
	}
	left, err := os.ReadDir(".")
	require.NoError(t, err)
	assert.Empty(t, left, "a refused format created nothing")
}

func fakeSummary() *results.Summary {
	return &results.Summary{Experiment: "cp-oom-restart", Verdict: results.VerdictFail,
		Checks: []results.Check{
			{Name: "5xx rate", Pass: false, Observed: 1.2, Op: results.LE, Threshold: 0, Unit: "%"},
			{Name: "control-plane OOM kills", Pass: true, Observed: 1, Op: results.GE, Threshold: 1},
		}}
}

func TestPrintVerdictJSON(t *testing.T) {
	j := job{Experiment: "cp-oom-restart", Substrate: "local", CP: "reference:ungated"}
	var out bytes.Buffer
	require.NoError(t, printVerdict(&out, outputJSON, newRunResult(j, "runs/x", fakeSummary(), true)))
	var got map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	assert.Equal(t, "fail", got["verdict"])
	assert.Equal(t, "reference:ungated", got["controlPlane"])
	assert.Equal(t, "runs/x", got["runDir"])
	assert.Equal(t, filepath.Join("runs/x", results.SummaryFile), got["summary"])
	assert.Equal(t, filepath.Join("runs/x", results.MarkdownFile), got["report"])
	checks := got["checks"].([]any)
	require.Len(t, checks, 2)
	assert.Equal(t, "5xx rate", checks[0].(map[string]any)["name"])
	assert.Equal(t, false, checks[0].(map[string]any)["pass"])

	// Results that could not be written: no paths to files that are not there.
	out.Reset()
	require.NoError(t, printVerdict(&out, outputJSON, newRunResult(j, "runs/x", fakeSummary(), false)))
	assert.NotContains(t, out.String(), `"report"`)
	assert.NotContains(t, out.String(), `"summary"`)
}

func TestPrintVerdictText(t *testing.T) {
	j := job{Experiment: "cp-oom-restart", Substrate: "local", CP: "reference"}
	var out bytes.Buffer
	require.NoError(t, printVerdict(&out, outputText, newRunResult(j, "runs/x", fakeSummary(), true)))
	// One spelling of verdicts and check results: summary.json's.
	assert.Contains(t, out.String(), "cp-oom-restart (local, reference): fail\n")
	assert.Contains(t, out.String(), "  fail  5xx rate")
	assert.Contains(t, out.String(), "  pass  control-plane OOM kills")
	assert.Contains(t, out.String(), "report: runs/x/report.md\n")
	assert.NotRegexp(t, `FAIL|PASS|\bok\b`, out.String())
	assert.NotContains(t, out.String(), "cluster kept")
}

// TestPrintKept: a kept cluster's verdict says how to reach it and how to remove it, on each
// substrate, as text and in the JSON document.
func TestPrintKept(t *testing.T) {
	for _, tc := range []struct {
		kept results.KeptCluster
		want []string
	}{
		{results.KeptCluster{Name: "cpoo4242", Substrate: "local", Kubeconfig: "/var/lib/meshchaos/clusters/cpoo4242/kubeconfig", Why: "keep on-failure, verdict fail"},
			[]string{"cluster kept: cpoo4242 (local; keep on-failure, verdict fail)", "export KUBECONFIG=/var/lib/meshchaos/clusters/cpoo4242/kubeconfig", "kubectl get pods -A", "remove it: meshchaos cluster down cpoo4242\n"}},
		{results.KeptCluster{Name: "cpoo7", Substrate: "kind", Kubeconfig: "/root/.meshchaos/kind/cpoo7/kubeconfig", Why: "keep always, verdict pass"},
			[]string{"export KUBECONFIG=/root/.meshchaos/kind/cpoo7/kubeconfig", "remove it: meshchaos cluster down --substrate kind cpoo7\n"}},
		{results.KeptCluster{Name: "cpoo8", Substrate: "existing", Kubeconfig: "/home/me/staging.yaml", Context: "staging", Namespaces: []string{"meshchaos-workloads", "meshchaos-system"}, Why: "keep always, verdict pass"},
			[]string{"the run's namespaces stay: meshchaos-workloads, meshchaos-system", "export KUBECONFIG=/home/me/staging.yaml", "kubectl --context staging get pods -n meshchaos-workloads,meshchaos-system",
				"remove it: meshchaos cluster down --substrate existing cpoo8 --kubeconfig /home/me/staging.yaml --context staging\n"}},
	} {
		s := fakeSummary()
		s.Kept = &tc.kept
		var out bytes.Buffer
		require.NoError(t, printVerdict(&out, outputText, newRunResult(job{Experiment: "cp-oom-restart", Substrate: tc.kept.Substrate, CP: "reference"}, "runs/x", s, true)))
		for _, w := range tc.want {
			assert.Contains(t, out.String(), w)
		}
		out.Reset()
		require.NoError(t, printVerdict(&out, outputJSON, newRunResult(job{Experiment: "cp-oom-restart"}, "runs/x", s, true)))
		var got map[string]any
		require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
		assert.Equal(t, tc.kept.Name, got["keptCluster"].(map[string]any)["name"])
	}
}

// TestPrintComparisonJSON: compare -o json prints the document comparison.json holds.
func TestPrintComparisonJSON(t *testing.T) {
	c := &results.Comparison{Schema: "test", Base: "base-runs", Candidate: "cand-runs"}
	var out bytes.Buffer
	require.NoError(t, printComparison(&out, outputJSON, c))
	dir := t.TempDir()
	require.NoError(t, results.WriteComparison(dir, c))
	file, err := os.ReadFile(filepath.Join(dir, results.ComparisonJSONFile))
	require.NoError(t, err)
	assert.Equal(t, string(file), out.String())
}

// TestPrintSuiteResultJSON: suite -o json prints the document suite.json holds, and the paths
// the text names go to stderr.
func TestPrintSuiteResultJSON(t *testing.T) {
	start := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	res := &results.SuiteResult{Schema: results.SuiteSchema, Suite: "nightly", Substrate: "local",
		StartedAt: start, FinishedAt: start.Add(time.Minute), Planned: 1,
		Runs: []results.SuiteRun{{Experiment: "cp-oom-restart", ControlPlane: "reference", Repeat: 1,
			Expect: results.VerdictPass, Verdict: results.VerdictPass}}}
	var out, errOut bytes.Buffer
	require.NoError(t, printSuiteResult(&out, &errOut, outputJSON, res, "runs/s"))
	dir := t.TempDir()
	require.NoError(t, results.WriteSuiteResult(dir, res))
	file, err := os.ReadFile(filepath.Join(dir, results.SuiteFile))
	require.NoError(t, err)
	assert.Equal(t, string(file), out.String())
	assert.Contains(t, errOut.String(), "junit: runs/s/junit.xml")

	out.Reset()
	require.NoError(t, printSuiteResult(&out, &errOut, outputText, res, "runs/s"))
	assert.Contains(t, out.String(), "suite nightly (local, 1m0s):\n  ok          ")
	assert.Contains(t, out.String(), "junit: runs/s/junit.xml")
}
