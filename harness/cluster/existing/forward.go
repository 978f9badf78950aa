package existing

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
	fc := &forwardConn{Stream: data, conn: c, errs: errStream, addr: addr}
	refused := make(chan struct{})
	go func() {
		// A message on the error stream is the kubelet failing the connection (refused, …).
		b, _ := io.ReadAll(errStream)
		if len(b) > 0 {
			f.mu.Lock()
			first := !f.refused[addr]
			f.refused[addr] = true
			f.mu.Unlock()
			if first {
				f.c.logf("port-forward to %s refused (%s): dialling it through the agent", addr, strings.TrimSpace(string(b)))
			}
			close(refused)
			fc.Close()
		}
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
}

func (c *forwardConn) fail(error) { c.Close() }

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
