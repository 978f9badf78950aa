package controlplane_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/meshchaos/meshchaos/controlplane"
	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/rootcert"
)

// The secure xDS port against a real kube-apiserver: real ServiceAccount tokens (TokenRequest),
// real TokenReviews, the root certificate read from the ConfigMap the control plane published,
// two replicas sharing one CA through the Secret, and grpc-go's own xDS client bootstrapped with
// TLS channel credentials and a token file.

const (
	secureCPNamespace = "meshchaos-system"
	secureServerName  = "meshchaos-controlplane." + secureCPNamespace + ".svc"
	secureRunLabel    = "meshchaos.io/run"
	secureRun         = "secure-test"
	// envSecureGRPCChild makes the test binary a grpc-go xDS client (runSecureGRPCChild): grpc-go
	// reads GRPC_EXPERIMENTAL_XDS_BOOTSTRAP_CALL_CREDS once, at start, so the token file call
	// credentials need a process started with it.
	envSecureGRPCChild = "MESHCHAOS_TEST_SECURE_GRPC_CHILD"
)

// secureOptions turn on the secure port as the manifests do, on loopback.
func secureOptions(o *controlplane.Options) {
	o.Namespace, o.CASecret = secureCPNamespace, "meshchaos-ca-secret"
	o.SecureXDS = &controlplane.SecureXDS{Addr: "127.0.0.1:0", DNSNames: []string{secureServerName, "localhost"},
		RootNamespaces: secureRunLabel + "=" + secureRun}
}

// publishedRoot waits for the root ConfigMap in ns and returns its certificate.
func publishedRoot(t *testing.T, kc kubernetes.Interface, ns string) string {
	t.Helper()
	var root string
	waitFor(t, 30*time.Second, "the root ConfigMap in "+ns, func() bool {
		cm, err := kc.CoreV1().ConfigMaps(ns).Get(context.Background(), rootcert.DefaultConfigMap, metav1.GetOptions{})
		if err != nil {
			return false
		}
		root = cm.Data[rootcert.Key]
		return root != ""
	})
	return root
}

// saToken is a token of service account ns/app for audience (TokenRequest, as the kubelet's
// projected volume).
func saToken(t *testing.T, kc kubernetes.Interface, ns, audience string) string {
	t.Helper()
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), "app", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// secureADS opens an ADS stream over TLS (trusting roots) with token as its bearer token ("":
// none) as node id, subscribed to CDS.
func secureADS(t *testing.T, addr string, roots *x509.CertPool, token, id string) *adsclient.Client {
	t.Helper()
	c, err := adsclient.DialSecure(addr, id, roots, secureServerName, token)
	require.NoError(t, err)
	_ = c.SetNames(resourcev3.ClusterType, nil) // may fail with EOF: the server refused the stream
	return c
}

// refusedWith is the code a stream is ended with before any config.
func refusedWith(t *testing.T, c *adsclient.Client) codes.Code {
	t.Helper()
	err := c.Run()
	c.CloseNoRun()
	require.Empty(t, c.Received(), "a refused stream gets no config")
	return status.Code(err)
}

func TestSecureXDS(t *testing.T) {
	c := startCluster(t)
	kc, err := kubernetes.NewForConfig(c.cfg)
	require.NoError(t, err)
	ctx := context.Background()
	run := map[string]string{secureRunLabel: secureRun}
	for ns, lbl := range map[string]map[string]string{secureCPNamespace: nil, "sec-a": run, "sec-b": run, "sec-other": nil} {
		_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: lbl}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	target := newGRPCTarget(t, "sec-a", "echo", "echo.secure.test")
	target.create(t, c)

	cp := startCPWith(t, c.cfg, secureOptions)
	<-cp.Gate.Done()
	root := publishedRoot(t, kc, "sec-a")
	assert.Equal(t, string(cp.CA.PEM), root)
	assert.Equal(t, root, publishedRoot(t, kc, "sec-b"))
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM([]byte(root)))

	const nodeA = "sidecar~10.0.0.1~pod.sec-a~sec-a.svc.cluster.local"
	tokenA := saToken(t, kc, "sec-a", "istio-ca")
	refused := func(reason string) float64 {
		return testutil.ToFloat64(cp.Metrics.XDSAuthRefused.WithLabelValues(reason))
	}

	t.Run("token of the proxy's namespace gets CDS", func(t *testing.T) {
		client := secureADS(t, cp.SecureXDSAddr(), roots, tokenA, nodeA)
		go client.Run()
		t.Cleanup(client.Close)
		r := firstResponse(t, client)
		assert.Equal(t, resourcev3.ClusterType, r.TypeURL)
		assert.Contains(t, clusterNames(client), "outbound|7070||echo.secure.test")
	})
	t.Run("wrong audience", func(t *testing.T) {
		tok := saToken(t, kc, "sec-a", "https://kubernetes.default.svc.cluster.local")
		assert.Equal(t, codes.Unauthenticated, refusedWith(t, secureADS(t, cp.SecureXDSAddr(), roots, tok, nodeA)))
		assert.Equal(t, 1.0, refused("rejected"))
	})
	t.Run("no token", func(t *testing.T) {
		assert.Equal(t, codes.Unauthenticated, refusedWith(t, secureADS(t, cp.SecureXDSAddr(), roots, "", nodeA)))
		assert.Equal(t, 1.0, refused("no-token"))
	})
	t.Run("token of another namespace", func(t *testing.T) {
		tokenB := saToken(t, kc, "sec-b", "istio-ca")
		assert.Equal(t, codes.PermissionDenied, refusedWith(t, secureADS(t, cp.SecureXDSAddr(), roots, tokenB, nodeA)))
		assert.Equal(t, 1.0, refused("namespace-mismatch"))
	})
	t.Run("plaintext to the TLS port", func(t *testing.T) {
		// The stream fails when it is opened, or at its first receive.
		client, err := adsclient.Dial(ctx, cp.SecureXDSAddr(), nodeA)
		if err == nil {
			_ = client.SetNames(resourcev3.ClusterType, nil)
			err = client.Run()
			client.CloseNoRun()
		}
		assert.Equal(t, codes.Unavailable, status.Code(err), "no TLS handshake, no stream: %v", err)
	})
	t.Run("ConfigMap deleted comes back", func(t *testing.T) {
		require.NoError(t, kc.CoreV1().ConfigMaps("sec-b").Delete(ctx, rootcert.DefaultConfigMap, metav1.DeleteOptions{}))
		assert.Equal(t, root, publishedRoot(t, kc, "sec-b"))
		// Handled before sec-b's came back: an unselected namespace got none.
		_, err := kc.CoreV1().ConfigMaps("sec-other").Get(ctx, rootcert.DefaultConfigMap, metav1.GetOptions{})
		assert.True(t, err != nil, "sec-other is not selected")
	})
	t.Run("a second replica serves from the same root", func(t *testing.T) {
		cp2 := startCPWith(t, c.cfg, secureOptions)
		<-cp2.Gate.Done()
		assert.Equal(t, cp.CA.PEM, cp2.CA.PEM, "both read the CA Secret")
		client := secureADS(t, cp2.SecureXDSAddr(), roots, tokenA, nodeA)
		go client.Run()
		t.Cleanup(client.Close)
		assert.Equal(t, resourcev3.ClusterType, firstResponse(t, client).TypeURL,
			"the second replica's certificate verifies against the root the first one published")
	})
	t.Run("grpc-go xDS client with TLS and a token file", func(t *testing.T) {
		dir := t.TempDir()
		rootFile, tokenFile := filepath.Join(dir, "root-cert.pem"), filepath.Join(dir, "istio-token")
		require.NoError(t, os.WriteFile(rootFile, []byte(root), 0o600))
		require.NoError(t, os.WriteFile(tokenFile, []byte(tokenA), 0o600))
		_, port, _ := strings.Cut(cp.SecureXDSAddr(), ":")
		spec, err := json.Marshal(secureGRPCChild{Target: "xds:///" + target.host + ":7070", Bootstrap: fmt.Sprintf(`{
		  "xds_servers": [{"server_uri": "localhost:%s",
		    "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": %q}}],
		    "call_creds": [{"type": "jwt_token_file", "config": {"jwt_token_file": %q}}],
		    "server_features": ["xds_v3"]}],
		  "node": {"id": "grpc~127.0.0.1~client.sec-a~sec-a.svc.cluster.local", "metadata": {"GENERATOR": "grpc"}}
		}`, port, rootFile, tokenFile)})
		require.NoError(t, err)
		before := testutil.ToFloat64(cp.Metrics.ConnectedProxies)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envSecureGRPCChild+"="+string(spec), "GRPC_EXPERIMENTAL_XDS_BOOTSTRAP_CALL_CREDS=true")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "grpc-go over the secure port: %s", out)
		// The server sees the child's stream end a moment after the child exits.
		assert.Eventually(t, func() bool { return testutil.ToFloat64(cp.Metrics.ConnectedProxies) == before },
			10*time.Second, 20*time.Millisecond, "the child's stream is closed")
	})
}

// secureGRPCChild is what runSecureGRPCChild dials (JSON in envSecureGRPCChild).
type secureGRPCChild struct {
	Bootstrap, Target string
}

// runSecureGRPCChild makes RPCs through grpc-go's xDS resolver until one succeeds (exit 0) or
// 30 s pass (exit 1, with the last error).
func runSecureGRPCChild(spec string) int {
	var o secureGRPCChild
	if err := json.Unmarshal([]byte(spec), &o); err != nil {
		fmt.Fprintln(os.Stderr, "secure grpc child:", err)
		return 2
	}
	resolver, err := xds.NewXDSResolverWithConfigForTesting([]byte(o.Bootstrap))
	if err != nil {
		fmt.Fprintln(os.Stderr, "secure grpc child: bootstrap:", err)
		return 2
	}
	conn, err := grpc.NewClient(o.Target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	if err != nil {
		fmt.Fprintln(os.Stderr, "secure grpc child:", err)
		return 2
	}
	defer conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil {
			return 0
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "secure grpc child: no RPC through the secure xDS port in 30 s:", err)
			return 1
		}
		time.Sleep(50 * time.Millisecond)
	}
}
