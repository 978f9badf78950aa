package controlplane

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoMaxWaitWithoutOptIn: without a max wait the gate waits for sync however long it takes,
// as istiod does; a max wait is what someone asked for.
func TestNoMaxWaitWithoutOptIn(t *testing.T) {
	c, stop := maxWaitC(0)
	defer stop()
	assert.Nil(t, c, "no max wait: the gate opens at sync only")
	c, stop = maxWaitC(time.Millisecond)
	defer stop()
	require.NotNil(t, c)
	select {
	case <-c:
	case <-time.After(5 * time.Second):
		t.Fatal("a max wait that was asked for fires")
	}
}
