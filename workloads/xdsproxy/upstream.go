package xdsproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// upstreamPool is a minimal HTTP/1.1 client with keep-alive connection pooling per endpoint.
// Unlike http.Transport it writes the request and reads the response on the caller's goroutine
// (Transport hands each request to per-connection read and write goroutines), which removes two
// goroutine handoffs per request: on a busy 2-core node that is most of the proxy's tail latency.
type upstreamPool struct {
	mu       sync.Mutex
	idle     map[string][]*upConn
	maxIdle  int
	idleTime time.Duration
	stop     chan struct{}
	stopOnce sync.Once
}

type upConn struct {
	net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	lastUsed time.Time
}

func newUpstreamPool() *upstreamPool {
	p := &upstreamPool{idle: map[string][]*upConn{}, maxIdle: 1024, idleTime: 90 * time.Second, stop: make(chan struct{})}
	go p.reap()
	return p
}

// reap closes connections idle for longer than idleTime (endpoints come and go).
func (p *upstreamPool) reap() {
	t := time.NewTicker(p.idleTime / 3)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-p.idleTime)
		p.mu.Lock()
		for host, conns := range p.idle {
			keep := conns[:0]
			for _, c := range conns {
				if c.lastUsed.Before(cutoff) {
					c.Close()
				} else {
					keep = append(keep, c)
				}
			}
			if len(keep) == 0 {
				delete(p.idle, host)
			} else {
				p.idle[host] = keep
			}
		}
		p.mu.Unlock()
	}
}

func (p *upstreamPool) close() {
	p.stopOnce.Do(func() { close(p.stop) })
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conns := range p.idle {
		for _, c := range conns {
			c.Close()
		}
	}
	p.idle = map[string][]*upConn{}
}

// get returns an idle connection to host, or nil. Connections the upstream closed while they
// sat idle are dropped here: Envoy's event loop sees such a close at once and removes the
// connection from its pool, so only a close racing with the request reaches it (as UC).
func (p *upstreamPool) get(host string) *upConn {
	for {
		p.mu.Lock()
		conns := p.idle[host]
		if len(conns) == 0 {
			p.mu.Unlock()
			return nil
		}
		c := conns[len(conns)-1]
		p.idle[host] = conns[:len(conns)-1]
		p.mu.Unlock()
		if c.br.Buffered() == 0 && idleConnAlive(c.Conn) {
			return c
		}
		c.Close()
	}
}

func (p *upstreamPool) put(host string, c *upConn) {
	c.lastUsed = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.stop:
		c.Close()
		return
	default:
	}
	if len(p.idle[host]) >= p.maxIdle {
		c.Close()
		return
	}
	p.idle[host] = append(p.idle[host], c)
}

var longAgo = time.Unix(1, 0)

// roundTrip sends req to req.URL.Host on a pooled or new connection. Dial failures come back
// as *dialError. A pooled connection that fails is not silently replaced: like Envoy, the
// caller sees the failure (UC), and only a retry policy re-sends the request.
func (p *upstreamPool) roundTrip(req *http.Request, connectTimeout time.Duration) (*http.Response, error) {
	host := req.URL.Host
	ctx := req.Context()
	c := p.get(host)
	if c == nil {
		d := net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
		nc, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			return nil, &dialError{err: err}
		}
		c = &upConn{Conn: nc, br: bufio.NewReaderSize(nc, 4<<10), bw: bufio.NewWriterSize(nc, 4<<10)}
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	// Cancellation (downstream gone, route timeout) interrupts blocked I/O.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(longAgo) })
	err := req.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(c.br, req)
	}
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(c.br, req) // skip 1xx informational responses
	}
	if err != nil {
		stop()
		c.Close()
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The connection now belongs to the upgraded protocol (the reverse proxy copies it).
		stop()
		c.SetDeadline(time.Time{})
		resp.Body = &upgraded{Reader: c.br, conn: c}
		return resp, nil
	}
	resp.Body = &pooledBody{body: resp.Body, c: c, pool: p, host: host, stop: stop, reuse: !resp.Close && !req.Close}
	return resp, nil
}

// pooledBody returns the connection to the pool once the body is consumed and closed.
type pooledBody struct {
	body  io.ReadCloser
	c     *upConn
	pool  *upstreamPool
	host  string
	stop  func() bool
	reuse bool
	once  sync.Once
}

func (b *pooledBody) Read(p []byte) (int, error) { return b.body.Read(p) }

func (b *pooledBody) Close() error {
	var err error
	b.once.Do(func() {
		err = b.body.Close() // drains what is left, so the connection can be reused
		if !b.stop() {
			b.reuse = false // cancellation fired: the deadline is poisoned
		}
		if b.reuse && err == nil {
			b.c.SetDeadline(time.Time{})
			b.pool.put(b.host, b.c)
			return
		}
		b.c.Close()
	})
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

type upgraded struct {
	io.Reader
	conn *upConn
}

func (u *upgraded) Write(p []byte) (int, error) { return u.conn.Write(p) }
func (u *upgraded) Close() error                { return u.conn.Close() }
