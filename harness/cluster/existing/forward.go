package existing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// forwarder reaches pods of the run's namespaces through the API server's port-forward, as
// kubectl port-forward does: one multiplexed connection per pod, a stream pair per TCP
// connection, no process started per connection. Traffic and scrapes to the mesh's pods go
// this way; other addresses (ClusterIPs, anything outside the run) through the agent's dial.
type forwarder struct {
	c *existingCluster

	mu    sync.Mutex
	pods  map[string]podRef // pod IP → pod
	conns map[string]httpstream.Connection
	next  int
	// refused are addresses port-forward cannot reach: the kubelet connects to the port on
	// the pod's localhost, and a server bound to the pod IP only (the reference control
	// plane's) refuses it. Those go through the agent's dial.
	refused map[string]bool
	tried   map[string]bool
	// carried are addresses a port-forward has carried bytes from: the kubelet reaches them,
	// so a later failure of one connection is that connection's, never a reason to change path.
	carried map[string]bool
}

// probeWait is how long a first connection to an address waits for the kubelet to refuse it.
const probeWait = time.Second

// usable reports whether addr is worth a port-forward.
func (f *forwarder) usable(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.refused[addr]
}

type podRef struct{ namespace, name string }

// pod finds the run's pod with ip; false when none of the run's namespaces has it.
func (f *forwarder) pod(ctx context.Context, ip string) (podRef, bool) {
	f.mu.Lock()
	p, ok := f.pods[ip]
	f.mu.Unlock()
	if ok {
		return p, true
	}
	for _, ns := range f.c.namespaces {
		list, err := f.c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "status.podIP=" + ip})
		if err != nil {
			continue
		}
		for _, it := range list.Items {
			if it.Spec.HostNetwork || it.Status.Phase != corev1.PodRunning {
				continue
			}
			p = podRef{it.Namespace, it.Name}
			f.mu.Lock()
			f.pods[ip] = p
			f.mu.Unlock()
			return p, true
		}
	}
	return podRef{}, false
}

// conn is the multiplexed port-forward connection to a pod, opened on first use and again
// after it closed.
func (f *forwarder) conn(p podRef) (httpstream.Connection, error) {
	key := p.namespace + "/" + p.name
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[key]; ok {
		select {
		case <-c.CloseChan():
		default:
			return c, nil
		}
	}
	transport, upgrader, err := spdy.RoundTripperFor(f.c.cfg)
	if err != nil {
		return nil, err
	}
	u := f.c.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.namespace).Name(p.name).SubResource("portforward").URL()
	d := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	c, _, err := d.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s: %w", key, err)
	}
	f.conns[key] = c
	return c, nil
}

// dial opens a stream to port of pod p.
func (f *forwarder) dial(p podRef, addr, port string) (net.Conn, error) {
	c, err := f.conn(p)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.next++
	id := strconv.Itoa(f.next)
	f.mu.Unlock()
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, port)
	h.Set(corev1.PortForwardRequestIDHeader, id)
	errStream, err := c.CreateStream(h)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("port-forward %s: %w", addr, err)
	}
	errStream.Close() // the server writes, we only read
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := c.CreateStream(h)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("port-forward %s: %w", addr, err)
	}
	fc := &forwardConn{Stream: data, conn: c, errs: errStream, addr: addr, errDone: make(chan struct{}), carried: func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.carried[addr] = true
	}}
	refused := make(chan struct{})
	go func() {
		defer close(fc.errDone)
		// A message on the error stream is the kubelet failing the connection: it could not
		// connect to the port (refused, …), or the connection it made failed later (reset, …).
		b, _ := io.ReadAll(errStream)
		if len(b) == 0 {
			return
		}
		msg := strings.TrimSpace(string(b))
		ferr := fmt.Errorf("port-forward to %s: the kubelet ended the connection: %s", addr, msg)
		fc.failure.Store(&ferr)
		f.mu.Lock()
		// Only an address no port-forward ever carried a byte from is one the kubelet cannot
		// reach; one connection of a reachable address failing is that connection's failure,
		// and the traffic keeps its path.
		unreachable := !fc.got.Load() && !f.carried[addr]
		first := unreachable && !f.refused[addr]
		if unreachable {
			f.refused[addr] = true
		}
		f.mu.Unlock()
		if first {
			f.c.logf("port-forward to %s refused (%s): dialling it through the agent", addr, msg)
		}
		if unreachable {
			close(refused)
		}
		fc.Close()
	}()
	f.mu.Lock()
	known := f.tried[addr]
	f.tried[addr] = true
	f.mu.Unlock()
	if !known {
		// The first connection to an address learns whether the kubelet can reach it.
		select {
		case <-refused:
			return nil, errRefused
		case <-time.After(probeWait):
		}
	}
	return fc, nil
}

// errRefused: the kubelet could not connect to the port on the pod's localhost.
var errRefused = fmt.Errorf("port-forward refused")

// forwardConn is a TCP connection carried by a port-forward stream.
type forwardConn struct {
	httpstream.Stream
	conn httpstream.Connection
	errs httpstream.Stream
	addr string
	once sync.Once

	got     atomic.Bool           // a byte came from the pod
	carried func()                // records that the address carried a byte
	errDone chan struct{}         // closed when the error stream has ended
	failure atomic.Pointer[error] // the kubelet's message, when it ended the connection
}

// pathEndWait bounds how long a read that reached the end of its stream waits for the error
// stream to end too (the kubelet closes the error stream first, so this is rarely waited).
const pathEndWait = time.Second

// Read is the stream's Read, except that the end of a stream the harness's own path ended
// (the kubelet's message, or the multiplexed connection to the pod lost) is that error rather
// than io.EOF: to an HTTP client a bare EOF reads as the pod closing the connection, and the
// measurement would blame the mesh for the port-forward's failure.
func (c *forwardConn) Read(p []byte) (int, error) {
	n, err := c.Stream.Read(p)
	if n > 0 && !c.got.Swap(true) && c.carried != nil {
		c.carried()
	}
	if errors.Is(err, io.EOF) {
		if perr := c.pathError(); perr != nil {
			return n, perr
		}
	}
	return n, err
}

// pathError is why the stream ended when the harness's path ended it; nil when the pod did.
func (c *forwardConn) pathError() error {
	select {
	case <-c.errDone:
	case <-time.After(pathEndWait):
	}
	if e := c.failure.Load(); e != nil {
		return *e
	}
	// A connection torn down resets its streams before it closes: the end of this stream
	// may come just before the connection's.
	select {
	case <-c.conn.CloseChan():
		return fmt.Errorf("port-forward to %s: %w", c.addr, errForwardLost)
	case <-time.After(lostWait):
		return nil
	}
}

// lostWait is how long the end of a stream waits for its connection's end to show; the pod
// closing a connection costs its reader this much (the runtime holds the stream a second
// after the pod's close anyway).
const lostWait = 250 * time.Millisecond

// errForwardLost: the multiplexed port-forward connection to the pod (through the API server
// and the kubelet) closed under a connection it carried.
var errForwardLost = errors.New("the port-forward connection to the pod was lost")

func (c *forwardConn) Close() error {
	c.once.Do(func() {
		_ = c.Stream.Reset()
		_ = c.errs.Reset()
		c.conn.RemoveStreams(c.Stream, c.errs)
	})
	return nil
}

func (c *forwardConn) LocalAddr() net.Addr  { return execAddr("port-forward") }
func (c *forwardConn) RemoteAddr() net.Addr { return execAddr(c.addr) }

// Deadlines are not supported by a stream; HTTP and gRPC clients here end connections by
// closing them.
func (c *forwardConn) SetDeadline(time.Time) error      { return nil }
func (c *forwardConn) SetReadDeadline(time.Time) error  { return nil }
func (c *forwardConn) SetWriteDeadline(time.Time) error { return nil }

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, c := range f.conns {
		c.Close()
		delete(f.conns, k)
	}
}
