package results

import (
	"encoding/xml"
	"fmt"
	"path/filepath"
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
	for _, k := range []struct{ n, v string }{{"substrate", s.Substrate}, {"controlPlane", s.ControlPlane}, {"verdict", string(s.Verdict)}} {
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
			msg := fmt.Sprintf("observed %s, threshold %s %s", FormatValue(c.Observed, c.Unit), c.Op.Symbol(), FormatValue(c.Threshold, c.Unit))
			text := msg
			if c.Detail != "" {
				text += "\n" + c.Detail
			}
			tc.Failure = &junitFailure{Message: msg, Type: "CheckFailed", Text: text}
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
	b, err := xml.MarshalIndent(junitSuites{Suites: []junitSuite{suite}}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render junit: %w", err)
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

// WriteJUnit writes dir/junit.xml.
func WriteJUnit(dir string, s *Summary) error {
	b, err := JUnit(s)
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, JUnitFile), b)
}
