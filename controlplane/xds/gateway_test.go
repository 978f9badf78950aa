package xds

import (
	"testing"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/model"
)

func listenerRDS(t *testing.T, c *adsclient.Client, name string) string {
	t.Helper()
	a, ok := c.Resources(resourcev3.ListenerType)[name]
	require.True(t, ok, "listener %s", name)
	var l listener.Listener
	require.NoError(t, a.UnmarshalTo(&l))
	var m hcm.HttpConnectionManager
	require.NoError(t, l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&m))
	return m.GetRds().GetRouteConfigName()
}

func routeConfig(t *testing.T, c *adsclient.Client, name string) *route.RouteConfiguration {
	t.Helper()
	a, ok := c.Resources(resourcev3.RouteType)[name]
	if !ok {
		return nil
	}
	var rc route.RouteConfiguration
	require.NoError(t, a.UnmarshalTo(&rc))
	return &rc
}

// A gateway gets listeners and routes from the Gateway that selects it and the VirtualServices
// bound to that Gateway, as istiod builds them; without a Gateway, none; a sidecar of the same
// namespace keeps its own listeners. A VirtualService change reaches the gateway alone.
func TestGatewayListenersComeFromGatewaysAndVirtualServices(t *testing.T) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	r.applyIn(t, "gw", "a1", "10.0.0.1")
	r.applyIn(t, "gw", "a2", "10.0.0.2")
	r.pusher.Enqueue(r.m.SetPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ingress-0", Namespace: "gw",
		Labels: map[string]string{"app": "gateway"}}, Status: corev1.PodStatus{PodIP: "10.1.0.9"}}))
	r.start(t)

	gw := r.client(t, "router~10.1.0.9~ingress-0.gw~gw.svc.cluster.local")
	require.NoError(t, gw.SetNames(resourcev3.ListenerType, nil))
	sc := r.client(t, "sidecar~10.1.0.8~app-0.gw~gw.svc.cluster.local")
	require.NoError(t, sc.SetNames(resourcev3.ListenerType, nil))
	eventually(t, "the sidecar's listener", func() bool { return len(sc.Resources(resourcev3.ListenerType)) == 1 })
	eventually(t, "the gateway's clusters", func() bool { return len(clusterNames(gw)) == 2 })
	assert.Empty(t, gw.Resources(resourcev3.ListenerType), "no Gateway selects it: no listener")

	r.pusher.Enqueue(r.m.SetGateway("gw", "ingress", &model.Gateway{Namespace: "gw", Name: "ingress",
		Selector: map[string]string{"app": "gateway"}, Servers: []model.GatewayServer{{Port: 80, Protocol: "HTTP", Hosts: []string{"./*"}}}}))
	r.pusher.Enqueue(r.m.SetVirtualService("gw", "r1", &model.VirtualService{Namespace: "gw", Name: "r1", Hosts: []string{"a1.test"},
		Gateways: []string{"gw/ingress"}, HTTP: []model.HTTPRoute{{Destinations: []model.RouteDestination{{Host: "a1.test", Port: 80}}}}}))
	eventually(t, "the gateway's listener", func() bool { return len(gw.Resources(resourcev3.ListenerType)) == 1 })
	assert.Equal(t, "http.80", listenerRDS(t, gw, "0.0.0.0_80"), "istiod's gateway route name")
	require.NoError(t, gw.SetNames(resourcev3.RouteType, []string{"http.80"}))
	eventually(t, "the gateway's routes", func() bool { return routeConfig(t, gw, "http.80") != nil })
	rc := routeConfig(t, gw, "http.80")
	require.Len(t, rc.GetVirtualHosts(), 1, "only the host a VirtualService routes")
	vh := rc.GetVirtualHosts()[0]
	assert.Equal(t, "a1.test:80", vh.GetName())
	assert.Equal(t, []string{"a1.test", "a1.test:*"}, vh.GetDomains())
	assert.Equal(t, "outbound|80||a1.test", vh.GetRoutes()[0].GetRoute().GetCluster())

	// The sidecar's listener is the sidecar's (route "80", every service).
	assert.Equal(t, "80", listenerRDS(t, sc, "0.0.0.0_80"))
	sidecarResponses := len(sc.Received())
	// A second route, through a VirtualService bound to the Gateway by its short name.
	r.pusher.Enqueue(r.m.SetVirtualService("gw", "r2", &model.VirtualService{Namespace: "gw", Name: "r2", Hosts: []string{"a2.test"},
		Gateways: []string{"gw/ingress"}, Created: time.Unix(1, 0), HTTP: []model.HTTPRoute{{Destinations: []model.RouteDestination{{Host: "a2.test"}}}}}))
	eventually(t, "the second virtual host", func() bool { return len(routeConfig(t, gw, "http.80").GetVirtualHosts()) == 2 })
	assert.Equal(t, "outbound|80||a2.test", routeConfig(t, gw, "http.80").GetVirtualHosts()[1].GetRoutes()[0].GetRoute().GetCluster(),
		"a destination without a port: the service's only one")
	assert.Equal(t, sidecarResponses, len(sc.Received()), "a VirtualService bound to a gateway sends the sidecar nothing")

	// The Gateway gone: the gateway's listener goes with it.
	r.pusher.Enqueue(r.m.DeleteGateway("gw", "ingress"))
	eventually(t, "the listener removed", func() bool { return len(gw.Resources(resourcev3.ListenerType)) == 0 })
}

func TestGatewayServerAdmitsHosts(t *testing.T) {
	s := model.GatewayServer{Port: 80, Hosts: []string{"./*", "other/x.test", "*.mesh.test"}}
	assert.True(t, s.Admits("gw", "gw", "a.test"), "./*: any host of the Gateway's namespace")
	assert.False(t, s.Admits("gw", "app", "a.test"))
	assert.True(t, s.Admits("gw", "other", "x.test"))
	assert.False(t, s.Admits("gw", "other", "y.test"))
	assert.True(t, s.Admits("gw", "app", "se-1.mesh.test"), "a host without ns/: any namespace")
}
