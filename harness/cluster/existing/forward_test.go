package existing

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
)

// fakeKubelet answers the API server's pods/portforward as the kubelet and the container
// runtime do: a SPDY connection per pod, an error and a data stream per TCP connection. What
// each connection to a port meets is the test's choice.
type fakeKubelet struct {
	t *testing.T
	// serve handles one forwarded connection: data is the client's stream, fail writes the
	// kubelet's message on the error stream, drop closes the whole SPDY connection.
	serve func(port string, data httpstream.Stream, fail func(string), drop func())

	mu    sync.Mutex
	conns int // SPDY connections opened
}

func (k *fakeKubelet) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if _, err := httpstream.Handshake(req, w, []string{portforward.PortForwardProtocolV1Name}); err != nil {
		return
	}
	k.mu.Lock()
	k.conns++
	k.mu.Unlock()
	streams := make(chan httpstream.Stream, 16)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, req, func(s httpstream.Stream, _ <-chan struct{}) error {
		streams <- s
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	pairs := map[string][2]httpstream.Stream{}
	for {
		select {
		case <-conn.CloseChan():
			return
		case s := <-streams:
			id := s.Headers().Get(corev1.PortForwardRequestIDHeader)
			p := pairs[id]
			if s.Headers().Get(corev1.StreamType) == corev1.StreamTypeError {
				p[0] = s
			} else {
				p[1] = s
			}
			pairs[id] = p
			if p[0] == nil || p[1] == nil {
				continue
			}
			delete(pairs, id)
			errStream, data := p[0], p[1]
			go func() {
				// As the kubelet: the error stream closes before the data stream.
				defer data.Close()
				defer errStream.Close()
				k.serve(s.Headers().Get(corev1.PortHeader), data,
					func(msg string) { fmt.Fprint(errStream, msg) },
					func() { conn.Close() })
			}()
		}
	}
}

// answerHTTP answers every request read from data with 200, as a healthy gateway does.
func answerHTTP(data httpstream.Stream) {
	r := bufio.NewReader(data)
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if _, err := io.WriteString(data, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

// forwarderTo is a forwarder whose API server is the fake kubelet.
func forwarderTo(t *testing.T, k *fakeKubelet) (*forwarder, *[]string) {
	srv := httptest.NewServer(k)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	var logs []string
	c := &existingCluster{cfg: cfg, client: cs, logf: func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(f, a...))
	}}
	f := &forwarder{c: c, pods: map[string]podRef{}, conns: map[string]httpstream.Connection{}, refused: map[string]bool{}, tried: map[string]bool{}, carried: map[string]bool{}}
	t.Cleanup(f.close)
	return f, &logs
}

// client is an HTTP client whose connections to addr go through f to one pod, as the
// existing substrate's Dialer sends the traffic.
func client(f *forwarder, dials *int) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		*dials++
		_, port, _ := net.SplitHostPort(addr)
		return f.dial(podRef{"ns", "gateway"}, addr, port)
	}}}
}

// TestForwardFailuresNameTheHarnessPath: a connection the port-forward loses under a request
// fails with an error that names the port-forward (the kubelet's message, or the connection to
// the pod lost), not the bare EOF that reads as the gateway closing it; and one connection of
// a reachable address failing does not move that address's traffic off the port-forward.
func TestForwardFailuresNameTheHarnessPath(t *testing.T) {
	const addr = "10.0.0.1:80"
	for _, tc := range []struct {
		name string
		// second is what the second connection meets after answering one request.
		second func(data httpstream.Stream, fail func(string), drop func())
		want   string
	}{
		{"the kubelet fails the connection", func(data httpstream.Stream, fail func(string), _ func()) {
			bufio.NewReader(data).ReadString('\n') // a request arrives; the runtime's connection breaks
			fail("error forwarding port 80 to pod gateway: read: connection reset by peer")
		}, "port-forward to 10.0.0.1:80: the kubelet ended the connection: error forwarding port 80 to pod gateway: read: connection reset by peer"},
		{"the connection to the pod is lost", func(data httpstream.Stream, _ func(string), drop func()) {
			bufio.NewReader(data).ReadString('\n')
			drop()
		}, "port-forward to 10.0.0.1:80: the port-forward connection to the pod was lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n int
			var mu sync.Mutex
			k := &fakeKubelet{t: t, serve: func(_ string, data httpstream.Stream, fail func(string), drop func()) {
				mu.Lock()
				n++
				i := n
				mu.Unlock()
				if i == 2 {
					tc.second(data, fail, drop)
					return
				}
				answerHTTP(data)
			}}
			f, logs := forwarderTo(t, k)
			var dials int
			// Two clients: the second one's connection is the one that breaks, so no retry
			// of a reused connection hides the failure.
			c1 := client(f, &dials)
			resp, err := c1.Get("http://" + addr + "/")
			require.NoError(t, err)
			resp.Body.Close()

			c2 := client(f, &dials)
			_, err = c2.Get("http://" + addr + "/")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want, "the error names the harness's path")
			assert.NotContains(t, strings.TrimSuffix(err.Error(), tc.want), ": EOF")

			// The address stays on the port-forward: the next connection is forwarded and answered.
			assert.True(t, f.usable(addr), "one failed connection does not move the address off the port-forward")
			c3 := client(f, &dials)
			resp, err = c3.Get("http://" + addr + "/")
			require.NoError(t, err)
			resp.Body.Close()
			assert.Empty(t, *logs, "nothing said the address was refused")
		})
	}
}

// TestForwardRefusalStillMovesTheAddress: an address the kubelet cannot reach at all (a server
// bound to the pod IP only refuses the pod's localhost) goes through the agent from then on,
// as before; a pod that closes a connection itself still reads as EOF, the pod's doing.
func TestForwardRefusalStillMovesTheAddress(t *testing.T) {
	k := &fakeKubelet{t: t, serve: func(port string, data httpstream.Stream, fail func(string), _ func()) {
		switch port {
		case "15014":
			fail("failed to connect to localhost:15014 inside namespace: connection refused")
		case "80":
			bufio.NewReader(data).ReadString('\n') // the pod closes the connection unanswered
		}
	}}
	f, logs := forwarderTo(t, k)
	_, err := f.dial(podRef{"ns", "cp"}, "10.0.0.2:15014", "15014")
	require.ErrorIs(t, err, errRefused)
	assert.False(t, f.usable("10.0.0.2:15014"))
	require.Len(t, *logs, 1)
	assert.Contains(t, (*logs)[0], "port-forward to 10.0.0.2:15014 refused")

	var dials int
	_, err = client(f, &dials).Get("http://10.0.0.3:80/")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "EOF", "the pod's own close is no error of the path")
	assert.NotContains(t, err.Error(), "port-forward")
}
