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
	b := &ballast{}
	srv := httptest.NewServer(b)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"?mb=12&step=4&every=5ms", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.chunks) >= 12 && !b.active
	}, 5*time.Second, 5*time.Millisecond)
	for _, bad := range []string{"", "?mb=0", "?mb=x", "?mb=5&step=0", "?mb=5&every=-1s"} {
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
}
