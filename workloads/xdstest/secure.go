package xdstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// CA is a throwaway certificate authority: a control plane's root, as istiod's
// istio-ca-root-cert holds it.
type CA struct {
	// RootPEM is the root certificate, PEM-encoded.
	RootPEM []byte
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
}

// NewCA makes a root certificate and its key.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{Organization: []string{"xdstest"}, CommonName: "xdstest root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("xdstest: root certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("xdstest: root certificate: %v", err)
	}
	return &CA{RootPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}
}

// ServerCert is a serving certificate for dnsNames only (no IP: istiod's names its Service),
// signed by the CA.
func (ca *CA) ServerCert(t testing.TB, dnsNames ...string) tls.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("xdstest: server certificate: %v", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// WriteRoot writes the root to a file in a test directory, as the ConfigMap is mounted, and
// returns its path.
func (ca *CA) WriteRoot(t testing.TB) string {
	t.Helper()
	return WriteFile(t, "root-cert.pem", string(ca.RootPEM))
}

// WriteFile writes content to name in a fresh test directory and returns its path.
func WriteFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatalf("xdstest: %v", err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("xdstest: key: %v", err)
	}
	return key
}

// Auth makes a server serve TLS with Cert and refuse every stream (codes.Unauthenticated)
// whose "authorization: Bearer <token>" is not one of Tokens, as istiod's port 15012 does.
type Auth struct {
	Cert   tls.Certificate
	Tokens []string
}

// StartSecure is Start with TLS and token checks.
func StartSecure(t testing.TB, a Auth) *Server {
	t.Helper()
	return start(t, &a)
}

// Presented returns the bearer tokens the streams presented so far, in order (empty for a
// stream without one).
func (s *Server) Presented() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.presented)
}

// secureOptions are the gRPC server options of Auth.
func (s *Server) secureOptions(a *Auth) []grpc.ServerOption {
	check := func(ctx context.Context) error {
		tok := ""
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get("authorization"); len(v) > 0 {
				tok = strings.TrimPrefix(v[0], "Bearer ")
			}
		}
		s.mu.Lock()
		s.presented = append(s.presented, tok)
		s.mu.Unlock()
		if tok == "" || !slices.Contains(a.Tokens, tok) {
			return status.Error(codes.Unauthenticated, "xdstest: no valid bearer token")
		}
		return nil
	}
	return []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{a.Cert}, MinVersion: tls.VersionTLS12})),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}
