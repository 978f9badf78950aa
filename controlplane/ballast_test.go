package controlplane

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBallastGrowsToTarget(t *testing.T) {
	b := &ballast{max: 16}
	srv := httptest.NewServer(b)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"?mb=12&step=4&every=5ms", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.held >= 12 && !b.active
	}, 5*time.Second, 5*time.Millisecond)
	for _, bad := range []string{"", "?mb=0", "?mb=x", "?mb=5&step=0", "?mb=5&every=-1s", "?mb=17", "?mb=1048576"} {
		resp, err := http.Post(srv.URL+bad, "", nil)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
	}
	resp, err = http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	buf := new(strings.Builder)
	_, _ = io.Copy(buf, resp.Body)
	assert.Contains(t, buf.String(), `"mb":12`)
	assert.Contains(t, buf.String(), `"jumps":0`, "no memory limit in this test process: step by step")
}

// The hook is off unless the control plane was started with a bound: the admin port answers
// every pod of the cluster.
func TestBallastIsOffWithoutABound(t *testing.T) {
	b := &ballast{}
	srv := httptest.NewServer(b)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"?mb=1", "", nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, string(body), "--ballast-max")
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.Zero(t, b.held, "nothing allocated")
	assert.False(t, b.active)
}

// Near the runtime's memory limit the rest of the ballast is one allocation: under a small CPU
// limit the collector would otherwise keep small steps below the kernel's limit.
func TestBallastCrossesTheLimitInOneStep(t *testing.T) {
	const limit = 40 << 20
	b := &ballast{max: 64, limit: func() int64 { return limit }}
	b.inUse = func() int64 { // the runtime's memory, as far as this test's limit goes
		b.mu.Lock()
		defer b.mu.Unlock()
		return int64(b.held) << 20
	}
	srv := httptest.NewServer(b)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"?mb=64&step=4&every=5ms", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.held >= 64 && !b.active
	}, 10*time.Second, time.Millisecond)
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.Equal(t, 64, b.held)
	assert.Equal(t, 1, b.jumps, "one allocation of the remainder once within 90 % of the limit")
	last := b.chunks[len(b.chunks)-1]
	assert.Equal(t, 28<<20, len(last), "the last allocation is the whole remainder (28 MiB), not a step")
	assert.Len(t, b.chunks, 37, "36 MiB in 1 MiB chunks below 90 % of the limit, then one jump")
}
