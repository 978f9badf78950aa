package xdsproxy_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/workloads/xdscred"
	"github.com/meshchaos/meshchaos/workloads/xdsproxy"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

const secureName = "meshchaos-controlplane.meshchaos-system.svc"

// TestSecurePortAsPilotAgent: on a TLS port that checks bearer tokens, a proxy with the root
// and a valid token is configured and ready; with a token the server refuses it is not, keeps
// retrying on its backoff with the token read again each time, and is ready once kubelet's
// rotation puts a valid token in the file.
func TestSecurePortAsPilotAgent(t *testing.T) {
	ca := xdstest.NewCA(t)
	xds := xdstest.StartSecure(t, xdstest.Auth{Cert: ca.ServerCert(t, secureName), Tokens: []string{"good"}})
	xds.Set(t, "1", xdstest.InlineHTTPListener("l", xdstest.FreeAddr(t), xdstest.RouteConfig("r")))
	root := ca.WriteRoot(t)

	good := startProxyWith(t, xdsproxy.Options{XDSAddress: xds.Addr,
		Credentials: xdscred.Options{RootCertFile: root, TokenFile: xdstest.WriteFile(t, "istio-token", "good"), ServerName: secureName}})
	eventually(t, "the proxy with a valid token is ready", good.Ready)

	token := xdstest.WriteFile(t, "istio-token", "expired")
	refused := startProxyWith(t, xdsproxy.Options{XDSAddress: xds.Addr, NodeID: "sidecar~127.0.0.2~b.default~default.svc.cluster.local",
		Credentials: xdscred.Options{RootCertFile: root, TokenFile: token, ServerName: secureName}})
	expired := func() int {
		return len(slices.DeleteFunc(xds.Presented(), func(s string) bool { return s != "expired" }))
	}
	eventually(t, "the refused proxy retries", func() bool { return expired() >= 3 })
	assert.False(t, refused.Ready(), "no configuration without a valid token")
	require.NoError(t, os.WriteFile(token, []byte("good"), 0o600))
	eventually(t, "ready with the rotated token", refused.Ready)
}

func TestSecureStartNamesAMissingRoot(t *testing.T) {
	p, err := xdsproxy.New(xdsproxy.Options{XDSAddress: "127.0.0.1:15012", NodeID: "n",
		Credentials: xdscred.Options{RootCertFile: "/nonexistent/root-cert.pem", TokenFile: "/t"}})
	require.NoError(t, err)
	err = p.Start(context.Background())
	assert.ErrorContains(t, err, "read the xDS root certificate /nonexistent/root-cert.pem")

	_, err = xdsproxy.New(xdsproxy.Options{XDSAddress: "127.0.0.1:15010", NodeID: "n", Credentials: xdscred.Options{TokenFile: "/t"}})
	assert.ErrorContains(t, err, "a token needs a root certificate")
}
