package results

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func night(at time.Time, v float64, runs ...SuiteRun) SuiteResult {
	r := SuiteRun{Entry: 0, Repeat: 1, Experiment: "endpoint-flap", ControlPlane: "reference", Expect: VerdictPass, Verdict: VerdictPass,
		Measures: map[string]RunMeasure{"push p99": {Value: v, Unit: "ms"}}}
	return SuiteResult{Suite: "nightly", StartedAt: at, FinishedAt: at.Add(time.Minute), Planned: 1 + len(runs), Runs: append([]SuiteRun{r}, runs...)}
}

func TestTrendsFlagAChangeBeyondTheNoiseOnly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)
	var nights []SuiteResult
	for i, v := range []float64{100, 104, 98, 101, 99} {
		nights = append(nights, night(t0.Add(time.Duration(i)*24*time.Hour), v))
	}
	// Earlier nights: median 100.5, MAD 1.5 → band max(3·1.4826·1.5, 5 % of 100.5) ≈ 6.7.
	tr := Trends(nights)
	require.Len(t, tr, 1)
	assert.True(t, tr[0].Judged)
	assert.False(t, tr[0].Changed, "99 is within the noise: %+v", tr[0])
	assert.InDelta(t, 100.5, tr[0].Median, 1e-9)
	assert.InDelta(t, 3*1.4826*1.5, tr[0].Band, 1e-9)

	nights = append(nights, night(t0.Add(5*24*time.Hour), 130))
	tr = Trends(nights)
	assert.True(t, tr[0].Changed, "130 is far outside 100 ± 7")
	assert.Len(t, tr[0].Points, 6)

	// Too few earlier nights: shown, not judged.
	tr = Trends(nights[:3])
	assert.False(t, tr[0].Judged)
	assert.False(t, tr[0].Changed)

	// Identical history (MAD 0): the floor keeps a change in the last digit from being flagged.
	flat := []SuiteResult{night(t0, 10), night(t0.Add(time.Hour), 10), night(t0.Add(2*time.Hour), 10), night(t0.Add(3*time.Hour), 10.2)}
	assert.False(t, Trends(flat)[0].Changed)
	flat[3] = night(t0.Add(3*time.Hour), 12)
	assert.True(t, Trends(flat)[0].Changed)
}

func TestSuiteJUnitFailsAnUnexpectedVerdict(t *testing.T) {
	at := time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)
	caught := SuiteRun{Entry: 1, Repeat: 1, Experiment: "cp-oom-restart", ControlPlane: "reference:ungated", Expect: VerdictFail, Verdict: VerdictFail,
		Failed: []string{"error rate: observed 1.2 %, want ≤ 0 %"}}
	missed := SuiteRun{Entry: 2, Repeat: 1, Experiment: "endpoint-flap", ControlPlane: "reference:full-push-on-endpoint-reappear", Expect: VerdictFail, Verdict: VerdictPass}
	broke := SuiteRun{Entry: 3, Repeat: 1, Experiment: "serviceentry-scale", ControlPlane: "reference", Expect: VerdictPass, Verdict: VerdictFail,
		Failed: []string{"bytes per endpoint: observed 4096 B, want ≤ 2048 B"}}
	wrong := NewSuiteRun(&Summary{Verdict: VerdictFail, Checks: []Check{{Name: "error rate", Pass: true}, {Name: "control-plane OOM kills", Op: GE, Threshold: 1}}},
		5, 1, "cp-oom-restart", "reference:ungated", []string{"rate=50"}, Expect{Verdict: VerdictFail, Failing: []string{"error rate"}}, "05", 60, nil)
	errored := SuiteRun{Entry: 4, Repeat: 1, Experiment: "sidecar-startup", ControlPlane: "reference", Expect: VerdictPass, Verdict: VerdictError, Error: "cluster up: no space"}
	s := night(at, 100, caught, missed, broke, errored, wrong)
	s.Planned++ // one run never ran
	assert.False(t, s.OK())

	b, err := SuiteJUnit(&s)
	require.NoError(t, err)
	var doc junitSuites
	require.NoError(t, xml.Unmarshal(b, &doc))
	require.Len(t, doc.Suites, 1)
	js := doc.Suites[0]
	assert.Equal(t, 7, js.Tests, "six runs and the interruption")
	assert.Equal(t, 3, js.Failures)
	assert.Equal(t, 2, js.Errors)
	byName := map[string]junitCase{}
	for _, c := range js.Cases {
		byName[c.Name] = c
	}
	assert.Nil(t, byName["cp-oom-restart [reference:ungated]"].Failure, "a switch caught is a pass")
	assert.Contains(t, byName["endpoint-flap [reference:full-push-on-endpoint-reappear]"].Failure.Message, "did not catch")
	assert.Contains(t, byName["serviceentry-scale [reference]"].Failure.Message, "bytes per endpoint")
	assert.Contains(t, byName["sidecar-startup [reference]"].Error.Message, "no space")
	// The switch's verdict, but not its bug: the OOM kill missing is not the ungated restart caught.
	assert.False(t, wrong.AsExpected())
	assert.Contains(t, byName["cp-oom-restart [reference:ungated] rate=50"].Failure.Message, `check "error rate" passed`)
}

func TestSuiteIndexShowsRunsSpreadAndTrends(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)
	var nights []SuiteResult
	for i, v := range []float64{100, 104, 98, 101, 150} {
		n := night(t0.Add(time.Duration(i)*24*time.Hour), v)
		again := n.Runs[0]
		again.Repeat = 2
		again.Measures = map[string]RunMeasure{"push p99": {Value: v + 10, Unit: "ms"}}
		n.Runs = append(n.Runs, again)
		n.Planned = 2
		nights = append(nights, n)
	}
	cur := nights[len(nights)-1]
	h, err := SuiteIndex(&cur, nights)
	require.NoError(t, err)
	page := string(h)
	assert.Contains(t, page, `href="`, "runs link their reports")
	assert.Contains(t, page, "Spread over repeats")
	assert.Contains(t, page, "160 ms", "the spread's max")
	assert.Equal(t, 1, strings.Count(page, "<svg"), "one inline chart per entry × measure")
	assert.Contains(t, page, "1 of 1 measures changed beyond the noise")
	assert.Contains(t, page, `class="trend changed"`)
}
