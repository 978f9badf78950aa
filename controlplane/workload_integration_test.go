package controlplane_test

import (
	"context"
	"slices"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1" // the xds:/// resolver and balancers
	apinet "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshchaos/meshchaos/controlplane"
	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/controlplane/regress"
)

// servedPorts returns the endpoint ports of cluster cn as the control plane's EDS cache holds it.
func servedPorts(t testing.TB, cp *controlplane.ControlPlane, cn string) []uint32 {
	r, ok := cp.Caches.Endpoints.GetResources()[cn]
	if !ok {
		return nil
	}
	var out []uint32
	for _, l := range r.(*endpoint.ClusterLoadAssignment).GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
		}
	}
	return out
}

// testSEEndpointPort covers se-endpoint-port and we-stale-label with WorkloadEntries selected by
// a ServiceEntry: three control planes (plain and one per switch) watch the same changes.
func testSEEndpointPort(t *testing.T, c *testCluster) {
	ctx := context.Background()
	const ns, host = "wle", "wl.wle.test"
	cn := model.ClusterName(host, 80)
	se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "wl", Namespace: ns}, Spec: apinet.ServiceEntry{
		Hosts: []string{host}, Resolution: apinet.ServiceEntry_STATIC,
		Ports:            []*apinet.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
		WorkloadSelector: &apinet.WorkloadSelector{Labels: map[string]string{"app": "wl"}}}}
	_, err := c.istio.NetworkingV1().ServiceEntries(ns).Create(ctx, se, metav1.CreateOptions{})
	require.NoError(t, err)
	mkWE := func(name, addr string, port uint32) {
		we := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: apinet.WorkloadEntry{
			Address: addr, Ports: map[string]uint32{"http": port}, Labels: map[string]string{"app": "wl"}}}
		_, err := c.istio.NetworkingV1().WorkloadEntries(ns).Create(ctx, we, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// unrelatedSE creates a ServiceEntry that selects nothing here: a full push for every
	// control plane, and (Istio 1.6) a rebuild of the WorkloadEntry index.
	unrelatedSE := func(name string) {
		_, err := c.istio.NetworkingV1().ServiceEntries(ns).Create(ctx, &networkingv1.ServiceEntry{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: *seSpec(name+".wle.test", 9, 1)}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	mkWE("a", "10.9.0.1", 9001)
	mkWE("b", "10.9.0.2", 9002)
	mkWE("c", "10.9.0.3", 9003)

	plain := startCP(t, c.cfg, true)
	portBug := startCP(t, c.cfg, true, regress.SEEndpointPort)
	labelBug := startCP(t, c.cfg, true, regress.WEStaleLabel)
	for _, cp := range []*controlplane.ControlPlane{plain, portBug, labelBug} {
		<-cp.Gate.Done()
		require.ElementsMatch(t, []uint32{9001, 9002, 9003}, servedPorts(t, cp, cn), "the initial full push has every port right")
	}

	// Delete an endpoint (an incremental push): the others keep their own ports, except with
	// se-endpoint-port, which writes the ServiceEntry port...
	require.NoError(t, c.istio.NetworkingV1().WorkloadEntries(ns).Delete(ctx, "c", metav1.DeleteOptions{}))
	waitFor(t, 10*time.Second, "delete seen", func() bool {
		return len(servedPorts(t, plain, cn)) == 2 && len(servedPorts(t, portBug, cn)) == 2
	})
	require.ElementsMatch(t, []uint32{9001, 9002}, servedPorts(t, plain, cn))
	require.ElementsMatch(t, []uint32{80, 80}, servedPorts(t, portBug, cn), "se-endpoint-port: the SE port replaces the endpoint ports")
	// ... until a full push, for any reason, rebuilds the endpoints.
	unrelatedSE("unrelated-1")
	waitFor(t, 10*time.Second, "a full push heals se-endpoint-port", func() bool {
		return slices.Equal(sortedPorts(t, portBug, cn), []uint32{9001, 9002})
	})

	// Relabel "b" away from the selector: it must leave the service, except with we-stale-label.
	we, err := c.istio.NetworkingV1().WorkloadEntries(ns).Get(ctx, "b", metav1.GetOptions{})
	require.NoError(t, err)
	we.Spec.Labels = map[string]string{"app": "other"}
	_, err = c.istio.NetworkingV1().WorkloadEntries(ns).Update(ctx, we, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "relabel seen", func() bool { return len(servedPorts(t, plain, cn)) == 1 })
	require.ElementsMatch(t, []uint32{9001}, servedPorts(t, plain, cn))
	// Informers deliver one kind's events in order and one worker applies them in order: once a
	// later WorkloadEntry is served, the relabel before it has been applied.
	mkWE("d", "10.9.0.4", 9004)
	waitFor(t, 10*time.Second, "a later WorkloadEntry served", func() bool { return slices.Contains(servedPorts(t, labelBug, cn), 9004) })
	require.ElementsMatch(t, []uint32{9001, 9002, 9004}, servedPorts(t, labelBug, cn), "we-stale-label: the relabelled entry stays")

	// Delete "b": with we-stale-label it survives its own deletion.
	require.NoError(t, c.istio.NetworkingV1().WorkloadEntries(ns).Delete(ctx, "b", metav1.DeleteOptions{}))
	mkWE("e", "10.9.0.5", 9005)
	waitFor(t, 10*time.Second, "a WorkloadEntry after the delete served", func() bool {
		return slices.Contains(servedPorts(t, labelBug, cn), 9005) && slices.Contains(servedPorts(t, plain, cn), 9005)
	})
	require.ElementsMatch(t, []uint32{9001, 9002, 9004, 9005}, servedPorts(t, labelBug, cn), "we-stale-label: the deleted entry stays")
	require.ElementsMatch(t, []uint32{9001, 9004, 9005}, servedPorts(t, plain, cn))

	// An unrelated ServiceEntry change rebuilds the index: the stale entry goes.
	unrelatedSE("unrelated-2")
	waitFor(t, 10*time.Second, "the stale entry dropped", func() bool {
		return slices.Equal(sortedPorts(t, labelBug, cn), []uint32{9001, 9004, 9005})
	})
}

// sortedPorts is servedPorts, sorted.
func sortedPorts(t testing.TB, cp *controlplane.ControlPlane, cn string) []uint32 {
	p := servedPorts(t, cp, cn)
	slices.Sort(p)
	return p
}

// testGRPC: a grpc-go client with the xds:/// resolver reaches a backend through the control plane.
func testGRPC(t *testing.T, c *testCluster) {
	const ns = "grpc"
	target := newGRPCTarget(t, ns, "echo", "echo.grpc.test")
	target.create(t, c)
	cp := startCP(t, c.cfg, true)
	<-cp.Gate.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(target.dial(t, cp.XDSAddr(), ns)).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err, "grpc-go through xds:///%s:7070", target.host)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
}
