package gate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGateOpensOnce(t *testing.T) {
	g := New()
	require.False(t, g.IsOpen())
	select {
	case <-g.Done():
		t.Fatal("closed gate reported done")
	default:
	}
	require.True(t, g.Open("synced", false))
	require.False(t, g.Open("max wait", true), "a second open is a no-op")
	<-g.Done()
	open, forced, reason, at := g.State()
	require.True(t, open)
	require.False(t, forced)
	require.Equal(t, "synced", reason)
	require.False(t, at.IsZero())
}
