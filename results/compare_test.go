package results

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func row(t *testing.T, c *Comparison, name string) Row {
	for _, r := range c.Rows {
		if r.Metric.Name == name {
			return r
		}
	}
	t.Fatalf("no row %q", name)
	return Row{}
}

func TestCompareSameRunsNoRegression(t *testing.T) {
	c, err := Compare([]*Summary{sample()}, []*Summary{sample()}, 10)
	require.NoError(t, err)
	assert.False(t, c.Regressed())
	assert.Zero(t, row(t, c, "error rate").ChangePct)
}

func TestCompareRegressions(t *testing.T) {
	base, cand := sample(), sample()
	cand.Traffic.ErrorRate = base.Traffic.ErrorRate * 1.2 // +20 %
	c, err := Compare([]*Summary{base}, []*Summary{cand}, 10)
	require.NoError(t, err)
	r := row(t, c, "error rate")
	assert.InDelta(t, 20, r.ChangePct, 1e-9)
	assert.True(t, r.Regression)
	assert.True(t, c.Regressed())

	c, err = Compare([]*Summary{base}, []*Summary{cand}, 25)
	require.NoError(t, err)
	assert.False(t, c.Regressed(), "within --max-regression 25")

	// Tiny latencies: +50 % but +0.5 ms is under the floor.
	cand = sample()
	cand.Traffic.LatencyMs.P50 = 1.5
	c, err = Compare([]*Summary{base}, []*Summary{cand}, 10)
	require.NoError(t, err)
	assert.False(t, row(t, c, "latency p50").Regression)

	// From zero to something is an infinite regression.
	base.ControlPlaneStats.Pushes.Full, cand.ControlPlaneStats.Pushes.Full = 0, 2
	c, err = Compare([]*Summary{base}, []*Summary{cand}, 10)
	require.NoError(t, err)
	r = row(t, c, "full pushes")
	assert.True(t, math.IsInf(r.ChangePct, 1))
	assert.True(t, r.Regression)

	// Restarts are what the chaos does: shown, never gated.
	base, cand = sample(), sample()
	cand.ControlPlaneStats.Restarts = 5
	c, err = Compare([]*Summary{base}, []*Summary{cand}, 10)
	require.NoError(t, err)
	assert.False(t, c.Regressed())
	assert.Equal(t, 400.0, row(t, c, "restarts").ChangePct)

	// Improvement is fine.
	cand = sample()
	cand.Traffic.ErrorRate = 0
	c, err = Compare([]*Summary{base}, []*Summary{cand}, 0)
	require.NoError(t, err)
	assert.False(t, c.Regressed())
}

func TestCompareCheckRegression(t *testing.T) {
	base, cand := sample(), sample()
	cand.Checks[1] = NewCheck("control-plane OOM kills", 0, GE, 1, "")
	c, err := Compare([]*Summary{base}, []*Summary{cand}, 1000)
	require.NoError(t, err)
	require.Len(t, c.Checks, 2)
	assert.Equal(t, CheckChange{Name: "control-plane OOM kills", Base: "pass", Cand: "fail", Regression: true}, c.Checks[1])
	assert.False(t, c.Checks[0].Regression, "failed before, fails now")
	assert.True(t, c.Regressed())
}

func TestCompareRepeatsUseMean(t *testing.T) {
	a, b, c1 := sample(), sample(), sample()
	a.Traffic.LatencyMs.P99, b.Traffic.LatencyMs.P99 = 10, 20
	c1.Traffic.LatencyMs.P99 = 16
	c, err := Compare([]*Summary{a, b}, []*Summary{c1}, 10)
	require.NoError(t, err)
	r := row(t, c, "latency p99")
	assert.Equal(t, 15.0, r.Base)
	assert.Equal(t, 2, r.BaseN)
	assert.Equal(t, 1, r.CandN)
	assert.False(t, r.Regression, "+6.7 %")
	// One run fails a check the other passes: "mixed" in the base is not a pass to regress from.
	b.Checks[1] = NewCheck("control-plane OOM kills", 0, GE, 1, "")
	c, err = Compare([]*Summary{a, b}, []*Summary{c1}, 10)
	require.NoError(t, err)
	assert.Equal(t, "mixed", c.Checks[1].Base)
}

func TestCompareRejects(t *testing.T) {
	_, err := Compare(nil, []*Summary{sample()}, 10)
	assert.Error(t, err)
	other := sample()
	other.Experiment = "flap"
	_, err = Compare([]*Summary{sample()}, []*Summary{other}, 10)
	assert.ErrorContains(t, err, "different experiments")
}

func TestCompareTable(t *testing.T) {
	base, cand := sample(), sample()
	cand.Traffic.ErrorWindowSeconds = 10
	c, err := Compare([]*Summary{base}, []*Summary{cand}, 10)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, c.WriteTable(&b))
	assert.Regexp(t, `error window\s+2 s\s+10 s\s+\+400.0 %\s+REGRESSION \(> 10 %\)`, b.String())
	assert.Regexp(t, `restarts\s+1\s+1\s+\+0.0 %\s+info`, b.String())
	assert.Regexp(t, `control-plane OOM kills\s+pass\s+pass\s+ok`, b.String())
}
