package echo

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is advanced by the test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestReadinessFlaps(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	srv := httptest.NewServer(Handler(Options{PodName: "e", ReadyFor: 3 * time.Second, UnreadyFor: 2 * time.Second, now: clk.now}))
	defer srv.Close()
	var got []int
	for range 6 {
		got = append(got, status(t, srv.URL+"/ready"))
		clk.add(time.Second)
	}
	assert.Equal(t, []int{200, 200, 200, 503, 503, 200}, got)
	assert.Equal(t, 200, status(t, srv.URL+"/healthz"), "liveness does not flap")
}

func TestLatencyAndErrorInjection(t *testing.T) {
	srv := httptest.NewServer(Handler(Options{PodName: "e", Latency: 50 * time.Millisecond, ErrorRate: 1, ErrorCode: 503}))
	defer srv.Close()
	start := time.Now()
	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, "e", resp.Header.Get("X-Echo-Pod"))

	none := httptest.NewServer(Handler(Options{PodName: "e", ErrorRate: 0}))
	defer none.Close()
	for range 20 {
		assert.Equal(t, 200, status(t, none.URL+"/"))
	}
}

func TestEnvConfiguresInjection(t *testing.T) {
	t.Setenv("ECHO_READY_FOR", "2s")
	t.Setenv("ECHO_UNREADY_FOR", "1s")
	t.Setenv("ECHO_ERROR_RATE", "0.25")
	t.Setenv("ECHO_ERROR_CODE", "502")
	o := Options{}
	o.defaults()
	assert.Equal(t, 2*time.Second, o.ReadyFor)
	assert.Equal(t, time.Second, o.UnreadyFor)
	assert.Equal(t, 0.25, o.ErrorRate)
	assert.Equal(t, 502, o.ErrorCode)
	assert.Error(t, Options{ErrorRate: 2}.Validate())
	assert.Error(t, Options{ReadyFor: time.Second}.Validate())
	assert.NoError(t, o.Validate())
}
