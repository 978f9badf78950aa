// Package netns lets host-side code (Vegeta attacks, pprof scrapes, readiness checks) open
// sockets inside a network namespace the harness created, without moving the whole process.
//
// A socket belongs to the namespace of the thread that created it. Do runs a function on a fresh
// OS thread switched into the namespace; that thread is never handed back to the Go scheduler
// (the goroutine exits while still locked, so the runtime ends the thread), so no other goroutine
// can ever run in the wrong namespace.
package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Dir is where named namespaces live (as with `ip netns add`).
const Dir = "/var/run/netns"

// Path returns the path of the named namespace.
func Path(name string) string { return filepath.Join(Dir, name) }

// Do runs fn on an OS thread that has joined the network namespace at path.
func Do(path string, fn func() error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer f.Close()
	errc := make(chan error, 1)
	go func() {
		// No UnlockOSThread: the thread dies with this goroutine instead of carrying the
		// namespace back into the scheduler's pool.
		runtime.LockOSThread()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// DialContext dials addr from inside the namespace at path. The connection, once made, is an
// ordinary socket usable from any goroutine.
func DialContext(ctx context.Context, path, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := Do(path, func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		conn = c
		return err
	})
	return conn, err
}

// Dialer returns a DialContext function bound to the namespace at path, for http.Transport,
// grpc.WithContextDialer, client-go's rest.Config.Dial and Vegeta.
func Dialer(path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return DialContext(ctx, path, network, addr)
	}
}

// Listen opens a listener inside the namespace at path.
func Listen(path, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(path, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}
