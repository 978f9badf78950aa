package xdsproxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/workloads/xdsproxy"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// TestRemovedListenerDrains: when LDS removes a listener, its socket closes at once (new
// connections are refused) while its open connections are served on its last configuration and
// answered with Connection: close (Envoy's drain, --drain-strategy immediate); what is still
// open after the drain time is closed.
func TestRemovedListenerDrains(t *testing.T) {
	const drainTime = time.Second
	started := make(chan string, 2)
	releaseA, releaseC := make(chan struct{}), make(chan struct{})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hold := map[string]chan struct{}{"/slow-a": releaseA, "/slow-c": releaseC}[r.URL.Path]
		if hold != nil {
			started <- r.URL.Path
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "done "+r.URL.Path)
	}))
	t.Cleanup(be.Close)
	xds := xdstest.Start(t)
	addr := xdstest.FreeAddr(t)
	res := []types.Resource{xdstest.EDSCluster("be", "be"), xdstest.CLA("be", strings.TrimPrefix(be.URL, "http://")),
		xdstest.InlineHTTPListener("L", addr, xdstest.RouteConfig("r", xdstest.VirtualHost("all", []string{"*"}, xdstest.PrefixRoute("/", "be"))))}
	xds.Set(t, "1", res...)
	p := startProxyWith(t, xdsproxy.Options{XDSAddress: xds.Addr, DrainTime: drainTime})
	eventually(t, "ready", p.Ready)

	// Two requests held by the backend, and a connection whose request is still arriving.
	inflight := map[string]chan reply{"/slow-a": make(chan reply, 1), "/slow-c": make(chan reply, 1)}
	for path, ch := range inflight {
		go func() { ch <- rawGet(addr, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n") }()
		select {
		case <-started:
		case <-time.After(wait):
			t.Fatalf("%s did not reach the backend", path)
		}
	}
	partial, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer partial.Close()
	_, err = io.WriteString(partial, "GET /later HTTP/1.1\r\nHost: x\r\n")
	require.NoError(t, err)
	eventually(t, "three connections open", func() bool { return p.Stats()["http.downstream_cx_active"] == 3 })

	removed := time.Now()
	xds.Set(t, "2", res[:2]...)
	eventually(t, "new connections refused", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})

	// The request that arrives on an open connection is routed with the listener's last
	// configuration, not answered 404 NR.
	_, err = io.WriteString(partial, "\r\n")
	require.NoError(t, err)
	r := readReply(partial)
	assert.Equal(t, 200, r.code, r.body)
	assert.Equal(t, "done /later", r.body)
	assert.True(t, r.closes, "a draining listener closes connections after the response")

	close(releaseA)
	r = <-inflight["/slow-a"]
	assert.Equal(t, 200, r.code, "the request in flight completes")
	assert.Equal(t, "done /slow-a", r.body)
	assert.True(t, r.closes)

	// /slow-c is still in flight when the drain time ends: its connection is closed.
	select {
	case r = <-inflight["/slow-c"]:
	case <-time.After(drainTime + wait):
		t.Fatal("the connection still open after the drain time was not closed")
	}
	assert.Equal(t, -1, r.code, "no response: the connection was closed (%s)", r.body)
	assert.GreaterOrEqual(t, time.Since(removed), drainTime-100*time.Millisecond, "not closed before the drain time")
	eventually(t, "no connection left", func() bool { return p.Stats()["http.downstream_cx_active"] == 0 })
	close(releaseC)
}

// rawGet sends a raw HTTP/1.1 request on a new connection and reads the reply (code -1 when
// the connection ends without one).
func rawGet(addr, request string) reply {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return reply{code: -1, body: err.Error()}
	}
	defer c.Close()
	if _, err := io.WriteString(c, request); err != nil {
		return reply{code: -1, body: err.Error()}
	}
	return readReply(c)
}

func readReply(c net.Conn) reply {
	c.SetReadDeadline(time.Now().Add(3 * wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return reply{code: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, body: string(b), closes: resp.Close}
}
