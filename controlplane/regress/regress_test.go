package regress

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	s, err := Parse([]string{"ungated", "we-stale-label,quadratic-scope", ""})
	require.NoError(t, err)
	require.True(t, s.On(Ungated))
	require.True(t, s.On(QuadraticScope))
	require.False(t, s.On(SEEndpointPort))
	require.Equal(t, "ungated,quadratic-scope,we-stale-label", s.String())
	_, err = Parse([]string{"nope"})
	require.ErrorContains(t, err, "full-push-on-endpoint-reappear", "the error lists the known switches")
	var plain Set
	require.False(t, plain.On(Ungated))
	require.Equal(t, "", plain.String())
}
