package observe

import (
	"strings"
	"sync"
	"testing"

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
	assert.GreaterOrEqual(t, d.End-d.Start, 5)
	require.NotEmpty(t, d.Grown)
	assert.Equal(t, 5, d.Grown[0].Delta)
	assert.True(t, strings.Contains(d.Grown[0].Stack, "parkForever"), d.Grown[0].Stack)

	_, err = CompareGoroutines(dir, start, "pprof/missing.pb.gz")
	assert.Error(t, err)
}
