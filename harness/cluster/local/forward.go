package local

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/meshchaos/meshchaos/harness/netns"
)

// forwarder relays a loopback port on the host to the apiserver inside the hub namespace, so a
// kubeconfig works from the host without touching the host's routes.
type forwarder struct {
	l      net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func startForwarder(ns, target string) (*forwarder, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &forwarder{l: l, conns: map[net.Conn]struct{}{}}
	dial := netns.Dialer(ns)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				up, err := dial(ctx, "tcp", target)
				cancel()
				if err != nil {
					c.Close()
					return
				}
				if !f.track(c, up) {
					return
				}
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
				c.Close()
				up.Close()
				<-done
				f.untrack(c, up)
			}()
		}
	}()
	return f, nil
}

func (f *forwarder) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *forwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
	}
}

// Addr is the host-side address (127.0.0.1:PORT).
func (f *forwarder) Addr() string { return f.l.Addr().String() }

// Close stops accepting and ends every relayed connection.
func (f *forwarder) Close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.l.Close()
	f.wg.Wait()
}
