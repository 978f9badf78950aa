package xds

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/peer"
)

// conns are the server's open connections, by remote address, so that a stream the throttle
// gives up on can end its connection. Ending only the stream is not enough: gRPC queues a
// stream's closing trailers behind the data it has not sent yet, and a proxy that reads
// nothing never opens its flow-control window for that data, so the stream, with the
// responses queued on it (two, each in a pooled buffer of up to 1 MiB), would stay until the
// proxy goes by itself. Closing the connection frees them at once. Envoy and grpc-go open one
// ADS stream per connection, so this ends the stream given up on and nothing else.
type conns struct {
	mu     sync.Mutex
	byAddr map[string][]*trackedConn
}

func newConns() *conns { return &conns{byAddr: map[string][]*trackedConn{}} }

// listener wraps l so that its connections are tracked.
func (c *conns) listener(l net.Listener) net.Listener { return trackedListener{Listener: l, c: c} }

// closeOf closes the connection of the stream whose context is ctx; it reports whether there
// was exactly one such connection.
func (c *conns) closeOf(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return false
	}
	c.mu.Lock()
	list := c.byAddr[p.Addr.String()]
	c.mu.Unlock()
	if len(list) != 1 { // none, or an address shared by several (not TCP): cannot tell which
		return false
	}
	_ = list[0].Close()
	return true
}

// open is how many connections are tracked (for tests).
func (c *conns) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.byAddr {
		n += len(l)
	}
	return n
}

type trackedListener struct {
	net.Listener
	c *conns
}

func (l trackedListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn, c: l.c, key: conn.RemoteAddr().String()}
	l.c.mu.Lock()
	l.c.byAddr[tc.key] = append(l.c.byAddr[tc.key], tc)
	l.c.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	c    *conns
	key  string
	once sync.Once
}

func (tc *trackedConn) Close() error {
	tc.once.Do(func() {
		tc.c.mu.Lock()
		defer tc.c.mu.Unlock()
		list := tc.c.byAddr[tc.key]
		for i, x := range list {
			if x == tc {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(tc.c.byAddr, tc.key)
		} else {
			tc.c.byAddr[tc.key] = list
		}
	})
	return tc.Conn.Close()
}
