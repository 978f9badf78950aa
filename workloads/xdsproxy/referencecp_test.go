// Traffic through xdsproxy configured by the reference control plane (package controlplane),
// on a real kube-apiserver.

package xdsproxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apinetv1 "istio.io/api/networking/v1"
	apinet "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshchaos/meshchaos/controlplane"
	"github.com/meshchaos/meshchaos/controlplane/xds"
	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
	"github.com/meshchaos/meshchaos/results/respflags"
	"github.com/meshchaos/meshchaos/workloads/echo"
	"github.com/meshchaos/meshchaos/workloads/xdsproxy"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// echoPod is an echo backend on loopback; it returns its port.
func echoPod(t *testing.T, name string) uint32 {
	s := httptest.NewServer(echo.Handler(echo.Options{PodName: name, PodIP: "127.0.0.1"}))
	t.Cleanup(s.Close)
	return uint32(s.Listener.Addr().(*net.TCPAddr).Port)
}

func serviceEntry(name, host string, port uint32, backends ...uint32) *networkingv1.ServiceEntry {
	se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "mesh"}, Spec: apinet.ServiceEntry{
		Hosts: []string{host}, Resolution: apinet.ServiceEntry_STATIC,
		Ports: []*apinet.ServicePort{{Number: port, Name: "http", Protocol: "HTTP"}}}}
	for _, b := range backends {
		// Loopback endpoints are fine inline in a ServiceEntry (EndpointSlices reject them).
		se.Spec.Endpoints = append(se.Spec.Endpoints, &apinet.WorkloadEntry{Address: "127.0.0.1", Ports: map[string]uint32{"http": b}})
	}
	return se
}

// meshAPI is a real kube-apiserver with the Istio CRDs and the namespace "mesh".
func meshAPI(t *testing.T) (*rest.Config, *istioclient.Clientset) {
	ctx := context.Background()
	cfg := apiserver.StartForTest(t).RESTConfig()
	_, err := kube.InstallCRDs(ctx, cfg, crds.Istio)
	require.NoError(t, err)
	kc, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	ic, err := istioclient.NewForConfig(cfg)
	require.NoError(t, err)
	return cfg, ic
}

// gatewayLabels are the test gateway's labels, as its node metadata says them.
var gatewayLabels = map[string]string{"app": "gateway"}

// routeThroughGateway creates the Gateway that selects the test gateway, with servers on ports,
// and a VirtualService per host routing it to the host's port ports[0]: a gateway gets its
// listeners and routes from nothing else, from istiod as from the reference.
func routeThroughGateway(t *testing.T, ic *istioclient.Clientset, ports []uint32, hosts ...string) {
	ctx := context.Background()
	gw := &networkingv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "mesh"},
		Spec: apinetv1.Gateway{Selector: gatewayLabels}}
	for _, p := range ports {
		gw.Spec.Servers = append(gw.Spec.Servers, &apinetv1.Server{Port: &apinetv1.Port{Number: p, Name: fmt.Sprint("http-", p), Protocol: "HTTP"},
			Hosts: []string{"./*"}})
	}
	_, err := ic.NetworkingV1().Gateways("mesh").Create(ctx, gw, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, h := range hosts {
		vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: strings.Split(h, ".")[0], Namespace: "mesh"},
			Spec: apinetv1.VirtualService{Hosts: []string{h}, Gateways: []string{"gw"}, Http: []*apinetv1.HTTPRoute{{
				Route: []*apinetv1.HTTPRouteDestination{{Destination: &apinetv1.Destination{Host: h, Port: &apinetv1.PortSelector{Number: ports[0]}}}}}}}}
		_, err := ic.NetworkingV1().VirtualServices("mesh").Create(ctx, vs, metav1.CreateOptions{})
		require.NoError(t, err)
	}
}

// gatewayThroughReferenceCP starts the reference control plane on cfg and xdsproxy as a gateway
// (listeners on 127.0.0.1, admin on admin) configured by it.
func gatewayThroughReferenceCP(t *testing.T, cfg *rest.Config, admin string) (*controlplane.ControlPlane, *xdsproxy.Proxy) {
	ctx := context.Background()
	cp, err := controlplane.Start(ctx, controlplane.Options{Kube: cfg, XDSAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		SyncGate: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(cp.Stop)
	<-cp.Gate.Done()
	labels := map[string]any{}
	for k, v := range gatewayLabels {
		labels[k] = v
	}
	gw, err := xdsproxy.New(xdsproxy.Options{XDSAddress: cp.XDSAddr(), NodeID: "router~127.0.0.1~gateway-0.mesh~mesh.svc.cluster.local",
		Metadata:   map[string]any{"NAMESPACE": "mesh", "LABELS": labels},
		ListenerIP: "127.0.0.1", AdminAddress: admin, BackoffBase: 50 * time.Millisecond})
	require.NoError(t, err, "start xdsproxy with admin on %s (must be free on loopback)", admin)
	require.NoError(t, gw.Start(ctx))
	t.Cleanup(gw.Close)
	return cp, gw
}

// TestGatewayReachesEchoByHostThroughReferenceCP: real kube-apiserver, the reference control
// plane, xdsproxy as the gateway; traffic by host name reaches the echo backends, and endpoint
// and service changes propagate.
func TestGatewayReachesEchoByHostThroughReferenceCP(t *testing.T) {
	ctx := context.Background()
	cfg, ic := meshAPI(t)

	_, p, _ := net.SplitHostPort(xdstest.FreeAddr(t))
	port64, _ := strconv.ParseUint(p, 10, 32)
	port := uint32(port64) // the service port: the control plane's listener is 0.0.0.0:port
	a0, a1, b0 := echoPod(t, "echo-a-0"), echoPod(t, "echo-a-1"), echoPod(t, "echo-b-0")
	ses := ic.NetworkingV1().ServiceEntries("mesh")
	_, err := ses.Create(ctx, serviceEntry("echo-a", "echo-a.mesh.test", port, a0, a1), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = ses.Create(ctx, serviceEntry("echo-b", "echo-b.mesh.test", port, b0), metav1.CreateOptions{})
	require.NoError(t, err)
	routeThroughGateway(t, ic, []uint32{port}, "echo-a.mesh.test", "echo-b.mesh.test")

	_, gw := gatewayThroughReferenceCP(t, cfg, "127.0.0.1:0")
	require.NoError(t, xdsproxy.Wait(ctx, gw.AdminAddr(), 20*time.Second, 20*time.Millisecond))

	addr := "127.0.0.1:" + p
	pod := func(host string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/hello", nil)
		req.Host = host
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var r echo.Reply
		if resp.StatusCode == 200 {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
			assert.Equal(t, host, r.Host)
			assert.Equal(t, "/hello", r.Path)
		}
		return resp.StatusCode, r.Pod, resp.Header.Get(respflags.Header)
	}
	seen := map[string]int{}
	for range 4 {
		code, name, _ := pod("echo-a.mesh.test")
		require.Equal(t, 200, code)
		seen[name]++
	}
	assert.Equal(t, map[string]int{"echo-a-0": 2, "echo-a-1": 2}, seen, "round robin over the service's endpoints")
	_, name, _ := pod(fmt.Sprintf("echo-b.mesh.test:%d", port))
	assert.Equal(t, "echo-b-0", name, "host:port form")
	code, _, flag := pod("nobody.mesh.test")
	assert.Equal(t, 404, code, "a host no VirtualService routes")
	assert.Equal(t, respflags.NoRouteFound, flag)

	// An endpoint-only change (EDS push) reaches the gateway.
	se, err := ses.Get(ctx, "echo-a", metav1.GetOptions{})
	require.NoError(t, err)
	se.Spec.Endpoints = se.Spec.Endpoints[1:]
	_, err = ses.Update(ctx, se, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for range 3 {
			if _, name, _ := pod("echo-a.mesh.test"); name != "echo-a-1" {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)

	// Deleting a service removes its cluster; the VirtualService's route stays, to no cluster.
	require.NoError(t, ses.Delete(ctx, "echo-b", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		code, _, flag := pod("echo-b.mesh.test")
		return code == 503 && flag == respflags.NoClusterFound
	}, 10*time.Second, 20*time.Millisecond)
	// Deleting the VirtualService removes the virtual host: no route.
	require.NoError(t, ic.NetworkingV1().VirtualServices("mesh").Delete(ctx, "echo-b", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		code, _, flag := pod("echo-b.mesh.test")
		return code == 404 && flag == respflags.NoRouteFound
	}, 10*time.Second, 20*time.Millisecond)
	_, dump := adminGet(t, gw, "/config_dump")
	assert.NotContains(t, dump, "echo-b.mesh.test")
	assert.True(t, strings.Contains(dump, "outbound|"+p+"||echo-a.mesh.test"), "the reference control plane's cluster names")
}

// TestNoListenerOnTheProxysOwnPorts: a service on port 15000 (as the gateway Service exposes
// the admin port) must not make the control plane send a listener the proxy cannot bind: the
// gateway, admin on 15000 as in a pod, accepts LDS and the control plane counts no reject.
func TestNoListenerOnTheProxysOwnPorts(t *testing.T) {
	ctx := context.Background()
	cfg, ic := meshAPI(t)
	_, p, _ := net.SplitHostPort(xdstest.FreeAddr(t))
	port64, _ := strconv.ParseUint(p, 10, 32)
	ses := ic.NetworkingV1().ServiceEntries("mesh")
	_, err := ses.Create(ctx, serviceEntry("admin", "gateway-admin.mesh.test", 15000, echoPod(t, "admin-0")), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = ses.Create(ctx, serviceEntry("echo", "echo.mesh.test", uint32(port64), echoPod(t, "echo-0")), metav1.CreateOptions{})
	require.NoError(t, err)
	routeThroughGateway(t, ic, []uint32{uint32(port64), 15000}, "echo.mesh.test", "gateway-admin.mesh.test")

	cp, _ := gatewayThroughReferenceCP(t, cfg, "127.0.0.1:15000") // admin on 15000 as in a pod

	// The gateway answered the first LDS response (ACK or NACK).
	var lds xds.TypeStatus
	require.Eventually(t, func() bool {
		for _, ps := range cp.Server.Proxies() {
			lds = ps.Types["lds"]
		}
		return lds.SentVersion != "" && (lds.AckedVersion == lds.SentVersion || lds.NACKs > 0)
	}, 20*time.Second, 20*time.Millisecond)
	rejects := testutil.ToFloat64(cp.Metrics.Rejects.WithLabelValues("lds"))
	t.Logf("pilot_total_xds_rejects{type=lds} = %v", rejects)
	require.Zero(t, rejects, "the gateway rejected LDS: %+v", lds)
	require.Zero(t, lds.NACKs)
	require.Equal(t, lds.SentVersion, lds.AckedVersion)
}
