package xdsproxy_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// relay is a TCP forwarder in front of an xDS server, standing for the network path to the
// control plane: it records when connections arrive, closes them when the server is down, and
// can freeze like a SIGSTOPped server (connections stay open, no byte moves, new connections
// are accepted by the kernel but never served).
type relay struct {
	Addr   string
	ln     net.Listener
	target string

	mu      sync.Mutex
	accepts []time.Time
	thaw    chan struct{} // closed while not frozen
	conns   map[net.Conn]bool
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &relay{Addr: ln.Addr().String(), ln: ln, target: target, thaw: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(r.thaw)
	go r.serve()
	t.Cleanup(r.close)
	return r
}

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.accepts = append(r.accepts, time.Now())
		r.conns[c] = true
		r.mu.Unlock()
		go r.handle(c)
	}
}

func (r *relay) handle(c net.Conn) {
	<-r.thawed()
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		c.Close() // the server is down: the client sees its connection fail
		return
	}
	r.mu.Lock()
	r.conns[up] = true
	r.mu.Unlock()
	var once sync.Once
	done := func() { once.Do(func() { c.Close(); up.Close() }) }
	go func() { r.pipe(up, c); done() }()
	r.pipe(c, up)
	done()
}

// pipe copies src to dst, holding every chunk while the relay is frozen.
func (r *relay) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		<-r.thawed()
		n, err := src.Read(buf)
		if n > 0 {
			<-r.thawed()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *relay) thawed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.thaw
}

// freeze stops all forwarding until unfreeze.
func (r *relay) freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.thaw = make(chan struct{})
}

func (r *relay) unfreeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.thaw:
	default:
		close(r.thaw)
	}
}

// acceptsSince returns the arrival times of connections accepted at or after t.
func (r *relay) acceptsSince(t time.Time) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, a := range r.accepts {
		if !a.Before(t) {
			out = append(out, a)
		}
	}
	return out
}

func (r *relay) close() {
	r.ln.Close()
	r.unfreeze()
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
	}
}
