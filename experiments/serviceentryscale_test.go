package experiments

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

func TestServiceEntryScaleParams(t *testing.T) {
	d, ok := Lookup("serviceentry-scale")
	require.True(t, ok)
	v, err := d.Resolve(nil)
	require.NoError(t, err)
	assert.Equal(t, []int{500, 1000, 2500, 5000}, v.Ints("steps"))
	assert.Equal(t, 10, v.Int("endpoints"))
	assert.Equal(t, int64(0), v.Bytes("memoryBudget"))
	v, err = d.Resolve([]string{"steps=50000", "memoryBudget=1Gi"})
	require.NoError(t, err)
	assert.Equal(t, int64(1<<30), v.Bytes("memoryBudget"))
	for bad, want := range map[string]string{
		"steps=5000,1000": "increasing whole numbers from 1 to 50000",
		"steps=50001":     "increasing whole numbers from 1 to 50000",
		"memoryBudget=x":  "want a quantity",
		"endpoints=0":     "from 1 to 100",
	} {
		_, err := d.Resolve([]string{bad})
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), want, bad)
		}
	}
	assert.Len(t, d.Checks(v), 7, "with a budget the projection is checked too")
}

func TestProjectCapacity(t *testing.T) {
	// RSS grows 6000 B per endpoint above a 16 MiB baseline.
	fit := results.PowerFit{Exponent: 1, Coeff: 6000, Points: 4}
	lin := projectCapacity(fit, 16<<20, 1<<30, 10, maxScaleSEs)
	// (1 GiB − 16 MiB) / 6000 B ≈ 176 160 endpoints, whole ServiceEntries.
	assert.Equal(t, 176160, lin.Endpoints)
	assert.Equal(t, 17616, lin.ServiceEntries)
	assert.False(t, lin.Capped)
	p := projectCapacity(fit, 16<<20, 64<<30, 10, maxScaleSEs)
	assert.True(t, p.Capped)
	assert.Equal(t, maxScaleSEs, p.ServiceEntries)
	p = projectCapacity(fit, 16<<20, 8<<20, 10, maxScaleSEs)
	assert.Zero(t, p.Endpoints, "a budget below the baseline holds nothing")
	// Quadratic growth holds far less under the same budget.
	q := projectCapacity(results.PowerFit{Exponent: 2, Coeff: 2.4, Points: 4}, 16<<20, 1<<30, 10, maxScaleSEs)
	assert.Less(t, q.Endpoints, lin.Endpoints/5)
}

// TestServiceEntryScaleBothWays: at a small scale the experiment passes against the reference
// control plane and fails against each of incident 4's switches, on the check that names it.
func TestServiceEntryScaleBothWays(t *testing.T) {
	l := newLocalRunner(t)
	// 200/400/800 SEs: large enough for quadratic-scope's n² scopes to outgrow the linear part
	// (at 50–200 SEs the fixed baseline still hides them).
	sets := []string{"steps=" + testScaleSteps, "convergeTimeout=60s", "maxBytesPerEndpoint=" + testScaleBytesPerEndpoint}
	run := func(cp string) results.Summary {
		s, dir := l.run("serviceentry-scale", cp, sets, 5*time.Minute)
		require.NotNil(t, s.Scale, "the scale record is in summary.json")
		assert.Len(t, s.Scale.Steps, 3)
		md, err := os.ReadFile(filepath.Join(dir, results.MarkdownFile))
		require.NoError(t, err)
		assert.Contains(t, string(md), "## Scale", "report.md has the per-step table")
		for _, st := range s.Scale.Steps {
			assert.FileExists(t, filepath.Join(dir, st.Profile), "a heap profile per step")
		}
		return s
	}
	check := func(s results.Summary, name string) results.Check {
		for _, c := range s.Checks {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no check %q in %+v", name, s.Checks)
		return results.Check{}
	}

	plain := run("reference")
	assert.Equal(t, results.VerdictPass, plain.Verdict, "%+v", plain.Checks)
	assert.Empty(t, plain.Scale.Mismatches)
	for _, st := range plain.Scale.Steps {
		assert.True(t, st.Converged, "step %d reached the oracle client", st.ServiceEntries)
	}

	quad := run("reference:quadratic-scope")
	assert.Equal(t, results.VerdictFail, quad.Verdict)
	assert.False(t, check(quad, "heap growth exponent").Pass, "quadratic-scope: the exponent gives it away: %+v", quad.Checks)
	assert.Greater(t, quad.Scale.Fit.Exponent, plain.Scale.Fit.Exponent)
	// As in the incident, the heap profile names the culprit: the per-service scopes.
	top := quad.Scale.Steps[len(quad.Scale.Steps)-1].Top
	require.NotEmpty(t, top)
	assert.Contains(t, top[0].Function, "buildScopes", "the largest step's top allocation site")

	port := run("reference:se-endpoint-port")
	assert.Equal(t, results.VerdictFail, port.Verdict)
	assert.False(t, check(port, "endpoint-port oracle mismatches").Pass, "%+v", port.Checks)
	require.NotEmpty(t, port.Scale.Mismatches)
	m := port.Scale.Mismatches[0]
	assert.True(t, strings.HasSuffix(m.Got, ":80"), "the ServiceEntry port replaced the endpoint's own: %+v", m)

	stale := run("reference:we-stale-label")
	assert.Equal(t, results.VerdictFail, stale.Verdict)
	assert.False(t, check(stale, "workload-entry oracle mismatches").Pass, "%+v", stale.Checks)
	assert.True(t, check(stale, "endpoint-port oracle mismatches").Pass, "only the WorkloadEntry oracle fails: %+v", stale.Checks)
}

// The test scale (see TestServiceEntryScaleBothWays).
const (
	testScaleSteps            = "200,400,800"
	testScaleBytesPerEndpoint = "3072"
)
