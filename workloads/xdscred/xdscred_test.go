package xdscred_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshchaos/meshchaos/workloads/xdscred"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

const serverName = "meshchaos-controlplane.meshchaos-system.svc"

// secureServer is an xDS server on 127.0.0.1 whose certificate names serverName only, accepting
// tokens, with one cluster to serve.
func secureServer(t *testing.T, tokens ...string) (*xdstest.Server, *xdstest.CA) {
	ca := xdstest.NewCA(t)
	s := xdstest.StartSecure(t, xdstest.Auth{Cert: ca.ServerCert(t, serverName), Tokens: tokens})
	s.Set(t, "1", xdstest.EDSCluster("c", ""))
	return s, ca
}

// firstResponse opens an ADS stream on conn, asks for clusters and waits for the answer.
func firstResponse(conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "sidecar~127.0.0.1~a.ns~ns.svc.cluster.local"}, TypeUrl: resourcev3.ClusterType}); err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// dial builds the credentials of o and opens a client to addr with them.
func dial(t *testing.T, addr string, o xdscred.Options) *grpc.ClientConn {
	t.Helper()
	opts, err := o.DialOptions()
	require.NoError(t, err)
	conn, err := grpc.NewClient(addr, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestRightRootAndTokenGetConfig(t *testing.T) {
	s, ca := secureServer(t, "good")
	conn := dial(t, s.Addr, xdscred.Options{RootCertFile: ca.WriteRoot(t), TokenFile: xdstest.WriteFile(t, "istio-token", "good\n"), ServerName: serverName})
	require.NoError(t, firstResponse(conn))
	assert.Equal(t, []string{"good"}, s.Presented(), "the token, trimmed, as a bearer token")
}

func TestWrongRootFailsOnTheCertificate(t *testing.T) {
	s, _ := secureServer(t, "good")
	other := xdstest.NewCA(t)
	conn := dial(t, s.Addr, xdscred.Options{RootCertFile: other.WriteRoot(t), TokenFile: xdstest.WriteFile(t, "istio-token", "good"), ServerName: serverName})
	err := firstResponse(conn)
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.ErrorContains(t, err, "certificate signed by unknown authority")
	assert.Empty(t, s.Presented(), "no token reached a server the client does not trust")
}

func TestServerNameMismatchFails(t *testing.T) {
	s, ca := secureServer(t, "good")
	for name, want := range map[string]string{
		"istiod.istio-system.svc": "certificate is valid for " + serverName,
		"":                        "cannot validate certificate for 127.0.0.1", // the dialled IP, which the certificate does not name
	} {
		conn := dial(t, s.Addr, xdscred.Options{RootCertFile: ca.WriteRoot(t), TokenFile: xdstest.WriteFile(t, "istio-token", "good"), ServerName: name})
		err := firstResponse(conn)
		assert.ErrorContains(t, err, want, "server name %q", name)
	}
	assert.Empty(t, s.Presented())
}

func TestWrongTokenIsRefusedByTheServer(t *testing.T) {
	s, ca := secureServer(t, "good")
	conn := dial(t, s.Addr, xdscred.Options{RootCertPEM: ca.RootPEM, TokenFile: xdstest.WriteFile(t, "istio-token", "stale"), ServerName: serverName})
	err := firstResponse(conn)
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	assert.Equal(t, []string{"stale"}, s.Presented())
}

func TestTokenFileIsReadAtEveryRPC(t *testing.T) {
	s, ca := secureServer(t, "first", "second")
	token := xdstest.WriteFile(t, "istio-token", "first")
	conn := dial(t, s.Addr, xdscred.Options{RootCertFile: ca.WriteRoot(t), TokenFile: token, ServerName: serverName})
	require.NoError(t, firstResponse(conn))
	// kubelet rotates the projected token under the running client.
	require.NoError(t, os.WriteFile(token, []byte("second"), 0o600))
	require.NoError(t, firstResponse(conn))
	assert.Equal(t, []string{"first", "second"}, s.Presented())

	require.NoError(t, os.Remove(token))
	err := firstResponse(conn)
	assert.ErrorContains(t, err, "read the xDS token "+token)
}

func TestTokenSource(t *testing.T) {
	s, ca := secureServer(t, "from-source")
	calls := 0
	conn := dial(t, s.Addr, xdscred.Options{RootCertPEM: ca.RootPEM, ServerName: serverName,
		Token: func(context.Context) (string, error) { calls++; return "from-source", nil }})
	require.NoError(t, firstResponse(conn))
	require.NoError(t, firstResponse(conn))
	assert.Equal(t, 2, calls, "asked once per RPC")
}

func TestRotatedRootIsReadAtTheNextHandshake(t *testing.T) {
	s, ca := secureServer(t, "good")
	root := xdstest.NewCA(t).WriteRoot(t) // not the server's root yet
	o := xdscred.Options{RootCertFile: root, TokenFile: xdstest.WriteFile(t, "istio-token", "good"), ServerName: serverName}
	opts, err := o.DialOptions()
	require.NoError(t, err)
	connect := func() error {
		conn, err := grpc.NewClient(s.Addr, opts...)
		require.NoError(t, err)
		defer conn.Close()
		return firstResponse(conn)
	}
	require.ErrorContains(t, connect(), "certificate signed by unknown authority")
	require.NoError(t, os.WriteFile(root, ca.RootPEM, 0o600))
	require.NoError(t, connect(), "the same options trust the root now in the file")
}

func TestPlaintextWithoutRoots(t *testing.T) {
	s := xdstest.Start(t)
	s.Set(t, "1", xdstest.EDSCluster("c", ""))
	require.NoError(t, firstResponse(dial(t, s.Addr, xdscred.Options{})))
}

func TestOptionsThatCannotWork(t *testing.T) {
	root := xdstest.NewCA(t).WriteRoot(t)
	for _, tc := range []struct {
		o    xdscred.Options
		want string
	}{
		{xdscred.Options{TokenFile: "/t"}, "a token needs a root certificate"},
		{xdscred.Options{Token: func(context.Context) (string, error) { return "", nil }}, "a token needs a root certificate"},
		{xdscred.Options{ServerName: "x.svc"}, "a server name needs a root certificate"},
		{xdscred.Options{RootCertFile: root, RootCertPEM: []byte("x")}, "not both"},
		{xdscred.Options{RootCertFile: root, TokenFile: "/t", Token: func(context.Context) (string, error) { return "", nil }}, "not both"},
		{xdscred.Options{RootCertFile: "/nonexistent/root-cert.pem"}, "read the xDS root certificate /nonexistent/root-cert.pem: open"},
		{xdscred.Options{RootCertFile: xdstest.WriteFile(t, "root-cert.pem", "garbage")}, "no PEM certificate in it"},
	} {
		_, err := tc.o.DialOptions()
		assert.ErrorContains(t, err, tc.want, "%+v", tc.o)
	}
}

func TestTokenRequiresTransportSecurity(t *testing.T) {
	assert.True(t, xdscred.Options{RootCertPEM: []byte("x"), TokenFile: "/t"}.PerRPC().RequireTransportSecurity())
	assert.Nil(t, xdscred.Options{RootCertPEM: []byte("x")}.PerRPC(), "no token, no per-RPC credentials")
}
