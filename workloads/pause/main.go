// Command pause is the pod sandbox's process: it holds the pod's namespaces and does nothing
// else until it is told to stop. The local substrate imports it as the CRI's sandbox image
// because there is no registry to pull registry.k8s.io/pause from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of the sandbox it may inherit orphans: reap them.
	signal.Notify(sig, syscall.SIGCHLD)
	for s := range sig {
		if s == syscall.SIGCHLD {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
