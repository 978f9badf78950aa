package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServingCertVerifiesForEveryName(t *testing.T) {
	f, err := Write(t.TempDir(), []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)}, []string{"kubernetes.default.svc"})
	require.NoError(t, err)
	pair, err := tls.LoadX509KeyPair(f.ServingCert, f.ServingKey)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	caPEM, err := os.ReadFile(f.CACert)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	for _, name := range []string{"127.0.0.1", "10.96.0.1", "kubernetes.default.svc"} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name})
		assert.NoError(t, err, name)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "example.com"})
	assert.Error(t, err)
	tokens, err := os.ReadFile(f.TokenFile)
	require.NoError(t, err)
	assert.Contains(t, string(tokens), f.Token+",meshchaos-admin")
	assert.Len(t, f.Token, 32)
}

func TestClientCertAuthenticatesAsItsSubjectOnly(t *testing.T) {
	f, err := Write(t.TempDir(), []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	require.NoError(t, err)
	certPEM, keyPEM, err := f.IssueClient("system:node:c-n1", "system:nodes")
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err, "the key belongs to the certificate")
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	assert.Equal(t, "system:node:c-n1", leaf.Subject.CommonName, "the apiserver's user name")
	assert.Equal(t, []string{"system:nodes"}, leaf.Subject.Organization, "the apiserver's groups")

	caPEM, err := os.ReadFile(f.CACert)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err, "the apiserver's --client-ca-file accepts it")
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	assert.Error(t, err, "a client certificate cannot serve")

	other, _, err := f.IssueClient("system:kube-proxy")
	require.NoError(t, err)
	assert.NotEqual(t, certPEM, other)
	_, _, err = Files{}.IssueClient("x")
	assert.Error(t, err, "Files without the CA's key cannot sign")
	// The CA's key stays in memory: the only keys on disk are the apiserver's own, owner-only.
	entries, err := os.ReadDir(filepath.Dir(f.CACert))
	require.NoError(t, err)
	var keys []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(f.CACert), e.Name()))
		require.NoError(t, err)
		if strings.Contains(string(b), "PRIVATE KEY") {
			keys = append(keys, e.Name())
			info, err := e.Info()
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), e.Name())
		}
	}
	assert.ElementsMatch(t, []string{"apiserver.key", "sa.key"}, keys)
}
