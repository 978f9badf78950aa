package hog

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDownloadServesTheAskedSize(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/download?mib=3")
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.EqualValues(t, 3<<20, n)
	for _, bad := range []string{"0", "x", "-1"} {
		resp, err := http.Get(srv.URL + "/download?mib=" + bad)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
	}
}

// TestDriveKeepsDownloadsRunning: parallel downloads one after another until the context ends.
func TestDriveKeepsDownloadsRunning(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reached := make(chan struct{})
	var once bool
	total, err := Drive(ctx, srv.URL+"/download?mib=2", 3, 10*time.Millisecond, func(total int64) {
		if total >= 20<<20 && !once { // more than every stream's first download
			once = true
			close(reached)
			cancel()
		}
	})
	require.NoError(t, err)
	select {
	case <-reached:
	default:
		t.Fatalf("only %d bytes downloaded before the deadline", total)
	}
	assert.GreaterOrEqual(t, total, int64(20<<20))
	_, err = Drive(context.Background(), srv.URL, 0, 0, nil)
	assert.ErrorContains(t, err, "--parallel")
}
