package results

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flapRun is an endpoint-flap run: three flaps (0→1 in the API), p99 convergence, pushes while flapping.
func flapRun(cp string, p99 float64, full, eds int64, heapMiB int64) *Summary {
	return &Summary{Experiment: "endpoint-flap", ControlPlane: cp, Verdict: VerdictPass,
		Convergence: &Convergence{Latency: Histogram{Count: 10, P99Ms: p99},
			Changes: []EndpointChange{{Ready: 1}, {Ready: 0}, {Ready: 1}, {Ready: 0}, {Ready: 1}}},
		ControlPlaneStats: &ControlPlaneStats{ChaosPushes: &Pushes{Full: full, EDS: eds}, PeakHeapBytes: heapMiB << 20}}
}

// oomRun is a cp-oom-restart run whose control plane was ready again readyAfter after its kill
// (and once before it, at its first start).
func oomRun(cp string, readyAfter time.Duration) *Summary {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	return &Summary{Experiment: "cp-oom-restart", ControlPlane: cp, Verdict: VerdictPass, Events: []Event{
		{At: t0, Kind: EventCPReady, Detail: "first start ready"},
		{At: t0.Add(30 * time.Second), Kind: EventCPOOMKilled},
		{At: t0.Add(30*time.Second + readyAfter), Kind: EventCPReady},
	}}
}

func row(t *testing.T, f *Fidelity, experiment, measure string) FidelityRow {
	t.Helper()
	for _, r := range f.Rows {
		if r.Experiment == experiment && r.Measure == measure {
			return r
		}
	}
	t.Fatalf("no row %s %s in %+v", experiment, measure, f.Rows)
	return FidelityRow{}
}

// TestFidelityTable: medians, ratios reference/istiod and each measure's status from two sides'
// runs: a timing within 2x agrees, a count 3x apart differs, counts within the noise floor agree
// whatever their ratio, a cost is shown as cheaper, and the conclusion names what differs.
func TestFidelityTable(t *testing.T) {
	istiod := []Run{
		{Dir: "i/1", Summary: flapRun("istiod@2026-08", 100, 0, 10, 60)},
		{Dir: "i/2", Summary: flapRun("istiod@2026-08", 110, 1, 12, 62)},
		{Dir: "i/3", Summary: flapRun("istiod@2026-08", 120, 0, 14, 64)},
		{Dir: "i/4", Summary: oomRun("istiod@2026-08", 4*time.Second)},
		{Dir: "i/5", Summary: oomRun("istiod@2026-08", 6*time.Second)},
	}
	reference := []Run{
		{Dir: "r/1", Summary: flapRun("reference", 150, 0, 36, 30)},
		{Dir: "r/2", Summary: flapRun("reference", 160, 0, 36, 31)},
		{Dir: "r/3", Summary: flapRun("reference", 170, 0, 40, 32)},
		{Dir: "r/4", Summary: oomRun("reference", 5*time.Second)},
		{Dir: "r/5", Summary: oomRun("reference", 7*time.Second)},
	}
	c, err := Compare(istiod, reference, CompareOptions{})
	require.NoError(t, err)
	c.Base, c.Candidate = "istiod@2026-08", "reference"
	f := FidelityOf(c)

	conv := row(t, f, "endpoint-flap", "convergence p99")
	assert.Equal(t, []float64{100, 110, 120}, conv.Istiod)
	assert.InDelta(t, 110, *conv.IstiodMedian, 1e-9)
	assert.InDelta(t, 160, *conv.ReferenceMedian, 1e-9)
	assert.InDelta(t, 160.0/110, *conv.Ratio, 1e-9)
	assert.Equal(t, "agrees", conv.Status)

	eds := row(t, f, "endpoint-flap", "eds pushes per flap")
	assert.InDelta(t, 4, *eds.IstiodMedian, 1e-9, "12 EDS pushes over 3 flaps")
	assert.InDelta(t, 12, *eds.ReferenceMedian, 1e-9)
	assert.Equal(t, "differs", eds.Status)

	full := row(t, f, "endpoint-flap", "full pushes per flap")
	assert.Nil(t, full.Ratio, "istiod's median is 0")
	assert.Equal(t, "agrees", full.Status, "0 against 0 per flap is within the noise floor")

	assert.Equal(t, "cheaper", row(t, f, "endpoint-flap", "peak heap").Status)

	ready := row(t, f, "cp-oom-restart", "ready after the kill")
	assert.Equal(t, []float64{4, 6}, ready.Istiod, "from the kill to the ready after it, not the first start's")
	assert.InDelta(t, 6.0/5, *ready.Ratio, 1e-9)
	assert.Equal(t, "agrees", ready.Status)

	assert.Equal(t, []string{"endpoint-flap: eds pushes per flap"}, f.Differs())
	assert.Contains(t, f.Outcome(), "differs from istiod beyond 2x in 1 measure(s): endpoint-flap: eds pushes per flap")

	var table bytes.Buffer
	require.NoError(t, f.WriteTable(&table))
	assert.Contains(t, table.String(), "eds pushes per flap")

	dir := t.TempDir()
	require.NoError(t, WriteFidelity(dir, f))
	assert.ElementsMatch(t, []string{FidelityJSONFile, FidelityMarkdownFile}, FidelityIn(dir))
	b, err := os.ReadFile(filepath.Join(dir, FidelityJSONFile))
	require.NoError(t, err)
	var back Fidelity
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, FidelitySchema, back.Schema)
	assert.Len(t, back.Rows, len(f.Rows))
	md, err := os.ReadFile(filepath.Join(dir, FidelityMarkdownFile))
	require.NoError(t, err)
	assert.Contains(t, string(md), "| endpoint-flap | eds pushes per flap | count | 4 | 12 | 3.00 | differs |")
}

// TestFidelityIncompleteAndUnmeasured: an experiment without a usable run on a side is no
// conclusion, and a measure only one side has is not comparable, never agreeing.
func TestFidelityIncompleteAndUnmeasured(t *testing.T) {
	broken := flapRun("istiod", 100, 0, 10, 60)
	broken.Verdict, broken.Error = VerdictError, "setup failed"
	noConvergence := flapRun("reference", 0, 0, 0, 30)
	noConvergence.Convergence = nil
	c, err := Compare([]Run{{Dir: "i/1", Summary: broken}, {Dir: "i/2", Summary: oomRun("istiod", 4*time.Second)}},
		[]Run{{Dir: "r/1", Summary: noConvergence}, {Dir: "r/2", Summary: &Summary{Experiment: "cp-oom-restart", Verdict: VerdictPass}}}, CompareOptions{})
	require.NoError(t, err)
	f := FidelityOf(c)
	require.Len(t, f.Errors, 1)
	assert.Contains(t, f.Errors[0], "endpoint-flap")
	assert.Contains(t, f.Outcome(), "incomplete")
	ready := row(t, f, "cp-oom-restart", "ready after the kill")
	assert.Equal(t, "not comparable", ready.Status)
	assert.Nil(t, ready.ReferenceMedian)
	assert.Empty(t, f.Differs())
	assert.Equal(t, []string{"cp-oom-restart: ready after the kill"}, f.Unmeasured())
	assert.False(t, f.Concluded())

	// With both experiments compared, the figure measured on one side only still concludes
	// nothing; nor does a table with no figure at all.
	f.Errors = nil
	assert.Contains(t, f.Outcome(), "incomplete: 1 timing or count measured on one side only (cp-oom-restart: ready after the kill)")
	assert.False(t, f.Concluded())
	empty := &Fidelity{Factor: FidelityFactor}
	assert.False(t, empty.Concluded())
	assert.Contains(t, empty.Outcome(), "no figure")
}
