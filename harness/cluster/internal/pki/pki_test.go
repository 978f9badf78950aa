package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
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
