package results

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"slices"
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

// historyLine is one execution of the nightly suite as AppendHistory writes it.
func historyLine(t *testing.T, day int) []byte {
	t.Helper()
	n := night(time.Date(2026, 1, day, 2, 0, 0, 0, time.UTC), float64(100+day))
	b, err := json.Marshal(n)
	require.NoError(t, err)
	return append(b, '\n')
}

// TestReadHistorySkipsATornLastLine: a crash while a line was appended leaves its beginning
// (no newline, or not valid JSON): that last line is skipped with a warning naming the file
// and line, and the nights before it are read — one crash must not refuse every later run. A bad
// line in the middle is someone's edit, not a crash: still an error naming it.
func TestReadHistorySkipsATornLastLine(t *testing.T) {
	whole := append(historyLine(t, 1), historyLine(t, 2)...)
	torn := historyLine(t, 3)[:40]
	for name, tc := range map[string]struct {
		content []byte
		want    int
		warn    string
		err     string
	}{
		"whole":                        {content: whole, want: 2},
		"ends without a newline":       {content: slices.Concat(whole, torn), want: 2, warn: "line 3: skipped"},
		"last line not json":           {content: slices.Concat(whole, torn, []byte("\n")), want: 2, warn: "line 3: skipped"},
		"torn line then blank lines":   {content: slices.Concat(whole, torn, []byte("\n\n \n")), want: 2, warn: "line 3: skipped"},
		"a whole record, newline lost": {content: slices.Concat(whole, bytes.TrimSuffix(historyLine(t, 3), []byte("\n"))), want: 3},
		"a bad line in the middle":     {content: slices.Concat(historyLine(t, 1), torn, []byte("\n"), historyLine(t, 2)), err: "line 2"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := HistoryFile(dir, "nightly")
			require.NoError(t, os.WriteFile(file, tc.content, 0o644))
			var warn bytes.Buffer
			got, err := ReadHistory(dir, "nightly", 0, &warn)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), file+" "+tc.err)
				assert.Contains(t, err.Error(), "fix or remove the line")
				return
			}
			require.NoError(t, err)
			assert.Len(t, got, tc.want)
			if tc.warn == "" {
				assert.Empty(t, warn.String())
				return
			}
			assert.Contains(t, warn.String(), "warning: history "+file+" "+tc.warn)
		})
	}
}

// TestAppendHistoryRepairsATornTail: appending after a crash that tore the last line cuts the
// torn part off (appended to, it would become a bad line in the middle and refuse every later
// run), and ends a whole last record that lost its newline instead of running into it.
func TestAppendHistoryRepairsATornTail(t *testing.T) {
	for name, tc := range map[string]struct {
		tail []byte
		want int
		warn string
	}{
		"torn":                    {tail: historyLine(t, 2)[:40], want: 2, warn: "cut off its torn last line (40 bytes"},
		"torn with a newline":     {tail: append(historyLine(t, 2)[:40:40], '\n'), want: 2, warn: "cut off its torn last line (41 bytes"},
		"whole but no newline":    {tail: bytes.TrimSuffix(historyLine(t, 2), []byte("\n")), want: 3},
		"whole, ends with a line": {tail: historyLine(t, 2), want: 3},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := HistoryFile(dir, "nightly")
			require.NoError(t, os.WriteFile(file, slices.Concat(historyLine(t, 1), tc.tail), 0o644))
			var warn bytes.Buffer
			next := night(time.Date(2026, 1, 9, 2, 0, 0, 0, time.UTC), 109)
			require.NoError(t, AppendHistory(dir, &next, &warn))
			if tc.warn == "" {
				assert.Empty(t, warn.String())
			} else {
				assert.Contains(t, warn.String(), "history "+file+": "+tc.warn)
			}

			warn.Reset()
			got, err := ReadHistory(dir, "nightly", 0, &warn)
			require.NoError(t, err)
			assert.Empty(t, warn.String(), "nothing torn is left")
			require.Len(t, got, tc.want)
			assert.Equal(t, next.StartedAt, got[len(got)-1].StartedAt, "the new night is read back, last")
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			assert.True(t, bytes.HasSuffix(b, []byte("}\n")))
		})
	}
}

// TestAppendHistorySyncsEveryLine: the line is on disk (fsync) before AppendHistory returns,
// and a sync that fails is an error naming the file: a night still in the page cache when the
// machine goes down is lost.
func TestAppendHistorySyncsEveryLine(t *testing.T) {
	dir := t.TempDir()
	var synced [][]byte
	var fail error
	defer func(orig func(*os.File) error) { syncFile = orig }(syncFile)
	syncFile = func(f *os.File) error {
		b, err := os.ReadFile(f.Name())
		require.NoError(t, err)
		synced = append(synced, b)
		if fail != nil {
			return fail
		}
		return f.Sync()
	}
	first, second := night(time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC), 1), night(time.Date(2026, 1, 2, 2, 0, 0, 0, time.UTC), 2)
	require.NoError(t, AppendHistory(dir, &first, io.Discard))
	require.NoError(t, AppendHistory(dir, &second, io.Discard))
	require.Len(t, synced, 2, "one sync per line")
	assert.Equal(t, 1, bytes.Count(synced[0], []byte("\n")), "synced after the first line was written")
	assert.Equal(t, 2, bytes.Count(synced[1], []byte("\n")), "synced after the second line was written")

	fail = errors.New("input/output error")
	err := AppendHistory(dir, &second, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "history "+HistoryFile(dir, "nightly")+": sync: input/output error")

	fi, err := os.Stat(HistoryFile(dir, "nightly"))
	require.NoError(t, err)
	assert.Equal(t, FileMode, fi.Mode().Perm())
}

// interruptedNight is a suite of three planned runs stopped by SIGTERM in run 2's chaos phase:
// run 1 passed as expected, run 2 was cut short (verdict error), run 3 never ran.
func interruptedNight() SuiteResult {
	at := time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)
	s := night(at, 100, SuiteRun{Entry: 1, Repeat: 1, Experiment: "cp-oom-restart", ControlPlane: "reference", Expect: VerdictPass,
		Verdict: VerdictError, Error: "interrupted by terminated"})
	s.Planned = 3
	s.Interrupted = &SuiteInterruption{Interruption: Interruption{Signal: "terminated", At: at.Add(30 * time.Second), Phase: "chaos"}, Run: 2, Runs: 3}
	return s
}

// TestSuiteInterruptionIsNoVerdict: an interrupted suite is not OK even when every run it made
// gave its expected verdict, and junit.xml, suite.json and index.html say which signal stopped
// it during which run.
func TestSuiteInterruptionIsNoVerdict(t *testing.T) {
	s := interruptedNight()
	assert.False(t, s.OK())
	s.Runs, s.Planned = s.Runs[:1], 1 // every planned run ran, as expected: still no verdict
	assert.False(t, s.OK(), "interrupted during its last run")
	s.Interrupted = nil
	assert.True(t, s.OK(), "the same suite not interrupted")

	s = interruptedNight()
	assert.Equal(t, "interrupted by SIGTERM during run 2/3 (phase chaos)", s.Interrupted.String())
	b, err := SuiteJUnit(&s)
	require.NoError(t, err)
	var doc junitSuites
	require.NoError(t, xml.Unmarshal(b, &doc))
	js := doc.Suites[0]
	assert.Equal(t, 3, js.Tests, "two runs and the interruption")
	assert.Equal(t, 2, js.Errors, "the run cut short and the interruption")
	last := js.Cases[len(js.Cases)-1]
	require.NotNil(t, last.Error)
	assert.Equal(t, "Interrupted", last.Error.Type)
	assert.Equal(t, "interrupted by SIGTERM during run 2/3 (phase chaos) at 2026-01-01T02:00:30Z: no verdict; 1 of 3 planned runs did not run", last.Error.Message)

	// Interrupted during the last run: nothing missing, still an errored case.
	s.Runs = append(s.Runs, s.Runs[1])
	s.Interrupted.Run = 3
	b, err = SuiteJUnit(&s)
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(b, &doc))
	assert.Contains(t, string(b), "interrupted by SIGTERM during run 3/3 (phase chaos) at 2026-01-01T02:00:30Z: no verdict; 0 of 3 planned runs did not run")

	s = interruptedNight()
	dir := t.TempDir()
	require.NoError(t, WriteSuite(dir, &s, nil))
	raw, err := os.ReadFile(dir + "/" + SuiteFile)
	require.NoError(t, err)
	var back SuiteResult
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, s.Interrupted, back.Interrupted)
	assert.Contains(t, string(raw), `"signal": "terminated"`, "spelled as the run's summary spells it")
	assert.Contains(t, string(raw), `"run": 2`)
	page, err := os.ReadFile(dir + "/" + SuiteIndexFile)
	require.NoError(t, err)
	assert.Contains(t, string(page), "Interrupted — no verdict: interrupted by SIGTERM during run 2/3 (phase chaos) at 2026-01-01 02:00:30 UTC; 1 of 2 runs made gave their expected verdict, 1 of 3 did not run")
	assert.NotContains(t, string(page), "Every run gave its expected verdict")
}

// TestSuiteInterruptionBetweenRuns names the run that did not start, and signals by their usual
// names.
func TestSuiteInterruptionBetweenRuns(t *testing.T) {
	in := SuiteInterruption{Interruption: Interruption{Signal: "hangup"}, Run: 3, Runs: 4, BetweenRuns: true}
	assert.Equal(t, "interrupted by SIGHUP before run 3/4 started", in.String())
	for goName, name := range map[string]string{"interrupt": "SIGINT", "terminated": "SIGTERM", "hangup": "SIGHUP", "quit": "SIGQUIT", "user defined signal 1": "user defined signal 1"} {
		assert.Equal(t, name, SignalName(goName))
	}
}
