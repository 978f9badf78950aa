package observe

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshchaos/meshchaos/results"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parkForever is a goroutine leak with a recognisable stack.
func parkForever(started *sync.WaitGroup, stop <-chan struct{}) {
	started.Done()
	<-stop
}

func TestCompareGoroutinesFindsTheLeakedStack(t *testing.T) {
	dir := t.TempDir()
	start, err := SaveOwnGoroutines(dir, "start")
	require.NoError(t, err)
	stop := make(chan struct{})
	defer close(stop)
	var started sync.WaitGroup
	started.Add(5)
	for range 5 {
		go parkForever(&started, stop)
	}
	started.Wait()
	end, err := SaveOwnGoroutines(dir, "end")
	require.NoError(t, err)
	d, err := CompareGoroutines(dir, start, end)
	require.NoError(t, err)
	// The process's total moves with whatever else the package's tests left running (a server's
	// goroutines ending between the two profiles): the leak is the stack that grew by 5.
	i := slices.IndexFunc(d.Grown, func(g results.StackCount) bool { return strings.Contains(g.Stack, "parkForever") })
	require.GreaterOrEqual(t, i, 0, "the leaked stack is among the grown ones: %+v", d.Grown)
	assert.Equal(t, 5, d.Grown[i].Delta)
	assert.Positive(t, d.End)

	_, err = CompareGoroutines(dir, start, "pprof/missing.pb.gz")
	assert.Error(t, err)
}
