// Package ca is the reference control plane's certificate authority, as istiod's self-signed
// CA: it signs the xDS and webhook serving certificates, and its certificate is what proxies
// (the root ConfigMap) and the apiserver (the webhooks' caBundle) trust. Replicas share one CA
// through a Secret in the control plane's namespace (istiod's istio-ca-secret), so every replica
// serves certificates from the same root; without Kubernetes it lives in memory.
package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Secret keys, istiod's (istio-ca-secret).
const (
	CertKey = "ca-cert.pem"
	KeyKey  = "ca-key.pem"
)

// DefaultValidity is a CA's lifetime: longer than any run, as istiod's self-signed root (10 years).
const DefaultValidity = 10 * 365 * 24 * time.Hour

// CA is a certificate authority: a self-signed certificate and its key.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate: the root proxies and the apiserver trust.
	PEM []byte
}

// New creates a CA valid for validity.
func New(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name, Organization: []string{"meshchaos"}},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Parse reads a CA from its PEM certificate and PEM (PKCS#8 or SEC 1) EC private key.
func Parse(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("CA certificate: no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("CA certificate: not a CA (basic constraints)")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("CA key: no PEM block")
	}
	var key *ecdsa.PrivateKey
	if k, err := x509.ParsePKCS8PrivateKey(kb.Bytes); err == nil {
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("CA key: %T, want an EC key", k)
		}
		key = ek
	} else if key, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("CA key does not match the CA certificate")
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// keyPEM is the CA key in PKCS#8 PEM: only for the Secret, never for a log.
func (ca *CA) keyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// LoadOrCreate returns the CA kept in Secret namespace/name, creating it (a new CA) when it does
// not exist. Replicas starting at once race to create it: the loser reads the winner's, so every
// replica ends with the same CA.
func LoadOrCreate(ctx context.Context, kc kubernetes.Interface, namespace, name, commonName string) (*CA, error) {
	secrets := kc.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return fromSecret(s)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("read CA Secret %s/%s: %w", namespace, name, err)
	}
	ca, err := New(commonName, DefaultValidity)
	if err != nil {
		return nil, err
	}
	key, err := ca.keyPEM()
	if err != nil {
		return nil, err
	}
	s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
		Labels: map[string]string{"app": "meshchaos-controlplane"}},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{CertKey: ca.PEM, KeyKey: key}}
	_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
	switch {
	case err == nil:
		return ca, nil
	case !apierrors.IsAlreadyExists(err):
		return nil, fmt.Errorf("create CA Secret %s/%s: %w", namespace, name, err)
	}
	// Another replica created it between our Get and Create: use its CA.
	s, err = secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read CA Secret %s/%s another replica created: %w", namespace, name, err)
	}
	return fromSecret(s)
}

func fromSecret(s *corev1.Secret) (*CA, error) {
	ca, err := Parse(s.Data[CertKey], s.Data[KeyKey])
	if err != nil {
		return nil, fmt.Errorf("CA Secret %s/%s (keys %s, %s): %w; delete it to have a new CA made", s.Namespace, s.Name, CertKey, KeyKey, err)
	}
	return ca, nil
}

// Serving issues a TLS serving certificate for the DNS names and IPs (what clients check: the
// Service name <name>.<namespace>.svc, or the address dialed), valid as long as the CA.
func (ca *CA) Serving(dnsNames []string, ips []net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("serving key: %w", err)
	}
	cn := "meshchaos-controlplane"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: ca.cert.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: dnsNames, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}
