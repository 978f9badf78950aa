package kit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
)

func TestParseKeep(t *testing.T) {
	for in, want := range map[string]KeepPolicy{
		"never": KeepNever, "on-failure": KeepOnFailure, "always": KeepAlways,
		"": KeepNever, "true": KeepAlways, "1": KeepAlways, "false": KeepNever, "0": KeepNever,
	} {
		got, err := ParseKeep(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"sometimes", "on-fail", "ALWAYS!"} {
		_, err := ParseKeep(bad)
		assert.ErrorContains(t, err, "never, on-failure, always", bad)
	}
}

// TestKeepDecision: on-failure keeps a cluster worth a look (a failed check, a run that could not
// be carried out or was interrupted) and never a pass; always and never do what they say.
func TestKeepDecision(t *testing.T) {
	for _, tc := range []struct {
		p    KeepPolicy
		v    results.Verdict
		keep bool
	}{
		{KeepNever, results.VerdictPass, false}, {KeepNever, results.VerdictFail, false}, {KeepNever, results.VerdictError, false},
		{KeepOnFailure, results.VerdictPass, false}, {KeepOnFailure, results.VerdictFail, true}, {KeepOnFailure, results.VerdictError, true},
		{KeepAlways, results.VerdictPass, true}, {KeepAlways, results.VerdictFail, true}, {KeepAlways, results.VerdictError, true},
		{"", results.VerdictFail, false},
	} {
		assert.Equal(t, tc.keep, tc.p.Keeps(tc.v), "%s with verdict %s", tc.p, tc.v)
	}
}
