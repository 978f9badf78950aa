package oracle

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// TestClientOnASecurePort: the oracle reaches a TLS port that checks bearer tokens with the root
// from the namespace's ConfigMap and a token the TokenRequest API issued for its ServiceAccount.
func TestClientOnASecurePort(t *testing.T) {
	const name = "meshchaos-controlplane.meshchaos-system.svc"
	ca := xdstest.NewCA(t)
	srv := xdstest.StartSecure(t, xdstest.Auth{Cert: ca.ServerCert(t, name), Tokens: []string{"issued-for-mesh/default"}})
	a := IstioCluster("a.mesh.test", 80)
	srv.Set(t, "1", xdstest.EDSCluster(a, a), xdstest.CLA(a, "10.0.0.1:9000"))

	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "meshchaos-ca-root-cert", Namespace: "mesh"},
		Data: map[string]string{"root-cert.pem": string(ca.RootPEM)}})
	var mu sync.Mutex
	var asked []*authv1.TokenRequest
	cs.PrependReactor("create", "serviceaccounts", func(action k8stesting.Action) (bool, runtime.Object, error) {
		act, ok := action.(k8stesting.CreateActionImpl)
		if !ok || act.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := act.GetObject().(*authv1.TokenRequest).DeepCopy()
		mu.Lock()
		asked = append(asked, tr)
		mu.Unlock()
		tr.Status = authv1.TokenRequestStatus{Token: "issued-for-" + act.GetNamespace() + "/" + act.Name,
			ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour))}
		return true, tr, nil
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts, err := Credentials{Namespace: "mesh", RootConfigMap: "meshchaos-ca-root-cert", ServerName: name}.DialOptions(ctx, cs)
	require.NoError(t, err)
	c := &Client{Addr: srv.Addr, NodeID: SidecarID("mesh"), DialOptions: opts}
	c.Start(ctx)
	want := FromHosts(map[string][]string{"a.mesh.test": {"10.0.0.1:9000"}}, 80, nil)
	require.True(t, c.Wait(ctx, 10*time.Second, func(st State) bool { return len(Compare(want, st)) == 0 }), "%v %v", c.Compare(want), c.Err())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, asked, 1, "one stream, one token request")
	assert.Equal(t, []string{"istio-ca"}, asked[0].Spec.Audiences)
	assert.EqualValues(t, 3600, *asked[0].Spec.ExpirationSeconds)

	_, err = Credentials{Namespace: "other", RootConfigMap: "meshchaos-ca-root-cert"}.DialOptions(ctx, cs)
	assert.ErrorContains(t, err, "read the xDS root ConfigMap other/meshchaos-ca-root-cert")
}
