//go:build !unix

package xdsproxy

import "net"

// idleConnAlive cannot peek without blocking here; a closed idle connection then fails its next
// request with UC.
func idleConnAlive(net.Conn) bool { return true }
