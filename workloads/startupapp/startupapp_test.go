package startupapp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results/respflags"
	"github.com/meshchaos/meshchaos/workloads/startupapp"
	"github.com/meshchaos/meshchaos/workloads/xdsproxy"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// sidecar starts an xdsproxy whose configuration routes host "dep" to the given endpoints once
// the returned configure function is called.
func sidecar(t *testing.T) (listener string, p *xdsproxy.Proxy, configure func(endpoints ...string)) {
	xds := xdstest.Start(t)
	listener = xdstest.FreeAddr(t)
	p, err := xdsproxy.New(xdsproxy.Options{XDSAddress: xds.Addr, NodeID: "sidecar~127.0.0.1~app.default~default.svc.cluster.local", AdminAddress: "127.0.0.1:0", BackoffBase: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(p.Close)
	return listener, p, func(endpoints ...string) {
		xds.Set(t, "1",
			xdstest.EDSCluster("dep", "dep"), xdstest.CLA("dep", endpoints...),
			xdstest.InlineHTTPListener("out", listener, xdstest.RouteConfig("r", xdstest.VirtualHost("dep", []string{"dep"}, xdstest.PrefixRoute("/", "dep")))))
	}
}

func TestFailsWhileSidecarHasNoConfigAndReportsAttempts(t *testing.T) {
	listener, _, _ := sidecar(t)
	termLog := filepath.Join(t.TempDir(), "termination-log")
	var stderr strings.Builder
	err := startupapp.Run(context.Background(), startupapp.Options{
		Target: "http://" + listener + "/", Host: "dep", Attempts: 2, Interval: 10 * time.Millisecond,
		TerminationLog: termLog, Stderr: &stderr,
	})
	require.Error(t, err, "the app must exit non-zero")
	assert.Contains(t, err.Error(), "connection refused")
	assert.Contains(t, err.Error(), "2 attempt(s)")
	assert.Equal(t, 2, strings.Count(stderr.String(), "startup-app: attempt"))
	b, rerr := os.ReadFile(termLog)
	require.NoError(t, rerr)
	var rep startupapp.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	assert.False(t, rep.Succeeded)
	assert.Len(t, rep.Attempts, 2)
}

func TestFailsOnProxyLocalReplyWithFlag(t *testing.T) {
	listener, p, configure := sidecar(t)
	configure() // dependency without endpoints
	require.NoError(t, xdsproxy.Wait(context.Background(), p.AdminAddr(), 5*time.Second, 10*time.Millisecond))
	rep, err := startupapp.CallDependency(context.Background(), startupapp.Options{Target: "http://" + listener + "/", Host: "dep", Stderr: &strings.Builder{}})
	require.Error(t, err)
	require.Len(t, rep.Attempts, 1)
	assert.Equal(t, 503, rep.Attempts[0].Status)
	assert.Equal(t, respflags.NoHealthyUpstream, rep.Attempts[0].Flag)
}

func TestStartsWhenHeldUntilSidecarReady(t *testing.T) {
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("dep")) }))
	defer dep.Close()
	listener, p, configure := sidecar(t)
	_, initialized := p.Stats()["server.initialization_time_ms"]
	assert.False(t, initialized, "no time to first config before the first config")
	go func() {
		time.Sleep(100 * time.Millisecond)
		configure(strings.TrimPrefix(dep.URL, "http://"))
	}()
	// The postStart hook: hold the app until the proxy is ready.
	require.NoError(t, xdsproxy.Wait(context.Background(), p.AdminAddr(), 5*time.Second, 10*time.Millisecond))
	assert.GreaterOrEqual(t, p.Stats()["server.initialization_time_ms"], int64(100), "start → first config, configured 100 ms in")

	addr := xdstest.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- startupapp.Run(ctx, startupapp.Options{Target: "http://" + listener + "/", Host: "dep", Addr: addr, Stderr: &strings.Builder{}})
	}()
	var rep startupapp.Report
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/attempts")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&rep) == nil
	}, 5*time.Second, 10*time.Millisecond)
	assert.True(t, rep.Succeeded)
	require.Len(t, rep.Attempts, 1)
	assert.Equal(t, 200, rep.Attempts[0].Status)
	cancel()
	assert.NoError(t, <-done)
}

// attemptsWriter signals after n attempt lines.
type attemptsWriter struct {
	mu    sync.Mutex
	n     int
	after int
	c     chan struct{}
}

func (w *attemptsWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += strings.Count(string(p), "startup-app: attempt")
	if w.n == w.after {
		close(w.c)
	}
	return len(p), nil
}

func TestResilientAppRetriesWithBackoffUntilTheSidecarIsReady(t *testing.T) {
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("dep")) }))
	defer dep.Close()
	listener, _, configure := sidecar(t)
	failed := &attemptsWriter{after: 3, c: make(chan struct{})}
	go func() {
		<-failed.c // three calls refused: now the proxy gets its configuration
		configure(strings.TrimPrefix(dep.URL, "http://"))
	}()
	interval := 20 * time.Millisecond
	rep, err := startupapp.CallDependency(context.Background(), startupapp.Options{Target: "http://" + listener + "/", Host: "dep",
		Attempts: 20, Interval: interval, MaxInterval: time.Second, Stderr: failed})
	require.NoError(t, err, "the resilient app outlives the proxy's start")
	require.GreaterOrEqual(t, len(rep.Attempts), 4)
	assert.Contains(t, rep.Attempts[0].Error, "connection refused")
	assert.Equal(t, 200, rep.Attempts[len(rep.Attempts)-1].Status)
	for i := 1; i < len(rep.Attempts); i++ {
		want := min(interval<<(i-1), time.Second)
		assert.GreaterOrEqual(t, rep.Attempts[i].At.Sub(rep.Attempts[i-1].At), want, "pause %d doubles", i)
	}
}
