package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultAudience is the audience of the proxies' tokens, istiod's: the pod's projected
// ServiceAccount token for "istio-ca".
const DefaultAudience = "istio-ca"

// Identity is who an authenticated proxy is: a Kubernetes service account.
type Identity struct {
	Namespace, ServiceAccount string
}

// Authenticator checks a proxy's bearer token. An error wrapping ErrRejected means the token
// is not good (Unauthenticated); any other error that it could not be checked (Unavailable:
// the proxy retries).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// ErrRejected is an Authenticator's answer to a token that is not valid for the audience.
var ErrRejected = errors.New("token rejected")

// TokenReviewer authenticates with a Kubernetes TokenReview for Audience, as istiod's
// KubeJWTAuthenticator: the token must be valid for the audience and belong to a service
// account.
type TokenReviewer struct {
	Client   kubernetes.Interface
	Audience string
}

// Authenticate asks the apiserver who the token is.
func (r TokenReviewer) Authenticate(ctx context.Context, token string) (Identity, error) {
	tr, err := r.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{r.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("token review: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		return Identity{}, fmt.Errorf("%w: %s", ErrRejected, st.Error)
	}
	// An apiserver that ignores Spec.Audiences answers with its own: the token must be ours.
	if !slices.Contains(st.Audiences, r.Audience) {
		return Identity{}, fmt.Errorf("%w: audiences %v, want %q", ErrRejected, st.Audiences, r.Audience)
	}
	rest, ok := strings.CutPrefix(st.User.Username, "system:serviceaccount:")
	ns, sa, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || ns == "" || sa == "" {
		return Identity{}, fmt.Errorf("%w: %q is not a service account", ErrRejected, st.User.Username)
	}
	return Identity{Namespace: ns, ServiceAccount: sa}, nil
}

// Refusal reasons (metric labels: a fixed set).
const (
	refusedNoToken           = "no-token"
	refusedRejected          = "rejected"
	refusedReviewFailed      = "review-failed"
	refusedNamespaceMismatch = "namespace-mismatch"
)

// secure is the TLS listener's state: istiod's 15012.
type secure struct {
	grpc *grpc.Server
	auth Authenticator
	// warned holds the refusal reasons already logged at warn: each is logged once there, the
	// rest at debug, so a fleet with a bad token cannot flood the log.
	warned sync.Map
}

// EnableSecure prepares the secure xDS server: TLS with tc (the serving certificate) and every
// stream authenticated by auth once the sync gate and the new-stream limit let it through, its
// proxy's namespace checked against the token's at its first request. Call it before
// ServeSecure, once.
//
// The order is istiod's (pilot/pkg/xds/ads.go:204-220 and delta.go:60-76 at both pins: not
// ready, then WaitForRequestLimit, then authenticate): a reconnect storm costs the apiserver
// at most the admission rate of TokenReviews. Authenticating first asked one for every
// attempt, refused or not; at 10 000 proxies the reviews queued behind the client's QPS
// limit until the control plane ran out of memory.
func (s *Server) EnableSecure(tc *tls.Config, auth Authenticator) {
	s.secure = &secure{auth: auth}
	s.secure.grpc = grpc.NewServer(append(s.serverOptions(),
		grpc.Creds(credentials.NewTLS(tc)),
		grpc.ChainStreamInterceptor(s.refuseUntilReady, s.authenticate))...)
	s.registerADS(s.secure.grpc)
}

// ServeSecure serves the secure xDS port on l until Stop (EnableSecure first).
func (s *Server) ServeSecure(l net.Listener) error {
	if s.secure == nil {
		return errors.New("serve secure xDS: EnableSecure was not called")
	}
	return s.secure.grpc.Serve(s.conns.listener(l))
}

type identityKey struct{}

// identityStream carries the authenticated identity in its context to the callbacks (the
// go-control-plane server hands them the stream's context).
type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s identityStream) Context() context.Context { return s.ctx }

// authenticate is the secure port's first interceptor: the stream's bearer token (gRPC
// metadata "authorization: Bearer TOKEN", as Envoy and istio-agent send it) must be valid.
func (s *Server) authenticate(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	var token string
	for _, v := range md.Get("authorization") {
		if t, ok := cutBearer(v); ok {
			token = t
			break
		}
	}
	if token == "" {
		return s.refuse(refusedNoToken, codes.Unauthenticated, "",
			"no bearer token: send the pod's projected ServiceAccount token (audience %s) as 'authorization: Bearer TOKEN'", s.audienceHint())
	}
	id, err := s.secure.auth.Authenticate(ctx, token)
	switch {
	case errors.Is(err, ErrRejected):
		return s.refuse(refusedRejected, codes.Unauthenticated, "", "authentication failed: %v", err)
	case err != nil:
		return s.refuse(refusedReviewFailed, codes.Unavailable, "", "cannot check the token now, retry: %v", err)
	}
	return handler(srv, identityStream{ServerStream: ss, ctx: context.WithValue(ctx, identityKey{}, id)})
}

// audienceHint names the audience in refusals when the authenticator is the TokenReviewer.
func (s *Server) audienceHint() string {
	if tr, ok := s.secure.auth.(TokenReviewer); ok {
		return tr.Audience
	}
	return DefaultAudience
}

func cutBearer(v string) (string, bool) {
	if len(v) < 7 || !strings.EqualFold(v[:7], "bearer ") {
		return "", false
	}
	t := strings.TrimSpace(v[7:])
	return t, t != ""
}

// checkIdentity refuses a request of an authenticated stream whose node is of another
// namespace than its token (istiod's checkConnectionIdentity): a token proves a service
// account, and the node id is only what the proxy says.
func (s *Server) checkIdentity(id int64, node *core.Node) error {
	if node == nil {
		return nil
	}
	s.mu.Lock()
	st := s.streams[id]
	s.mu.Unlock()
	if st == nil || st.identity == nil {
		return nil // the plaintext port
	}
	ns := ProxyNamespace(node)
	if ns == st.identity.Namespace {
		return nil
	}
	return s.refuse(refusedNamespaceMismatch, codes.PermissionDenied, node.GetId(),
		"proxy namespace %q (node id or NAMESPACE metadata) is not the token's: service account %s/%s",
		ns, st.identity.Namespace, st.identity.ServiceAccount)
}

// refuse counts and logs a refusal and returns its status.
func (s *Server) refuse(reason string, code codes.Code, proxy, format string, args ...any) error {
	s.m.XDSAuthRefused.WithLabelValues(reason).Inc()
	msg := fmt.Sprintf(format, args...)
	if _, seen := s.secure.warned.LoadOrStore(reason, true); !seen {
		s.log.Warn("secure xDS stream refused (logged once per reason; later ones at debug, all counted in meshchaos_controlplane_xds_auth_refused_total)",
			"reason", reason, "proxy", proxy, "err", msg)
	} else {
		s.log.Debug("secure xDS stream refused", "reason", reason, "proxy", proxy, "err", msg)
	}
	return status.Error(code, msg)
}

// identityOf is the identity the secure port authenticated for a stream's context (nil: the
// plaintext port).
func identityOf(ctx context.Context) *Identity {
	if id, ok := ctx.Value(identityKey{}).(Identity); ok {
		return &id
	}
	return nil
}
