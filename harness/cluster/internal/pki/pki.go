// Package pki writes the certificates and keys a local cluster needs: a CA, the apiserver's
// serving certificate, and the service-account signing key. Clients authenticate with a static
// token, so there are no client certificates.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the paths Write produced.
type Files struct {
	CACert, ServingCert, ServingKey, SAKey, SAPub string
	// Token is the bearer token of the cluster admin (written to TokenFile as a static token file).
	Token, TokenFile string
}

// Write creates the PKI in dir. The serving certificate is valid for ips and dns names.
func Write(dir string, ips []net.IP, dns []string) (Files, error) {
	f := Files{
		CACert: filepath.Join(dir, "ca.crt"), ServingCert: filepath.Join(dir, "apiserver.crt"),
		ServingKey: filepath.Join(dir, "apiserver.key"), SAKey: filepath.Join(dir, "sa.key"),
		SAPub: filepath.Join(dir, "sa.pub"), TokenFile: filepath.Join(dir, "tokens.csv"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "meshchaos-ca"},
		NotBefore: now, NotAfter: now.AddDate(1, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("create CA: %w", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now, NotAfter: now.AddDate(1, 0, 0), IPAddresses: ips, DNSNames: dns,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("create serving cert: %w", err)
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return f, err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return f, err
	}
	f.Token = hex.EncodeToString(tok)
	srvKeyDER, _ := x509.MarshalECPrivateKey(srvKey)
	saPubDER, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	for _, w := range []struct {
		path, typ string
		der       []byte
	}{
		{f.CACert, "CERTIFICATE", caDER},
		{f.ServingCert, "CERTIFICATE", srvDER},
		{f.ServingKey, "EC PRIVATE KEY", srvKeyDER},
		{f.SAKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)},
		{f.SAPub, "PUBLIC KEY", saPubDER},
	} {
		if err := os.WriteFile(w.path, pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der}), 0o600); err != nil {
			return f, err
		}
	}
	// A serving cert file may carry its chain; clients that trust the CA verify either way.
	line := fmt.Sprintf("%s,meshchaos-admin,meshchaos-admin,\"system:masters\"\n", f.Token)
	return f, os.WriteFile(f.TokenFile, []byte(line), 0o600)
}
