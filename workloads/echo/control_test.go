package echo

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func post(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Post(url, "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// A steady server starts flapping on POST /control/flap (ready first) and stops on
// POST /control/steady, without a restart.
func TestControlSwitchesFlappingAtRunTime(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	srv := httptest.NewServer(Handler(Options{PodName: "e", now: clk.now}))
	defer srv.Close()
	sample := func(n int) []int {
		var got []int
		for range n {
			got = append(got, status(t, srv.URL+"/ready"))
			clk.add(time.Second)
		}
		return got
	}
	assert.Equal(t, []int{200, 200, 200}, sample(3), "steady before any control")

	require.Equal(t, 200, post(t, srv.URL+"/control/flap?up=2s&down=1s"))
	assert.Equal(t, []int{200, 200, 503, 200, 200, 503}, sample(6), "flaps from the moment it was told")

	clk.add(500 * time.Millisecond) // mid-phase: a new flap restarts the cycle ready
	require.Equal(t, 200, post(t, srv.URL+"/control/flap?up=1s&down=2s"))
	assert.Equal(t, []int{200, 503, 503, 200}, sample(4))

	clk.add(time.Second) // now in an unready phase
	require.Equal(t, 200, post(t, srv.URL+"/control/steady"))
	assert.Equal(t, []int{200, 200, 200, 200}, sample(4), "steady again")
}

func TestControlRejectsBadRequests(t *testing.T) {
	srv := httptest.NewServer(Handler(Options{PodName: "e"}))
	defer srv.Close()
	for _, q := range []string{"", "?up=2s", "?up=2s&down=0s", "?up=-1s&down=1s", "?up=x&down=1s"} {
		assert.Equal(t, http.StatusBadRequest, post(t, srv.URL+"/control/flap"+q), q)
	}
	assert.Equal(t, http.StatusMethodNotAllowed, status(t, srv.URL+"/control/steady"), "GET does not switch anything")
	assert.Equal(t, http.StatusMethodNotAllowed, post(t, srv.URL+"/control/other"))
	assert.Equal(t, http.StatusOK, status(t, srv.URL+"/ready"))
}

// POST /control/crash answers in full, then ends the process with status 1.
func TestControlCrashExitsAfterAnswering(t *testing.T) {
	exited := make(chan int, 1)
	srv := httptest.NewServer(Handler(Options{PodName: "e", exit: func(code int) { exited <- code }}))
	defer srv.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, status(t, srv.URL+"/control/crash"), "GET crashes nothing")
	select {
	case <-exited:
		t.Fatal("GET made it exit")
	default:
	}
	resp, err := http.Post(srv.URL+"/control/crash", "text/plain", nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, "the answer is complete")
	assert.Equal(t, "crashing: exit status 1\n", string(body))
	assert.Equal(t, 1, <-exited)
}
