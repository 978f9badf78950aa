//go:build unix

package xdsproxy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// idleConnAlive reports whether an idle keep-alive connection is still open: a non-blocking peek
// finds nothing to read. End of stream (the upstream closed it), an error (reset), or unexpected
// bytes mean it must not carry another request.
func idleConnAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		alive = rerr == unix.EAGAIN || rerr == unix.EWOULDBLOCK
		return true // never wait for readability
	})
	return err == nil && alive
}
