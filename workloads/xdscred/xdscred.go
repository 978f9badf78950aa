// Package xdscred builds the gRPC credentials with which an xDS client reaches a control plane's
// secure port as Istio's sidecar agent (pilot-agent) reaches istiod's port 15012: TLS verified
// against the control plane's root certificate only (the ConfigMap istio-ca-root-cert, mounted at
// /var/run/secrets/istio/root-cert.pem), under the control plane's Service name whatever address
// is dialled, and the pod's projected ServiceAccount token (audience istio-ca, mounted at
// /var/run/secrets/tokens/istio-token) as "authorization: Bearer <token>" on every stream.
//
// Both files change under a running pod (kubelet rotates the token; the control plane may rotate
// its root), so both are read again when used: the roots at every TLS handshake, the token at
// every RPC (an ADS stream is one RPC).
package xdscred

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Options say how to reach the xDS server. The zero value is plaintext, as on port 15010.
type Options struct {
	// RootCertFile is a PEM file of the root certificate(s) the server's certificate must chain
	// to; no other root is trusted. Read at every handshake, so a rotated root is picked up.
	RootCertFile string
	// RootCertPEM is the same roots held in memory, for clients that read them from elsewhere
	// (the harness, from the ConfigMap). At most one of RootCertFile and RootCertPEM.
	RootCertPEM []byte
	// TokenFile holds the bearer token sent on every RPC; read at every RPC, as kubelet
	// replaces a projected token before it expires.
	TokenFile string
	// Token returns the bearer token for an RPC, for clients without a token file. At most one
	// of TokenFile and Token.
	Token func(ctx context.Context) (string, error)
	// ServerName is the name the server's certificate must carry (istiod's is its Service name,
	// istiod.istio-system.svc), when the address dialled is not that name (a pod IP).
	// Default: the host of the dialled address.
	ServerName string
}

// Secure reports whether o asks for TLS.
func (o Options) Secure() bool { return o.RootCertFile != "" || len(o.RootCertPEM) > 0 }

// HasToken reports whether o sends a bearer token.
func (o Options) HasToken() bool { return o.TokenFile != "" || o.Token != nil }

// Validate reports a combination that cannot work: a token or a server name without roots (a
// token must never travel in plaintext, and a server name means nothing without TLS), or a
// source given twice.
func (o Options) Validate() error {
	switch {
	case o.RootCertFile != "" && len(o.RootCertPEM) > 0:
		return errors.New("xDS credentials: give the root certificate as a file or as PEM, not both")
	case o.TokenFile != "" && o.Token != nil:
		return errors.New("xDS credentials: give the token as a file or as a source, not both")
	case o.HasToken() && !o.Secure():
		return errors.New("xDS credentials: a token needs a root certificate (it is sent over TLS only)")
	case o.ServerName != "" && !o.Secure():
		return errors.New("xDS credentials: a server name needs a root certificate (it names the TLS server)")
	}
	return nil
}

// DialOptions are the gRPC dial options of one client: plaintext without roots; with roots,
// TLS against exactly them and, with a token, the token on every RPC. The roots are read here
// once, so a missing or bad file fails the dial with its path.
func (o Options) DialOptions() ([]grpc.DialOption, error) {
	tc, err := o.TransportCredentials()
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(tc)}
	if o.HasToken() {
		opts = append(opts, grpc.WithPerRPCCredentials(o.PerRPC()))
	}
	return opts, nil
}

// TransportCredentials are DialOptions' transport alone (plaintext without roots, else TLS
// against exactly them, read again at every handshake), for clients configured with
// credentials rather than dial options (grpc-go's xDS bootstrap). The roots are read here
// once, so a missing or bad file fails at once with its path.
func (o Options) TransportCredentials() (credentials.TransportCredentials, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if !o.Secure() {
		return insecure.NewCredentials(), nil
	}
	if _, err := o.roots(); err != nil {
		return nil, err
	}
	return &rootsTLS{o: o}, nil
}

// roots reads the trusted roots.
func (o Options) roots() (*x509.CertPool, error) {
	pem, where := o.RootCertPEM, "the xDS root certificate"
	if o.RootCertFile != "" {
		where = "the xDS root certificate " + o.RootCertFile
		b, err := os.ReadFile(o.RootCertFile)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", where, err)
		}
		pem = b
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("read %s: no PEM certificate in it", where)
	}
	return pool, nil
}

// rootsTLS is gRPC's TLS with the roots read again at every handshake: a client that keeps its
// connection object across reconnects (adsload) trusts a rotated root from the next one on.
type rootsTLS struct {
	o Options
}

func (r *rootsTLS) tls() (credentials.TransportCredentials, error) {
	pool, err := r.o.roots()
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: r.o.ServerName, MinVersion: tls.VersionTLS12}), nil
}

// ClientHandshake implements credentials.TransportCredentials.
func (r *rootsTLS) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, err := r.tls()
	if err != nil {
		return nil, nil, err
	}
	if r.o.ServerName != "" {
		// gRPC's TLS verifies the authority it is given, which is the server name only when
		// the channel took its authority from Info (grpc.WithTransportCredentials); a channel
		// given these as part of a credentials.Bundle (grpc-go's xDS client) passes the
		// dialled address.
		authority = r.o.ServerName
	}
	return c.ClientHandshake(ctx, authority, conn)
}

// ServerHandshake implements credentials.TransportCredentials; these are client credentials.
func (r *rootsTLS) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("xDS credentials are client credentials")
}

// Info implements credentials.TransportCredentials.
func (r *rootsTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", ServerName: r.o.ServerName}
}

// Clone implements credentials.TransportCredentials.
func (r *rootsTLS) Clone() credentials.TransportCredentials { return &rootsTLS{o: r.o} }

// OverrideServerName implements credentials.TransportCredentials (deprecated in gRPC; the
// server name is Options.ServerName).
func (r *rootsTLS) OverrideServerName(name string) error {
	r.o.ServerName = name
	return nil
}

// PerRPC is the bearer token as gRPC per-RPC credentials (nil without a token). It refuses to
// go over a connection without transport security.
func (o Options) PerRPC() credentials.PerRPCCredentials {
	if !o.HasToken() {
		return nil
	}
	return bearer{o}
}

type bearer struct{ o Options }

// GetRequestMetadata implements credentials.PerRPCCredentials: the token, read now.
func (b bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	var tok string
	if b.o.TokenFile != "" {
		raw, err := os.ReadFile(b.o.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("read the xDS token %s: %w", b.o.TokenFile, err)
		}
		tok = strings.TrimSpace(string(raw))
		if tok == "" {
			return nil, fmt.Errorf("read the xDS token %s: the file is empty", b.o.TokenFile)
		}
	} else {
		t, err := b.o.Token(ctx)
		if err != nil {
			return nil, fmt.Errorf("get the xDS token: %w", err)
		}
		tok = t
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: a token never goes in
// plaintext.
func (bearer) RequireTransportSecurity() bool { return true }
