package experiments

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/suite"
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

func init() { caseAssertions["serviceentry-scale"] = assertServiceEntryScale }

// assertServiceEntryScale: every run keeps its per-step record, table and profiles; the plain
// reference reaches the oracle client at every step with no mismatch; each of incident 4's
// switches shows in what the record holds of it.
func assertServiceEntryScale(t *testing.T, c suite.Case, s results.Summary, dir string) {
	require.NotNil(t, s.Scale, "the scale record is in summary.json")
	assert.Len(t, s.Scale.Steps, 3)
	md, err := os.ReadFile(filepath.Join(dir, results.MarkdownFile))
	require.NoError(t, err)
	assert.Contains(t, string(md), "## Scale", "report.md has the per-step table")
	for _, st := range s.Scale.Steps {
		assert.FileExists(t, filepath.Join(dir, st.Profile), "a heap profile per step")
		assert.True(t, st.Converged, "step %d reached the oracle client", st.ServiceEntries)
	}
	switch c.ControlPlane {
	case "reference":
		assert.Empty(t, s.Scale.Mismatches)
	case "reference:quadratic-scope":
		// As in the incident, the heap profile names the culprit: the per-service scopes.
		top := s.Scale.Steps[len(s.Scale.Steps)-1].Top
		require.NotEmpty(t, top)
		assert.Contains(t, top[0].Function, "buildScopes", "the largest step's top allocation site")
	case "reference:se-endpoint-port":
		require.NotEmpty(t, s.Scale.Mismatches)
		m := s.Scale.Mismatches[0]
		assert.True(t, strings.HasSuffix(m.Got, ":80"), "the ServiceEntry port replaced the endpoint's own: %+v", m)
	}
}
