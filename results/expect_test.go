package results

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestExpectJudgesVerdictAndTheFailingChecks(t *testing.T) {
	checks := func(failed ...string) []Check {
		cs := []Check{{Name: "error rate", Pass: true}, {Name: "OOM kills", Pass: true}, {Name: "error window", Pass: true}}
		for i := range cs {
			for _, f := range failed {
				if cs[i].Name == f {
					cs[i].Pass = false
				}
			}
		}
		return cs
	}
	pass := Expect{Verdict: VerdictPass}
	assert.Empty(t, pass.Judge(VerdictPass, checks()))
	assert.Contains(t, pass.Judge(VerdictFail, checks("error rate")), "verdict fail, want pass (failed: error rate")
	assert.Contains(t, pass.Judge(VerdictError, checks()), "verdict error")

	caught := Expect{Verdict: VerdictFail, Failing: []string{"error rate", "error window?"}}
	assert.NoError(t, caught.Validate())
	assert.Empty(t, caught.Judge(VerdictFail, checks("error rate")))
	assert.Empty(t, caught.Judge(VerdictFail, checks("error rate", "error window")), "an optional check may fail")
	assert.Contains(t, caught.Judge(VerdictFail, checks("OOM kills")), `check "error rate" passed`)
	assert.Contains(t, caught.Judge(VerdictFail, checks("error rate", "OOM kills")), `check "OOM kills" failed for another reason`)
	assert.Contains(t, caught.Judge(VerdictError, checks()), "verdict error, want fail", "a run that could not be carried out catches nothing")
	assert.Contains(t, Expect{Verdict: VerdictFail, Failing: []string{"p99"}}.Judge(VerdictFail, checks("error rate")), `no check "p99"`)

	anyFail := Expect{Verdict: VerdictFail}
	assert.Empty(t, anyFail.Judge(VerdictFail, checks("OOM kills")), "no names: any failed check (older suites)")
}

func TestExpectValidate(t *testing.T) {
	assert.NoError(t, Expect{Verdict: VerdictPass}.Validate())
	assert.ErrorContains(t, Expect{Verdict: "ok"}.Validate(), "want pass or fail")
	assert.ErrorContains(t, Expect{Verdict: VerdictPass, Failing: []string{"x"}}.Validate(), "a pass fails none")
	assert.ErrorContains(t, Expect{Verdict: VerdictFail, Failing: []string{"x", "x?"}}.Validate(), "named twice")
	assert.ErrorContains(t, Expect{Verdict: VerdictFail, Failing: []string{"x?"}}.Validate(), "every check named")
}
