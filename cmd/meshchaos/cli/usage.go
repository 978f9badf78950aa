package cli

import "strings"

// isCobraUsageError tells cobra's own argument errors (unknown command, wrong arg count) apart
// from errors our commands return, so both end with exit code 2 and a hint.
func isCobraUsageError(err error) bool {
	if _, ok := err.(ExitCoder); ok {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "requires at most", "unknown flag", "unknown shorthand"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
