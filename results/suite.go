package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/results/stats"
)

// Files a suite's output directory holds besides each run's directory.
const (
	SuiteFile      = "suite.json"
	SuiteIndexFile = "index.html"
	// SuiteSchema versions suite.json and the history lines.
	SuiteSchema = "meshchaos-suite/v1"
)

// SuiteResult is one execution of a suite: every run it made, in order. It is suite.json in the
// output directory and one line of the history.
type SuiteResult struct {
	Schema     string     `json:"schema"`
	Suite      string     `json:"suite"`
	Summary    string     `json:"summary,omitempty"`
	Substrate  string     `json:"substrate"`
	StartedAt  time.Time  `json:"startedAt"`
	FinishedAt time.Time  `json:"finishedAt"`
	Runs       []SuiteRun `json:"runs"`
	// Planned is how many runs the suite meant to make (fewer ran when it was interrupted).
	Planned int `json:"planned"`
	// Interrupted says a signal stopped the suite: it gave no verdict, whatever its runs gave.
	Interrupted *SuiteInterruption `json:"interrupted,omitempty"`
	// HarnessVersion and HarnessCommit are the build of meshchaos that ran the suite (as
	// summary.json's): shards of different builds are not merged.
	HarnessVersion string `json:"harnessVersion,omitempty"`
	HarnessCommit  string `json:"harnessCommit,omitempty"`
	// Shard says this is one share of the suite's runs (--shard I/N); nil for a whole suite.
	Shard *SuiteShard `json:"shard,omitempty"`
	// MergedShards is how many shards `meshchaos suite merge` combined into this result; 0 for
	// a suite that ran on one machine.
	MergedShards int `json:"mergedShards,omitempty"`
}

// SuiteInterruption is the signal that stopped a suite or an upgrade-check (suite.json,
// comparison.json): the signal as a run's summary names it, when it came, and where — the run
// it cut short (Run of Runs, counted from 1, in the phase Interruption.Phase, "" when the run
// did not record one), or, with BetweenRuns, the run that then did not start.
type SuiteInterruption struct {
	Interruption
	Run  int `json:"run"`
	Runs int `json:"runs"`
	// BetweenRuns: the signal came after run Run-1 had ended and before run Run started.
	BetweenRuns bool `json:"betweenRuns,omitempty"`
}

// String says what stopped the suite and where: "interrupted by SIGTERM during run 2/3
// (phase chaos)".
func (i *SuiteInterruption) String() string {
	s := "interrupted by " + SignalName(i.Signal)
	if i.BetweenRuns {
		return s + fmt.Sprintf(" before run %d/%d started", i.Run, i.Runs)
	}
	s += fmt.Sprintf(" during run %d/%d", i.Run, i.Runs)
	if i.Phase != "" {
		s += " (phase " + i.Phase + ")"
	}
	return s
}

// signalNames are the usual names of the signals Go's os.Signal.String spells out (the
// spelling summary.json and suite.json keep).
var signalNames = map[string]string{"interrupt": "SIGINT", "terminated": "SIGTERM", "hangup": "SIGHUP", "quit": "SIGQUIT", "killed": "SIGKILL"}

// SignalName is the usual name of a signal as Go spells it ("terminated" → "SIGTERM"); any
// other text is returned as it is.
func SignalName(sig string) string {
	if n, ok := signalNames[sig]; ok {
		return n
	}
	return sig
}

// SuiteRun is one run of a suite entry.
type SuiteRun struct {
	// Entry is the entry's index in the suite (0-based); Repeat counts from 1.
	Entry        int      `json:"entry"`
	Repeat       int      `json:"repeat"`
	Experiment   string   `json:"experiment"`
	ControlPlane string   `json:"controlPlane"`
	Set          []string `json:"set,omitempty"`
	Expect       Verdict  `json:"expect"`
	// ExpectFailing are the checks the entry expects to fail (see Expect.Failing).
	ExpectFailing []string `json:"expectFailing,omitempty"`
	Verdict       Verdict  `json:"verdict"`
	// Unexpected says how the run missed its expectation beyond the verdict (the wrong checks
	// failed); empty when it met it.
	Unexpected string `json:"unexpected,omitempty"`
	// Dir is the run directory relative to the suite's output directory.
	Dir     string  `json:"dir"`
	Seconds float64 `json:"seconds"`
	// Failed are the failed checks as "name: observed …, want …".
	Failed []string `json:"failedChecks,omitempty"`
	Error  string   `json:"error,omitempty"`
	// Measures are the run's main measures: every check's observed value (what the experiment
	// judges) and the run's wall time.
	Measures map[string]RunMeasure `json:"measures,omitempty"`
}

// RunMeasure is one number of a suite run with its unit.
type RunMeasure struct {
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
}

// MeasureWallTime is the measure every run has: how long it took.
const MeasureWallTime = "wall time"

// NewSuiteRun records what a finished run gave; s may be nil when the run wrote no summary.
func NewSuiteRun(s *Summary, entry, repeat int, experiment, cp string, set []string, expect Expect, dir string, seconds float64, runErr error) SuiteRun {
	r := SuiteRun{Entry: entry, Repeat: repeat, Experiment: experiment, ControlPlane: cp, Set: set,
		Expect: expect.Verdict, ExpectFailing: expect.Failing, Verdict: VerdictError, Dir: dir, Seconds: seconds,
		Measures: map[string]RunMeasure{MeasureWallTime: {Value: math.Round(seconds), Unit: "s"}}}
	if s != nil && s.Verdict != "" {
		r.Verdict = s.Verdict
		r.Error = s.Error
		for _, c := range s.Checks {
			if !c.Pass {
				r.Failed = append(r.Failed, c.String())
			}
			// JSON has no infinities; a check that observed one (never recovered) is in Failed.
			if !math.IsInf(c.Observed, 0) && !math.IsNaN(c.Observed) {
				r.Measures[c.Name] = RunMeasure{Value: c.Observed, Unit: c.Unit}
			}
		}
	}
	if r.Error == "" && runErr != nil && r.Verdict == VerdictError {
		r.Error = runErr.Error()
	}
	if s != nil && r.Verdict == expect.Verdict {
		r.Unexpected = expect.Judge(r.Verdict, s.Checks)
	}
	return r
}

// AsExpected reports whether the run gave the verdict its entry expects, failing the checks it
// names.
func (r SuiteRun) AsExpected() bool { return r.Verdict == r.Expect && r.Unexpected == "" }

// Key names the entry across nights: experiment, control plane and parameters.
func (r SuiteRun) Key() string {
	k := r.Experiment + " [" + r.ControlPlane + "]"
	if len(r.Set) > 0 {
		k += " " + strings.Join(r.Set, " ")
	}
	return k
}

// Name names the run in reports: its key and, when the entry repeats, which repeat.
func (r SuiteRun) Name(repeats int) string {
	if repeats > 1 {
		return fmt.Sprintf("%s #%d", r.Key(), r.Repeat)
	}
	return r.Key()
}

// OK reports whether every planned run ran and gave its expected verdict; an interrupted suite
// is never OK (it gave no verdict).
func (s *SuiteResult) OK() bool {
	if s.Interrupted != nil || len(s.Runs) < s.Planned {
		return false
	}
	for _, r := range s.Runs {
		if !r.AsExpected() {
			return false
		}
	}
	return true
}

// repeats counts the runs of each entry.
func (s *SuiteResult) repeats() map[int]int {
	n := map[int]int{}
	for _, r := range s.Runs {
		n[r.Entry]++
	}
	return n
}

// WriteSuiteResult writes suite.json into dir.
func WriteSuiteResult(dir string, s *SuiteResult) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", SuiteFile, err)
	}
	return WriteFileAtomic(filepath.Join(dir, SuiteFile), append(b, '\n'))
}

// HistoryFile is the suite's history in dir: one JSON line per execution, oldest first.
func HistoryFile(dir, suite string) string { return filepath.Join(dir, suite+".jsonl") }

// syncFile flushes a history file to disk; a variable so that tests see it called.
var syncFile = (*os.File).Sync

// AppendHistory adds the suite's result as one line to dir/SUITE.jsonl and syncs it to disk: the
// history is the record of every night, and a line still in the page cache when the machine goes
// down is a night lost. A last line torn by such a crash is repaired first, so that the new line
// does not run into it (see healTornTail); warn gets a line saying what was repaired.
func AppendHistory(dir string, s *SuiteResult, warn io.Writer) error {
	if err := MkdirAll(dir); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("history: encode: %w", err)
	}
	name := HistoryFile(dir, s.Suite)
	_, statErr := os.Lstat(name)
	f, err := os.OpenFile(name, os.O_APPEND|os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	err = appendLine(f, b, errors.Is(statErr, fs.ErrNotExist), warn)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("history %s: %w", name, err)
	}
	return nil
}

// appendLine writes line and a newline at the end of f (opened for appending) and syncs it;
// created says this call created f.
func appendLine(f *os.File, line []byte, created bool, warn io.Writer) error {
	if created {
		// The user reads the history as any other report, whatever the umask.
		if err := f.Chmod(FileMode); err != nil {
			return err
		}
	} else if err := healTornTail(f, warn); err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return err
	}
	if err := syncFile(f); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

// healTornTail repairs what a crash in the middle of an append leaves at the end of a history
// file, before a new line is appended after it: a last line that is a whole record but lacks its
// newline gets one (the new line would otherwise run into it), and a last line that is not valid
// JSON — the part of a record written before the crash — is cut off (appended to, it would
// become a bad line in the middle, which ReadHistory refuses). Nothing else is changed.
func healTornTail(f *os.File, warn io.Writer) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	start, last, err := lastLine(f, fi.Size())
	if err != nil || len(last) == 0 {
		return err
	}
	complete := last[len(last)-1] == '\n'
	if _, err := parseHistoryLine(last); err == nil || len(bytes.TrimSpace(last)) == 0 {
		if complete {
			return nil
		}
		_, err := f.Write([]byte{'\n'})
		return err
	}
	if err := f.Truncate(start); err != nil {
		return fmt.Errorf("cut off the torn last line: %w", err)
	}
	fmt.Fprintf(warn, "warning: history %s: cut off its torn last line (%d bytes that are not a whole record: a write cut short by a crash)\n", f.Name(), len(last))
	return nil
}

// lastLine returns the last line of the first size bytes of f (with its newline, if it has one)
// and the offset it starts at; it reads backwards, so a long history costs no more than its tail.
func lastLine(f *os.File, size int64) (int64, []byte, error) {
	const chunk = 64 << 10
	var tail []byte
	end := size
	for end > 0 {
		n := min(int64(chunk), end)
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, end-n); err != nil {
			return 0, nil, fmt.Errorf("read the last line: %w", err)
		}
		tail = append(buf, tail...)
		end -= n
		// The line's own newline, at the very end, does not end the line before it.
		if i := bytes.LastIndexByte(tail[:len(tail)-1], '\n'); i >= 0 {
			return end + int64(i) + 1, tail[i+1:], nil
		}
	}
	return 0, tail, nil
}

// parseHistoryLine decodes one line of a history file.
func parseHistoryLine(b []byte) (SuiteResult, error) {
	var s SuiteResult
	err := json.Unmarshal(b, &s)
	return s, err
}

// ReadHistory returns the last n executions of suite recorded in dir, oldest first; none when
// there is no history yet. A line in the middle that does not parse is an error naming it (the
// file is the user's record; it is not silently skipped). A last line that does not parse is
// what a crash while appending it leaves: it is skipped with a warning to warn naming the file
// and line, so that one crash does not refuse every later run (AppendHistory repairs it).
func ReadHistory(dir, suite string, n int, warn io.Writer) ([]SuiteResult, error) {
	f, err := os.Open(HistoryFile(dir, suite))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	var out []SuiteResult
	// A line that did not parse is held until it is known whether another line follows it.
	var (
		badLine int
		badErr  error
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if badErr != nil {
			return nil, fmt.Errorf("history %s line %d: %w (fix or remove the line)", f.Name(), badLine, badErr)
		}
		s, err := parseHistoryLine(sc.Bytes())
		if err != nil {
			badLine, badErr = line, err
			continue
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history %s: %w", f.Name(), err)
	}
	if badErr != nil {
		fmt.Fprintf(warn, "warning: history %s line %d: skipped: the last line is not a whole record (%v); a crash while it was written leaves that, and the next append cuts it off\n", f.Name(), badLine, badErr)
	}
	if n > 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}

// The rule a trend's last value is judged by: it is a change beyond the noise when it lies
// outside median ± max(TrendK · 1.4826 · MAD, TrendFloorPct % of |median|) of the earlier nights'
// values, with at least TrendMinNights earlier nights. 1.4826·MAD estimates the standard
// deviation of normal noise robustly (one odd night does not widen it); the floor keeps a
// history of identical values (MAD 0) from flagging a change in the last digit.
const (
	TrendK         = 3.0
	TrendFloorPct  = 5.0
	TrendMinNights = 3
)

// Trend is one main measure of one suite entry across nights.
type Trend struct {
	Key     string
	Measure string
	Unit    string
	Points  []TrendPoint
	// Median and Band describe the earlier nights (all but the last point): noise is
	// median ± Band. Judged is false while there are fewer than TrendMinNights of them.
	Median, Band float64
	Judged       bool
	// Changed: the last night is outside the noise.
	Changed bool
}

// TrendPoint is one night's value: the median of the entry's repeats that night.
type TrendPoint struct {
	At    time.Time
	Value float64
}

// Trends computes every entry × measure seen in the nights (oldest first; the last is the
// current one), for the entries of the last night.
func Trends(nights []SuiteResult) []Trend {
	if len(nights) == 0 {
		return nil
	}
	type id struct{ key, measure string }
	last := nights[len(nights)-1]
	var order []id
	seen := map[id]bool{}
	units := map[id]string{}
	for _, r := range last.Runs {
		names := make([]string, 0, len(r.Measures))
		for m := range r.Measures {
			names = append(names, m)
		}
		sort.Strings(names)
		for _, m := range names {
			k := id{r.Key(), m}
			if !seen[k] {
				seen[k] = true
				order = append(order, k)
				units[k] = r.Measures[m].Unit
			}
		}
	}
	var out []Trend
	for _, k := range order {
		t := Trend{Key: k.key, Measure: k.measure, Unit: units[k]}
		for _, n := range nights {
			var vs []float64
			for _, r := range n.Runs {
				if m, ok := r.Measures[k.measure]; ok && r.Key() == k.key {
					vs = append(vs, m.Value)
				}
			}
			if len(vs) > 0 {
				t.Points = append(t.Points, TrendPoint{At: n.StartedAt, Value: stats.Median(vs)})
			}
		}
		if len(t.Points) > TrendMinNights {
			earlier := make([]float64, 0, len(t.Points)-1)
			for _, p := range t.Points[:len(t.Points)-1] {
				earlier = append(earlier, p.Value)
			}
			t.Median = stats.Median(earlier)
			dev := make([]float64, len(earlier))
			for i, v := range earlier {
				dev[i] = math.Abs(v - t.Median)
			}
			t.Band = math.Max(TrendK*1.4826*stats.Median(dev), TrendFloorPct/100*math.Abs(t.Median))
			t.Judged = true
			t.Changed = math.Abs(t.Points[len(t.Points)-1].Value-t.Median) > t.Band
		}
		out = append(out, t)
	}
	return out
}

// Spread is one measure over an entry's repeats in one execution.
type Spread struct {
	Measure          string
	Unit             string
	N                int
	Min, Median, Max float64
}

// Spreads returns, per entry that ran more than once, the spread of each measure.
func (s *SuiteResult) Spreads() map[int][]Spread {
	byEntry := map[int][]SuiteRun{}
	for _, r := range s.Runs {
		byEntry[r.Entry] = append(byEntry[r.Entry], r)
	}
	out := map[int][]Spread{}
	for e, runs := range byEntry {
		if len(runs) < 2 {
			continue
		}
		vals := map[string][]float64{}
		units := map[string]string{}
		for _, r := range runs {
			for m, v := range r.Measures {
				vals[m] = append(vals[m], v.Value)
				units[m] = v.Unit
			}
		}
		for _, m := range SortedKeys(vals) {
			vs := vals[m]
			sort.Float64s(vs)
			out[e] = append(out[e], Spread{Measure: m, Unit: units[m], N: len(vs), Min: vs[0], Median: stats.Median(vs), Max: vs[len(vs)-1]})
		}
	}
	return out
}
