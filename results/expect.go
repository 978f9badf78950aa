package results

import (
	"fmt"
	"slices"
	"strings"
)

// Expect is the outcome a run must give to be as expected: its verdict and, for a fail, which
// checks fail. A fail is only "caught" when it fails for the reason the run is there to show: a
// regression switch that made the run time out, or broke a check of its proof that the chaos
// happened, is not the bug caught.
type Expect struct {
	Verdict Verdict `json:"verdict"`
	// Failing names the checks that must fail, each of them, and no other check may fail. A name
	// ending in "?" may fail or pass: a second symptom of the same bug that a run may or may not
	// show. Empty with verdict fail: any failed check will do (suites written before names).
	Failing []string `json:"failing,omitempty"`
}

// Optional marks a Failing name as a check that may fail or pass.
const Optional = "?"

// Validate checks that names go only with a fail, and each once.
func (e Expect) Validate() error {
	switch e.Verdict {
	case VerdictPass, VerdictFail:
	default:
		return fmt.Errorf("expect %q: want pass or fail", e.Verdict)
	}
	if e.Verdict == VerdictPass && len(e.Failing) > 0 {
		return fmt.Errorf("expect pass names failing checks (%s): a pass fails none", strings.Join(e.Failing, ", "))
	}
	seen := map[string]bool{}
	for _, f := range e.Failing {
		n := strings.TrimSuffix(f, Optional)
		if n == "" {
			return fmt.Errorf("expect: an empty check name among %q", e.Failing)
		}
		if seen[n] {
			return fmt.Errorf("expect: check %q named twice", n)
		}
		seen[n] = true
	}
	if e.Verdict == VerdictFail && len(e.Failing) > 0 && !slices.ContainsFunc(e.Failing, func(f string) bool { return !strings.HasSuffix(f, Optional) }) {
		return fmt.Errorf("expect fail: every check named (%s) is optional: name at least one that must fail", strings.Join(e.Failing, ", "))
	}
	return nil
}

// Judge says how a run with verdict and checks misses e ("" when it meets it). An error verdict
// never meets an expectation: a run that could not be carried out shows nothing.
func (e Expect) Judge(verdict Verdict, checks []Check) string {
	if verdict != e.Verdict {
		why := fmt.Sprintf("verdict %s, want %s", verdict, e.Verdict)
		if failed := FailedChecks(checks); len(failed) > 0 {
			why += " (failed: " + strings.Join(failed, "; ") + ")"
		}
		return why
	}
	if e.Verdict != VerdictFail || len(e.Failing) == 0 {
		return ""
	}
	byName := map[string]Check{}
	for _, c := range checks {
		byName[c.Name] = c
	}
	var problems []string
	allowed := map[string]bool{}
	for _, f := range e.Failing {
		name, optional := strings.CutSuffix(f, Optional)
		allowed[name] = true
		c, ok := byName[name]
		switch {
		case !ok && !optional:
			problems = append(problems, fmt.Sprintf("no check %q", name))
		case ok && c.Pass && !optional:
			problems = append(problems, fmt.Sprintf("check %q passed (%s), want it to fail", name, c.String()))
		}
	}
	for _, c := range checks {
		if !c.Pass && !allowed[c.Name] {
			problems = append(problems, fmt.Sprintf("check %q failed for another reason than the one expected (%s)", c.Name, c.String()))
		}
	}
	return strings.Join(problems, "; ")
}

// FailedChecks lists the failed checks as Check.String gives them.
func FailedChecks(checks []Check) []string {
	var out []string
	for _, c := range checks {
		if !c.Pass {
			out = append(out, c.String())
		}
	}
	return out
}
