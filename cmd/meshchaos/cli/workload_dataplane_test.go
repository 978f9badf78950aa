package cli

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

func TestXDSProxyCommandAndWaitHook(t *testing.T) {
	xds := xdstest.Start(t)
	admin := xdstest.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		root := NewRoot()
		root.SetArgs([]string{"workload", "xdsproxy", "--xds", xds.Addr, "--node-id", "sidecar~127.0.0.1~a.ns~ns.svc.cluster.local", "--admin", admin, "--backoff-base", "20ms", "--log-level", "warn"})
		done <- root.ExecuteContext(ctx)
	}()
	defer func() { cancel(); require.NoError(t, <-done) }()

	wait := func(timeout string) error {
		root := NewRoot()
		root.SetArgs([]string{"workload", "xdsproxy", "wait", "--admin", admin, "--timeout", timeout, "--interval", "10ms"})
		return root.Execute()
	}
	// No configuration: the hook fails with exit code 1.
	err := wait("200ms")
	var ec ExitCoder
	require.True(t, errors.As(err, &ec), "%v", err)
	assert.Equal(t, 1, ec.ExitCode())

	listener := xdstest.FreeAddr(t)
	xds.Set(t, "1", xdstest.InlineHTTPListener("l", listener, xdstest.RouteConfig("r")))
	assert.NoError(t, wait("5s"))
}

// The xdsproxy command on a secure port, with the files as Istio mounts them in a sidecar.
func TestXDSProxyCommandOnASecurePort(t *testing.T) {
	const name = "meshchaos-controlplane.meshchaos-system.svc"
	ca := xdstest.NewCA(t)
	xds := xdstest.StartSecure(t, xdstest.Auth{Cert: ca.ServerCert(t, name), Tokens: []string{"token"}})
	xds.Set(t, "1", xdstest.InlineHTTPListener("l", xdstest.FreeAddr(t), xdstest.RouteConfig("r")))
	admin := xdstest.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		root := NewRoot()
		root.SetArgs([]string{"workload", "xdsproxy", "--xds", xds.Addr, "--node-id", "sidecar~127.0.0.1~a.ns~ns.svc.cluster.local", "--admin", admin,
			"--xds-root-cert", ca.WriteRoot(t), "--xds-token", xdstest.WriteFile(t, "istio-token", "token"), "--xds-server-name", name,
			"--backoff-base", "20ms", "--log-level", "warn"})
		done <- root.ExecuteContext(ctx)
	}()
	defer func() { cancel(); require.NoError(t, <-done) }()
	root := NewRoot()
	root.SetArgs([]string{"workload", "xdsproxy", "wait", "--admin", admin, "--timeout", "10s", "--interval", "10ms"})
	require.NoError(t, root.Execute())
	assert.Equal(t, []string{"token"}, xds.Presented())
}

func TestWorkloadCommandsRejectBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"workload", "xdsproxy"},
		{"workload", "xdsproxy", "--xds", "nohostport", "--node-id", "n"},
		{"workload", "xdsproxy", "--xds", "127.0.0.1:1", "--node-id", "n", "--metadata", "{bad"},
		{"workload", "xdsproxy", "wait", "--timeout", "0s"},
		{"workload", "adsload", "--xds", "127.0.0.1:1", "--clients", "0"},
		// A token never goes in plaintext; a server name names a TLS server.
		{"workload", "xdsproxy", "--xds", "127.0.0.1:1", "--node-id", "n", "--xds-token", "/t"},
		{"workload", "xdsproxy", "--xds", "127.0.0.1:1", "--node-id", "n", "--xds-server-name", "cp.ns.svc"},
		{"workload", "adsload", "--xds", "127.0.0.1:1", "--xds-token", "/t"},
		{"workload", "adsload", "--xds", "127.0.0.1:1", "--abuse", "nack", "--xds-token", "/t"},
		{"workload", "startup-app"},
		{"workload", "echo", "--error-rate", "2"},
		{"workload", "hog", "--cpus", "0"},
	} {
		root := NewRoot()
		root.SetArgs(args)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := root.ExecuteContext(ctx)
		cancel()
		var ec ExitCoder
		require.True(t, errors.As(err, &ec), "%v: %v", args, err)
		assert.Equal(t, 2, ec.ExitCode(), "%v", args)
	}
}
