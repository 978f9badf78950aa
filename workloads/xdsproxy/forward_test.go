package xdsproxy_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshchaos/meshchaos/results/respflags"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

func TestForwardingKeepsHTTPSemantics(t *testing.T) {
	var conns atomic.Int64
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Len", r.Header.Get("Content-Length"))
			w.Write(b)
		case "/chunked":
			for i := range 3 {
				io.WriteString(w, strings.Repeat(string(rune('a'+i)), 10))
				w.(http.Flusher).Flush()
			}
		case "/big":
			w.Write(bytes.Repeat([]byte("x"), 1<<20))
		case "/reset":
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		case "/slow":
			time.Sleep(time.Second)
		default:
			w.Header().Set("X-Seen-Host", r.Host)
			io.WriteString(w, "ok")
		}
	}))
	be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	be.Config.IdleTimeout = 200 * time.Millisecond // the upstream drops idle keep-alive connections
	be.Start()
	defer be.Close()

	xds := xdstest.Start(t)
	addr := xdstest.FreeAddr(t)
	slow := xdstest.PrefixRoute("/slow", "be")
	slow.GetRoute().Timeout = durationpb.New(100 * time.Millisecond)
	xds.Set(t, "1", xdstest.EDSCluster("be", "be"), xdstest.CLA("be", strings.TrimPrefix(be.URL, "http://")),
		xdstest.InlineHTTPListener("L", addr, xdstest.RouteConfig("r", xdstest.VirtualHost("all", []string{"*"}, slow, xdstest.PrefixRoute("/", "be")))))
	p := startProxy(t, xds, false)
	eventually(t, "ready", p.Ready)

	// Keep-alive upstream: many requests, few connections.
	for range 20 {
		r := get(t, addr, "svc.test", "/")
		require.Equal(t, 200, r.code)
	}
	assert.LessOrEqual(t, conns.Load(), int64(2), "upstream connections are reused")

	// The upstream closed the idle connection: the next request still succeeds on a new one.
	time.Sleep(400 * time.Millisecond)
	assert.Equal(t, 200, get(t, addr, "svc.test", "/").code)

	body := strings.Repeat("payload", 1000)
	resp, err := client.Post("http://"+addr+"/echo", "text/plain", strings.NewReader(body))
	require.NoError(t, err)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, body, string(got), "request bodies pass through")
	assert.Equal(t, "7000", resp.Header.Get("X-Len"))

	r := get(t, addr, "svc.test", "/chunked")
	assert.Equal(t, "aaaaaaaaaabbbbbbbbbbcccccccccc", r.body)
	r = get(t, addr, "svc.test", "/big")
	assert.Equal(t, 1<<20, len(r.body))

	req, _ := http.NewRequest(http.MethodHead, "http://"+addr+"/", nil)
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)

	r = get(t, addr, "svc.test", "/reset")
	assert.Equal(t, 503, r.code)
	assert.Equal(t, "UC", r.flag, "upstream reset before headers")

	r = get(t, addr, "svc.test", "/slow")
	assert.Equal(t, 504, r.code)
	assert.Equal(t, respflags.UpstreamRequestTimeout, r.flag)
	assert.Equal(t, "upstream request timeout", r.body)

	assert.Equal(t, 200, get(t, addr, "svc.test", "/").code, "still healthy after errors")
}
