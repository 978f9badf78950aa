package results

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSummaryRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := sample()
	require.NoError(t, Write(dir, s))
	got, err := Read(dir)
	require.NoError(t, err)
	assert.Equal(t, s, got)
}

func TestValidateRejects(t *testing.T) {
	cases := map[string]struct {
		mutate func(s *Summary)
		want   string
	}{
		"schema":           {func(s *Summary) { s.Schema = "meshchaos/v0" }, `schema is "meshchaos/v0"`},
		"experiment":       {func(s *Summary) { s.Experiment = " " }, "experiment is empty"},
		"started":          {func(s *Summary) { s.StartedAt = time.Time{} }, "startedAt is missing"},
		"finished before":  {func(s *Summary) { e := s.StartedAt.Add(-time.Second); s.FinishedAt = &e }, "before startedAt"},
		"verdict unknown":  {func(s *Summary) { s.Verdict = "ok" }, `verdict is "ok"`},
		"pass but failing": {func(s *Summary) { s.Verdict = VerdictPass }, "disagrees with the checks"},
		"unfinished pass": {func(s *Summary) {
			s.Checks = s.Checks[1:]
			s.Verdict, s.FinishedAt = VerdictPass, nil
		}, "without finishedAt"},
		"check lies":    {func(s *Summary) { s.Checks[1].Pass = false }, "pass=false but 1 >= 1 is true"},
		"check op":      {func(s *Summary) { s.Checks[0].Op = "~" }, `op "~"`},
		"errors > reqs": {func(s *Summary) { s.Traffic.Errors = 401 }, "errors 401 out of requests 400"},
		"rate range":    {func(s *Summary) { s.Traffic.ErrorRate = 1.5 }, "errorRate 1.5"},
		"series sum":    {func(s *Summary) { s.Traffic.Series[0].Requests = 99 }, "series add up to 399 requests"},
		"series order":  {func(s *Summary) { s.Traffic.Series[2].T = 1 }, "t=1 not after 1"},
		"event kind":    {func(s *Summary) { s.Events[0].Kind = "" }, "events[0]: kind and at are required"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := sample()
			c.mutate(s)
			assert.ErrorContains(t, s.Validate(), c.want)
			assert.Error(t, Write(t.TempDir(), s), "Write refuses an invalid summary")
		})
	}
	assert.NoError(t, sample().Validate())
}

func TestReadBadRunDirs(t *testing.T) {
	_, err := Read(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorIs(t, err, ErrBadRunDir)
	assert.ErrorContains(t, err, "does not exist")

	empty := t.TempDir()
	_, err = Read(empty)
	assert.ErrorIs(t, err, ErrBadRunDir)
	assert.ErrorContains(t, err, "is "+empty+" a meshchaos run directory?")

	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = Read(file)
	assert.ErrorContains(t, err, "is not a directory")

	for name, body := range map[string]string{
		"truncated":     `{"schema":"meshchaos/v1","experiment":"x"`,
		"unknown field": `{"schema":"meshchaos/v1","experiment":"x","startedAt":"2026-01-01T00:00:00Z","events":[],"checks":[],"verdict":"error","bogus":1}`,
		"wrong type":    `{"schema":"meshchaos/v1","experiment":7}`,
		"invalid":       `{"schema":"meshchaos/v1","experiment":"x","events":[],"checks":[],"verdict":"error"}`,
	} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, SummaryFile), []byte(body), 0o644))
		_, err := Read(dir)
		assert.ErrorIs(t, err, ErrBadRunDir, name)
	}
}

func TestRecorderIsCrashSafe(t *testing.T) {
	dir := t.TempDir()
	rec, err := NewRecorder(dir, Summary{Experiment: "x"})
	require.NoError(t, err)
	onDisk := func() *Summary {
		s, err := Read(dir)
		require.NoError(t, err, "the summary on disk is always valid")
		return s
	}
	s := onDisk()
	assert.Equal(t, VerdictError, s.Verdict)
	assert.Nil(t, s.FinishedAt)
	assert.Contains(t, s.Error, "did not finish")

	require.NoError(t, rec.Update(func(s *Summary) {
		s.Events = append(s.Events, Event{At: time.Now(), Kind: "chaos.injected"})
		s.Checks = []Check{NewCheck("c", 1, LE, 2, "")}
		s.Verdict = VerdictPass // only Finish decides
	}))
	s = onDisk()
	assert.Equal(t, VerdictError, s.Verdict, "a crash now leaves verdict error")
	assert.Len(t, s.Events, 1)

	final, err := rec.Finish(nil)
	require.NoError(t, err)
	assert.Equal(t, VerdictPass, final.Verdict)
	s = onDisk()
	assert.Equal(t, VerdictPass, s.Verdict)
	assert.NotNil(t, s.FinishedAt)
	assert.Empty(t, s.Error)

	rec2, err := NewRecorder(t.TempDir(), Summary{Experiment: "y"})
	require.NoError(t, err)
	final, err = rec2.Finish(errors.New("cluster did not come up"))
	require.NoError(t, err)
	assert.Equal(t, VerdictError, final.Verdict)
	assert.Equal(t, "cluster did not come up", final.Error)

	rec3, err := NewRecorder(t.TempDir(), Summary{Experiment: "z"})
	require.NoError(t, err)
	final, err = rec3.Finish(nil)
	require.NoError(t, err)
	assert.Equal(t, VerdictError, final.Verdict, "no checks prove nothing")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary files left behind")
}

func TestCheckOps(t *testing.T) {
	assert.True(t, NewCheck("a", 0, LE, 0, "").Pass)
	assert.False(t, NewCheck("a", 0.1, LE, 0, "").Pass)
	assert.True(t, NewCheck("a", 1, GE, 1, "").Pass)
	assert.False(t, NewCheck("a", 0, GE, 1, "").Pass)
	assert.True(t, NewCheck("a", 1, LT, 2, "").Pass)
	assert.False(t, NewCheck("a", 2, GT, 2, "").Pass)
	assert.True(t, NewCheck("a", 2, EQ, 2, "").Pass)
	assert.False(t, Op("?").Holds(1, 1))
	assert.Equal(t, "error window: observed 3 s, want ≤ 0 s", NewCheck("error window", 3, LE, 0, "s").String())
	assert.Equal(t, "x: observed 0.0375, want ≥ 1", NewCheck("x", 0.0375, GE, 1, "").String())
	assert.Equal(t, VerdictPass, DecideVerdict([]Check{NewCheck("a", 0, LE, 0, "")}))
	assert.Equal(t, VerdictFail, DecideVerdict([]Check{NewCheck("a", 0, LE, 0, ""), NewCheck("b", 1, LE, 0, "")}))
	assert.Equal(t, VerdictError, DecideVerdict(nil))
	assert.Equal(t, 0, VerdictPass.ExitCode())
	assert.Equal(t, 1, VerdictFail.ExitCode())
	assert.Equal(t, 2, VerdictError.ExitCode())
}

func TestSummaryJSONFieldNames(t *testing.T) {
	// The contract in DESIGN.md names these fields; renaming one breaks every reader.
	b, err := json.Marshal(sample())
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range []string{"schema", "experiment", "substrate", "controlPlane", "params", "startedAt", "finishedAt", "traffic", "controlPlaneStats", "events", "checks", "verdict"} {
		assert.Contains(t, m, k)
	}
	tr := m["traffic"].(map[string]any)
	for _, k := range []string{"requests", "errors", "errorRate", "byCode", "byFlag", "latencyMs", "errorWindowSeconds", "series"} {
		assert.Contains(t, tr, k)
	}
	cp := m["controlPlaneStats"].(map[string]any)
	for _, k := range []string{"restarts", "oomKills", "pushes", "peakHeapBytes"} {
		assert.Contains(t, cp, k)
	}
	ch := m["checks"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "pass", "observed", "threshold"} {
		assert.Contains(t, ch, k)
	}
}

// A check that observed +Inf (a recovery that never came) is written and read back: JSON has no
// infinities, and a summary that cannot be written turned a failed run into verdict error.
func TestCheckWithInfiniteFigureRoundTrips(t *testing.T) {
	in := []Check{{Name: "recovery after the window", Observed: math.Inf(1), Op: LE, Threshold: 10, Unit: "s"},
		{Name: "error rate", Pass: true, Observed: 0.5, Op: LE, Threshold: 1, Unit: "%"}}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"observed":"+Inf"`)
	var out []Check
	require.NoError(t, json.Unmarshal(b, &out))
	assert.True(t, math.IsInf(out[0].Observed, 1))
	assert.Equal(t, in[1], out[1])
	assert.Error(t, json.Unmarshal([]byte(`[{"name":"x","observed":"lots"}]`), &out))
}
