package oracle

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/workloads/xdscred"
)

// Credentials are what a sidecar of Namespace presents on a control plane's secure xDS port,
// fetched from the cluster by a harness client on the host: the root the control plane
// publishes in every namespace, and a token of a ServiceAccount there from the TokenRequest API
// (what kubelet projects into a pod). The xDS clients' node ids must be of Namespace: a control
// plane may refuse a token of another namespace (the reference does).
type Credentials struct {
	// Namespace holds the root ConfigMap and the ServiceAccount.
	Namespace string
	// RootConfigMap is the ConfigMap whose root-cert.pem is the control plane's root:
	// istio-ca-root-cert (istiod) or meshchaos-ca-root-cert (the reference).
	RootConfigMap string
	// ServiceAccount is whose token is sent (default "default").
	ServiceAccount string
	// Audience of the token (default istio-ca).
	Audience string
	// ServerName is the name on the control plane's certificate (its Service name), which the
	// address dialled (a pod IP) is not.
	ServerName string
	// TokenLifetime is asked of the TokenRequest API (default 1h); a token is renewed when
	// four fifths of it have passed, as kubelet renews projected tokens.
	TokenLifetime time.Duration
}

// DialOptions reads the root now and returns dial options for a secure port; the token is
// requested at the first stream and renewed as it ages.
func (c Credentials) DialOptions(ctx context.Context, cs kubernetes.Interface) ([]grpc.DialOption, error) {
	if c.Namespace == "" || c.RootConfigMap == "" {
		return nil, fmt.Errorf("xDS credentials: a namespace and the root ConfigMap are required")
	}
	cm, err := cs.CoreV1().ConfigMaps(c.Namespace).Get(ctx, c.RootConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the xDS root ConfigMap %s/%s: %w", c.Namespace, c.RootConfigMap, err)
	}
	root := cm.Data["root-cert.pem"]
	if root == "" {
		return nil, fmt.Errorf("read the xDS root ConfigMap %s/%s: no root-cert.pem in it", c.Namespace, c.RootConfigMap)
	}
	if c.ServiceAccount == "" {
		c.ServiceAccount = "default"
	}
	if c.Audience == "" {
		c.Audience = "istio-ca"
	}
	if c.TokenLifetime <= 0 {
		c.TokenLifetime = time.Hour
	}
	t := &tokens{c: c, cs: cs}
	return xdscred.Options{RootCertPEM: []byte(root), Token: t.get, ServerName: c.ServerName}.DialOptions()
}

// tokens requests a ServiceAccount token and keeps it until it should be renewed.
type tokens struct {
	c  Credentials
	cs kubernetes.Interface

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

func (t *tokens) get(ctx context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && time.Now().Before(t.renewAt) {
		return t.token, nil
	}
	secs := int64(t.c.TokenLifetime / time.Second)
	tr, err := t.cs.CoreV1().ServiceAccounts(t.c.Namespace).CreateToken(ctx, t.c.ServiceAccount, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{Audiences: []string{t.c.Audience}, ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request a token of ServiceAccount %s/%s (audience %s): %w", t.c.Namespace, t.c.ServiceAccount, t.c.Audience, err)
	}
	now := time.Now()
	life := t.c.TokenLifetime
	if exp := tr.Status.ExpirationTimestamp.Time; exp.After(now) {
		life = exp.Sub(now) // the API server may shorten (or lengthen) what was asked
	}
	t.token, t.renewAt = tr.Status.Token, now.Add(life*4/5)
	return t.token, nil
}
