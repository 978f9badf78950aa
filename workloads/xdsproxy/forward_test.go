package xdsproxy_test

import (
	"bufio"
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
	var conns, closed atomic.Int64
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
		switch s {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed:
			closed.Add(1)
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

	// The upstream closed the idle connections: the proxy noticed (as Envoy does while a pooled
	// connection is idle), so the next request goes on a new one instead of failing with UC.
	eventually(t, "upstream closed its idle connections", func() bool { return closed.Load() == conns.Load() })
	r := get(t, addr, "svc.test", "/")
	assert.Equal(t, 200, r.code, r.body)
	assert.Empty(t, r.flag)

	body := strings.Repeat("payload", 1000)
	resp, err := client.Post("http://"+addr+"/echo", "text/plain", strings.NewReader(body))
	require.NoError(t, err)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, body, string(got), "request bodies pass through")
	assert.Equal(t, "7000", resp.Header.Get("X-Len"))

	r = get(t, addr, "svc.test", "/chunked")
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

// closingBackend answers the first request on each connection and, when a second request
// arrives on it, reads it and closes the connection without answering: from the proxy's side the
// race of reusing a pooled keep-alive connection just as the upstream closes it. It returns its
// address and a count of the connections it accepted.
func closingBackend(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if i > 0 {
						return // the whole request is read, so the close is a FIN, not a reset
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	return ln.Addr().String(), &conns
}

// TestStaleKeepAliveConnectionIsUCUnlessRetried: a request on a pooled connection that the
// upstream closes instead of answering fails with 503 UC, as in Envoy; the proxy does not quietly
// re-send it on a new connection. A route whose retry policy covers resets retries it.
func TestStaleKeepAliveConnectionIsUCUnlessRetried(t *testing.T) {
	be, conns := closingBackend(t)
	xds := xdstest.Start(t)
	addr := xdstest.FreeAddr(t)
	xds.Set(t, "1", xdstest.EDSCluster("be", "be"), xdstest.CLA("be", be),
		xdstest.InlineHTTPListener("L", addr, xdstest.RouteConfig("r", xdstest.VirtualHost("all", []string{"*"},
			xdstest.WithRetry(xdstest.PrefixRoute("/retried", "be"), "reset", 1),
			xdstest.PrefixRoute("/", "be")))))
	p := startProxy(t, xds, false)
	eventually(t, "ready", p.Ready)

	require.Equal(t, 200, get(t, addr, "x", "/").code)
	r := get(t, addr, "x", "/")
	assert.Equal(t, 503, r.code)
	assert.Equal(t, respflags.UpstreamConnectionTermination, r.flag)
	assert.Equal(t, "upstream connect error or disconnect/reset before headers. reset reason: connection termination", r.body)
	assert.EqualValues(t, 1, conns.Load(), "no second connection: the request was not re-sent")
	assert.EqualValues(t, 1, p.Stats()["http.response_flags.UC"])

	require.Equal(t, 200, get(t, addr, "x", "/retried").code)
	r = get(t, addr, "x", "/retried")
	assert.Equal(t, 200, r.code, "retry_on reset re-sends the request on a new connection")
	assert.Empty(t, r.flag)
	assert.EqualValues(t, 3, conns.Load())
}
