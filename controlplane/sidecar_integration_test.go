package controlplane_test

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apinet "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
)

// testSidecarScopes: a Sidecar resource in scope-a ("./*") gives a's proxy a's services only,
// while b's proxy sees everything; the bare short name of a's Kubernetes Service is a domain for
// a's proxy only; widening the Sidecar reaches a's proxy.
func testSidecarScopes(t *testing.T, c *testCluster) {
	ctx := context.Background()
	kc, err := kubernetes.NewForConfig(c.cfg)
	require.NoError(t, err)
	for ns, host := range map[string]string{"scope-a": "sa.scope.test", "scope-b": "sb.scope.test"} {
		se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "se", Namespace: ns},
			Spec: *seSpec(host, 1, 1)}
		_, err := c.istio.NetworkingV1().ServiceEntries(ns).Create(ctx, se, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err = kc.CoreV1().Services("scope-a").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "scope-a"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	sidecars := c.istio.NetworkingV1().Sidecars("scope-a")
	_, err = sidecars.Create(ctx, &networkingv1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "scope-a"},
		Spec: apinet.Sidecar{Egress: []*apinet.IstioEgressListener{{Hosts: []string{"./*"}}}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	cp := startCP(t, c.cfg, true)
	<-cp.Gate.Done()
	proxy := func(id string) *adsclient.Client {
		cl := envoyLike(t, cp, id)
		require.NoError(t, cl.SetNames(resourcev3.RouteType, []string{"80"}))
		return cl
	}
	pa := proxy("sidecar~10.0.0.1~pa.scope-a~scope-a.svc.cluster.local")
	pb := proxy("sidecar~10.0.0.2~pb.scope-b~scope-b.svc.cluster.local")
	sorted := func(cl *adsclient.Client) []string {
		n := clusterNames(cl)
		sort.Strings(n)
		return n
	}
	inA := []string{"outbound|80||sa.scope.test", "outbound|80||web.scope-a.svc.cluster.local"}
	waitFor(t, 20*time.Second, "a's scoped CDS", func() bool { return slices.Equal(sorted(pa), inA) })
	waitFor(t, 20*time.Second, "b's CDS", func() bool {
		n := sorted(pb)
		return slices.Contains(n, "outbound|80||sb.scope.test") && slices.Contains(n, inA[0]) && slices.Contains(n, inA[1])
	})
	domains := func(cl *adsclient.Client) map[string]string {
		out := map[string]string{}
		a, ok := cl.Resources(resourcev3.RouteType)["80"]
		if !ok {
			return out
		}
		var rc route.RouteConfiguration
		require.NoError(t, a.UnmarshalTo(&rc))
		for _, vh := range rc.GetVirtualHosts() {
			for _, d := range vh.GetDomains() {
				out[d] = vh.GetRoutes()[0].GetRoute().GetCluster()
			}
		}
		return out
	}
	waitFor(t, 20*time.Second, "both route configurations", func() bool {
		return domains(pa)["web"] != "" && domains(pb)["web.scope-a"] != ""
	})
	assert.Equal(t, inA[1], domains(pa)["web"], "a's proxy: web is web.scope-a")
	assert.NotContains(t, domains(pb), "web", "b's proxy: no bare name of a's service")
	assert.NotContains(t, domains(pa), "sb.scope.test", "b's ServiceEntry is outside a's scope")

	// Widen a's Sidecar to scope-b: a's proxy gets b's ServiceEntry.
	sc, err := sidecars.Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err)
	sc.Spec.Egress[0].Hosts = []string{"./*", "scope-b/*"}
	_, err = sidecars.Update(ctx, sc, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitFor(t, 20*time.Second, "a sees scope-b", func() bool {
		return slices.Contains(clusterNames(pa), "outbound|80||sb.scope.test")
	})
}
