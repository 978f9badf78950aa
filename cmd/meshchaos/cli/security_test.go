package cli

import (
	"net"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
)

// listenFlags are the flags that name an address to listen on.
var listenFlags = map[string]bool{"addr": true, "admin": true, "listen": true, "serve": true,
	"xds-addr": true, "admin-addr": true, "webhook-addr": true}

// TestListenDefaultsAreLoopback: whatever the command (control plane, workloads, their
// helpers), a listen address left at its default binds loopback or nothing, never every address
// of the host: the admin, pprof and metrics endpoints are for the harness, not the network.
// In pods the manifests give the address explicitly (":PORT", the pod's own network namespace,
// or $(POD_IP)).
func TestListenDefaultsAreLoopback(t *testing.T) {
	var checked int
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if !listenFlags[f.Name] || f.Value.Type() != "string" {
				return
			}
			checked++
			where := c.CommandPath() + " --" + f.Name
			if f.DefValue == "" {
				return // nothing listens unless asked
			}
			host, _, err := net.SplitHostPort(f.DefValue)
			if !assert.NoError(t, err, where) {
				return
			}
			ip := net.ParseIP(host)
			assert.True(t, host == "localhost" || (ip != nil && ip.IsLoopback()),
				"%s defaults to %q: listen on loopback unless told otherwise", where, f.DefValue)
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRoot())
	// controlplane (xds, admin, webhook), xdsproxy, xdsproxy wait, echo, startup-app, adsload, hog.
	assert.GreaterOrEqual(t, checked, 9, "the listen flags were found")
}
