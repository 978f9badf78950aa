// Package pki writes the certificates and keys a local cluster needs: a CA, the apiserver's
// serving certificate, and the service-account signing key; and issues client certificates
// for the identities that must not be the admin (a kubelet as its node, kube-proxy). The
// admin authenticates with a static token.
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
	"errors"
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
	// ca signs client certificates. Its key stays in memory, never on disk: whoever holds it
	// can mint any identity, system:masters included.
	ca *authority
}

// authority is the CA's certificate and key.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
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
	f.ca = &authority{cert: caCert, key: caKey}
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

// IssueClient issues a client certificate signed by the CA (the apiserver's --client-ca-file),
// which the apiserver authenticates as user cn in groups orgs (e.g. "system:node:NAME" in
// "system:nodes"). It returns the certificate and its key as PEM; the caller stores the key
// where only its owner reads it.
func (f Files) IssueClient(cn string, orgs ...string) (certPEM, keyPEM []byte, err error) {
	if f.ca == nil {
		return nil, nil, errors.New("issue client certificate: no CA key (only the Files that Write returned can sign)")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("client key for %s: %w", cn, err)
	}
	// Random serials: every cert of a CA needs its own, and clients are issued one at a time.
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("client cert serial for %s: %w", cn, err)
	}
	now := time.Now().Add(-time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: now, NotAfter: f.ca.cert.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca.cert, &key.PublicKey, f.ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("create client cert for %s: %w", cn, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal client key for %s: %w", cn, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
