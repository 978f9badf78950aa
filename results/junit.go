package results

import (
	"encoding/xml"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// JUnit XML as CI systems read it (the Jenkins/Ant schema): one testsuite per run, one testcase
// per check. A failed check carries observed vs threshold; a run with verdict error gets an
// extra errored testcase naming why, so CI never shows an errored run as green.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Errors    int         `xml:"errors,attr"`
	Time      float64     `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Props     []junitProp `xml:"properties>property,omitempty"`
	Cases     []junitCase `xml:"testcase"`
}

type junitProp struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Error     *junitFailure `xml:"error,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// JUnit renders the summary as JUnit XML.
func JUnit(s *Summary) ([]byte, error) {
	suite := junitSuite{
		Name:      "meshchaos." + s.Experiment,
		Timestamp: s.StartedAt.UTC().Format("2006-01-02T15:04:05"),
	}
	if s.FinishedAt != nil {
		suite.Time = s.FinishedAt.Sub(s.StartedAt).Seconds()
	}
	for _, k := range []struct{ n, v string }{{"substrate", s.Substrate}, {"controlPlane", s.ControlPlane}, {"harnessVersion", s.HarnessVersion}, {"harnessCommit", s.HarnessCommit}, {"verdict", string(s.Verdict)}} {
		if k.v != "" {
			suite.Props = append(suite.Props, junitProp{k.n, k.v})
		}
	}
	for _, k := range SortedKeys(s.Params) {
		suite.Props = append(suite.Props, junitProp{"param." + k, s.Params[k]})
	}
	for _, c := range s.Checks {
		tc := junitCase{Name: c.Name, ClassName: suite.Name, SystemOut: c.String()}
		if !c.Pass {
			suite.Failures++
			tc.Failure = checkFailure(c)
		}
		suite.Cases = append(suite.Cases, tc)
	}
	if s.Verdict == VerdictError {
		suite.Errors++
		suite.Cases = append(suite.Cases, junitCase{
			Name: "run", ClassName: suite.Name,
			Error: &junitFailure{Message: s.Error, Type: "RunError", Text: s.Error},
		})
	}
	suite.Tests = len(suite.Cases)
	return marshalJUnit(suite)
}

func marshalJUnit(suites ...junitSuite) ([]byte, error) {
	b, err := xml.MarshalIndent(junitSuites{Suites: suites}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render junit: %w", err)
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

// checkFailure is a failed check as JUnit shows it: observed vs threshold, and why in words.
func checkFailure(c Check) *junitFailure {
	msg := fmt.Sprintf("observed %s, threshold %s %s", FormatValue(c.Observed, c.Unit), c.Op.Symbol(), FormatValue(c.Threshold, c.Unit))
	text := msg
	if c.Detail != "" {
		text += "\n" + c.Detail
	}
	return &junitFailure{Message: msg, Type: "CheckFailed", Text: text}
}

// SuiteJUnit renders a suite's runs as one JUnit file: one testsuite for the suite, one
// testcase per experiment × control plane × repeat. A testcase fails when its run's verdict is
// not the one its entry expects (a pass where a regression switch should have been caught fails
// too); the message lists the failed checks. A run that could not be carried out is an error.
func SuiteJUnit(s *SuiteResult) ([]byte, error) {
	suite := junitSuite{
		Name:      "meshchaos.suite." + s.Suite,
		Timestamp: s.StartedAt.UTC().Format("2006-01-02T15:04:05"),
		Time:      s.FinishedAt.Sub(s.StartedAt).Seconds(),
		Props:     []junitProp{{"substrate", s.Substrate}},
	}
	// Which build ran it, and which share of the suite it is (or how many shares it merges).
	extra := []struct{ n, v string }{{"harnessVersion", s.HarnessVersion}, {"harnessCommit", s.HarnessCommit}}
	if s.Shard != nil {
		extra = append(extra, struct{ n, v string }{"shard", fmt.Sprintf("%s of %d runs", s.Shard, s.Shard.Of)})
	}
	if s.MergedShards > 0 {
		extra = append(extra, struct{ n, v string }{"mergedShards", fmt.Sprint(s.MergedShards)})
	}
	for _, k := range extra {
		if k.v != "" {
			suite.Props = append(suite.Props, junitProp{k.n, k.v})
		}
	}
	repeats := s.repeats()
	for _, r := range s.Runs {
		tc := junitCase{Name: r.Name(repeats[r.Entry]), ClassName: "meshchaos." + r.Experiment,
			SystemOut: fmt.Sprintf("verdict %s (expected %s), run directory %s\n%s", r.Verdict, r.Expect, r.Dir, strings.Join(r.Failed, "\n"))}
		switch {
		case r.Verdict == VerdictError:
			suite.Errors++
			tc.Error = &junitFailure{Message: "the run could not be carried out: " + r.Error, Type: "RunError", Text: r.Error}
		case r.Unexpected != "":
			suite.Failures++
			msg := "failed, but not as the entry expects: " + r.Unexpected
			tc.Failure = &junitFailure{Message: msg, Type: "WrongChecks", Text: msg + "\n" + strings.Join(r.Failed, "\n")}
		case !r.AsExpected() && r.Verdict == VerdictPass:
			suite.Failures++
			msg := "passed, but the entry expects fail: the experiment did not catch " + r.ControlPlane
			tc.Failure = &junitFailure{Message: msg, Type: "NotCaught", Text: msg}
		case !r.AsExpected():
			suite.Failures++
			msg := "failed checks: " + strings.Join(r.Failed, "; ")
			tc.Failure = &junitFailure{Message: msg, Type: "CheckFailed", Text: strings.Join(r.Failed, "\n")}
		}
		suite.Cases = append(suite.Cases, tc)
	}
	missing := s.Planned - len(s.Runs)
	// An interruption is an error even after the last run started: the suite gave no verdict.
	if missing > 0 || s.Interrupted != nil {
		suite.Errors++
		msg := fmt.Sprintf("%d of %d planned runs did not run (the suite was interrupted)", missing, s.Planned)
		if s.Interrupted != nil {
			msg = fmt.Sprintf("%s at %s: no verdict; %d of %d planned runs did not run", s.Interrupted, s.Interrupted.At.UTC().Format(time.RFC3339), missing, s.Planned)
		}
		suite.Cases = append(suite.Cases, junitCase{Name: "suite", ClassName: suite.Name, Error: &junitFailure{Message: msg, Type: "Interrupted", Text: msg}})
	}
	suite.Tests = len(suite.Cases)
	return marshalJUnit(suite)
}

// WriteJUnit writes dir/junit.xml.
func WriteJUnit(dir string, s *Summary) error {
	b, err := JUnit(s)
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, JUnitFile), b)
}
