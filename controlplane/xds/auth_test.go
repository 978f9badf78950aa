package xds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshchaos/meshchaos/controlplane/ca"
	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
)

const secureName = "meshchaos-controlplane.cp.svc"

// secureRig is a rig whose server also serves the secure port, authenticating with a
// TokenReviewer over a fake clientset whose TokenReview answers come from reviews (by token).
type secureRig struct {
	*rig
	addr  string
	roots *x509.CertPool
	// audiences are the Spec.Audiences of every TokenReview asked.
	audiences chan []string
}

func newSecureRig(t *testing.T, reviews map[string]authnv1.TokenReviewStatus) *secureRig {
	t.Helper()
	return newSecureRigLimited(t, Limits{}, reviews)
}

// newSecureRigLimited is newSecureRig with the server's limits.
func newSecureRigLimited(t *testing.T, limits Limits, reviews map[string]authnv1.TokenReviewStatus) *secureRig {
	t.Helper()
	r := newRigLimited(t, limits, 10*time.Millisecond, time.Second)
	authority, err := ca.New("test", time.Hour)
	require.NoError(t, err)
	cert, err := authority.Serving([]string{secureName}, nil)
	require.NoError(t, err)
	kc := fake.NewClientset()
	sr := &secureRig{rig: r, roots: x509.NewCertPool(), audiences: make(chan []string, 1000)}
	require.True(t, sr.roots.AppendCertsFromPEM(authority.PEM))
	kc.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		sr.audiences <- tr.Spec.Audiences
		st, ok := reviews[tr.Spec.Token]
		if tr.Spec.Token == "apiserver-down" {
			return true, nil, errors.New("connection refused")
		}
		if !ok {
			st = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, &authnv1.TokenReview{Spec: tr.Spec, Status: st}, nil
	})
	r.server.EnableSecure(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		TokenReviewer{Client: kc, Audience: DefaultAudience})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sr.addr = l.Addr().String()
	go func() { _ = r.server.ServeSecure(l) }() // ends with the rig's Stop
	r.apply(t, "a", "10.0.0.1")
	r.start(t)
	return sr
}

// dial opens an ADS stream over TLS as node id, with token as its bearer token ("" sends none),
// and subscribes to CDS.
func (sr *secureRig) dial(t *testing.T, token, id string) *adsclient.Client {
	t.Helper()
	c, err := adsclient.DialSecure(sr.addr, id, sr.roots, secureName, token)
	require.NoError(t, err)
	_ = c.SetNames(resourcev3.ClusterType, nil) // may fail with EOF: the server refused the stream
	return c
}

// refusal is the code a stream ends with before any response.
func (sr *secureRig) refusal(t *testing.T, token, id string) codes.Code {
	t.Helper()
	c := sr.dial(t, token, id)
	err := c.Run()
	c.CloseNoRun()
	require.Empty(t, c.Received(), "a refused stream gets no config")
	return grpcstatus.Code(err)
}

func serviceAccount(ns, sa string, audiences ...string) authnv1.TokenReviewStatus {
	return authnv1.TokenReviewStatus{Authenticated: true, Audiences: audiences,
		User: authnv1.UserInfo{Username: "system:serviceaccount:" + ns + ":" + sa}}
}

func TestSecurePortAuthenticatesProxies(t *testing.T) {
	sr := newSecureRig(t, map[string]authnv1.TokenReviewStatus{
		"good-a":    serviceAccount("ns-a", "app", DefaultAudience),
		"other-aud": serviceAccount("ns-a", "app", "https://kubernetes.default.svc"),
		"a-user":    {Authenticated: true, Audiences: []string{DefaultAudience}, User: authnv1.UserInfo{Username: "alice"}},
	})
	const nodeA = "sidecar~10.0.0.1~pod.ns-a~ns-a.svc.cluster.local"
	refused := func(reason string) float64 { return testutil.ToFloat64(sr.met.XDSAuthRefused.WithLabelValues(reason)) }

	t.Run("good token", func(t *testing.T) {
		c := sr.dial(t, "good-a", nodeA)
		go c.Run()
		t.Cleanup(c.Close)
		eventually(t, "CDS over the secure port", func() bool { return len(c.Resources(resourcev3.ClusterType)) == 1 })
		assert.Equal(t, []string{DefaultAudience}, <-sr.audiences, "the review asks for the audience")
	})
	t.Run("no token", func(t *testing.T) {
		assert.Equal(t, codes.Unauthenticated, sr.refusal(t, "", nodeA))
		assert.Equal(t, 1.0, refused(refusedNoToken))
	})
	t.Run("invalid token", func(t *testing.T) {
		assert.Equal(t, codes.Unauthenticated, sr.refusal(t, "garbage", nodeA))
	})
	t.Run("wrong audience", func(t *testing.T) {
		assert.Equal(t, codes.Unauthenticated, sr.refusal(t, "other-aud", nodeA))
	})
	t.Run("not a service account", func(t *testing.T) {
		assert.Equal(t, codes.Unauthenticated, sr.refusal(t, "a-user", nodeA))
		assert.Equal(t, 3.0, refused(refusedRejected), "invalid, wrong audience, not a service account")
	})
	t.Run("namespace mismatch", func(t *testing.T) {
		assert.Equal(t, codes.PermissionDenied, sr.refusal(t, "good-a", "sidecar~10.0.0.2~pod.ns-b~ns-b.svc.cluster.local"))
		assert.Equal(t, codes.PermissionDenied, sr.refusal(t, "good-a", "sidecar~no-namespace"), "a node that names no namespace is no namespace's")
		assert.Equal(t, 2.0, refused(refusedNamespaceMismatch))
	})
	t.Run("apiserver unreachable", func(t *testing.T) {
		assert.Equal(t, codes.Unavailable, sr.refusal(t, "apiserver-down", nodeA), "the proxy retries")
		assert.Equal(t, 1.0, refused(refusedReviewFailed))
	})
	t.Run("plaintext port unchanged", func(t *testing.T) {
		c := sr.client(t, "sidecar~10.0.0.3~pod.ns-b~ns-b.svc.cluster.local")
		eventually(t, "CDS over plaintext", func() bool { return len(c.Resources(resourcev3.ClusterType)) == 1 })
	})
}

// TestSecurePortAdmitsBeforeItAuthenticates holds istiod's order: a stream the new-stream limit
// refuses costs no TokenReview. A reconnect storm then asks the apiserver at most the admission
// rate of reviews; asked first, they queued behind the client's QPS limit until a control plane
// with 10 000 proxies ran out of memory.
func TestSecurePortAdmitsBeforeItAuthenticates(t *testing.T) {
	const storm = 12
	sr := newSecureRigLimited(t, Limits{NewStreamsPerSecond: 1, NewStreamBurst: 1},
		map[string]authnv1.TokenReviewStatus{"good-a": serviceAccount("ns-a", "app", DefaultAudience)})
	codesSeen := make(chan codes.Code, storm)
	for i := range storm {
		go func() {
			c, err := adsclient.DialSecure(sr.addr, fmt.Sprintf("sidecar~10.0.0.%d~pod%d.ns-a~ns-a.svc.cluster.local", i+1, i), sr.roots, secureName, "good-a")
			if err != nil {
				codesSeen <- codes.Unknown
				return
			}
			defer c.CloseNoRun()
			_ = c.SetNames(resourcev3.ClusterType, nil)
			// An admitted stream gets its CDS (OK); a refused one ends with its code.
			done := make(chan error, 1)
			go func() { done <- c.Run() }()
			select {
			case <-c.Notify():
				codesSeen <- codes.OK
			case err := <-done:
				codesSeen <- grpcstatus.Code(err)
			case <-time.After(30 * time.Second):
				codesSeen <- codes.DeadlineExceeded // neither served nor refused
			}
		}()
	}
	admitted, limited := 0, 0
	for range storm {
		switch code := <-codesSeen; code {
		case codes.OK:
			admitted++
		case codes.ResourceExhausted:
			limited++
		default:
			t.Errorf("a stream ended with %s", code)
		}
	}
	require.Positive(t, limited, "a storm of %d at 1 a second, burst 1, is limited", storm)
	assert.Equal(t, admitted, len(sr.audiences), "one TokenReview per admitted stream, none for the %d limited", limited)
}

func TestCutBearer(t *testing.T) {
	for in, want := range map[string]string{"Bearer abc": "abc", "bearer  abc ": "abc", "Bearer ": "", "Basic abc": "", "abc": ""} {
		got, ok := cutBearer(in)
		assert.Equal(t, want, got, in)
		assert.Equal(t, want != "", ok, in)
	}
}
