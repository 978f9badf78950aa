package mesh

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/subject"
	wlmanifests "github.com/meshchaos/meshchaos/workloads/manifests"
)

func TestValidate(t *testing.T) {
	cp, err := subject.Parse("reference")
	require.NoError(t, err)
	good := Spec{Nodes: 2, ControlPlane: cp, CP: subject.Placement{Node: 1},
		Backends:       []Backend{{Name: "echo", Replicas: 2, Node: 2}},
		ServiceEntries: ServiceEntries{Count: 10, Backend: "echo"},
		Gateway:        Gateway{Replicas: 1, Node: 2}}
	require.NoError(t, good.Validate())

	bad := good
	bad.Nodes = 1
	assert.ErrorContains(t, bad.Validate(), "gateway on node 2: the cluster has 1 node(s)")
	bad = good
	bad.ServiceEntries.Backend = "nginx"
	assert.ErrorContains(t, bad.Validate(), `backend "nginx", which the mesh does not deploy`)
	bad = good
	bad.ControlPlane = nil
	assert.ErrorContains(t, bad.Validate(), "no control plane under test")
	bad = good
	bad.ADSLoad = ADSLoad{Clients: 10, Node: 3}
	assert.ErrorContains(t, bad.Validate(), "adsload on node 3: the cluster has 2 node(s)")
	bad.ADSLoad = ADSLoad{Clients: -1}
	assert.ErrorContains(t, bad.Validate(), "adsload clients -1")
}

func TestServiceEntriesExpectTheirEndpoints(t *testing.T) {
	objs, exp := ServiceEntries{Count: 12, Backend: "echo"}.Objects([]string{"10.244.1.2", "10.244.1.3"})
	require.Len(t, objs, 12)
	require.Len(t, exp, 12)
	for i, se := range objs {
		assert.Equal(t, fmt.Sprintf("se-%d", i), se.Name)
		assert.Equal(t, "default", se.Namespace)
		require.Equal(t, []string{Host(i)}, se.Spec.Hosts)
		require.Len(t, se.Spec.Endpoints, 2)
		assert.Equal(t, []string{"."}, se.Spec.ExportTo, "a run's entries stay in its namespace")
		assert.Equal(t, map[string]string{"app": "echo"}, se.Spec.Endpoints[0].Labels)
		// The oracle: the endpoint addresses at the target port.
		assert.Equal(t, []string{"10.244.1.2:8080", "10.244.1.3:8080"}, exp[Host(i)])
	}
	hosts := exp.Hosts()
	assert.Equal(t, []string{"se-0.mesh.test", "se-1.mesh.test", "se-2.mesh.test"}, hosts[:3], "generation order, not string order")
	assert.Equal(t, "se-11.mesh.test", hosts[11])
}

func TestTargetsEveryGatewayTimesHost(t *testing.T) {
	_, exp := ServiceEntries{Count: 5, Backend: "echo"}.Objects([]string{"10.244.1.2"})
	m := &Mesh{Expected: exp, GatewayIPs: []string{"10.244.1.5", "10.244.1.6"}}
	ts := m.Targets(2)
	require.Len(t, ts, 4)
	assert.Equal(t, "http://10.244.1.5:80/", ts[0].URL)
	assert.Equal(t, "se-0.mesh.test", ts[0].Header.Get("Host"))
	assert.Equal(t, "http://10.244.1.6:80/", ts[1].URL)
	assert.Equal(t, "se-1.mesh.test", ts[3].Header.Get("Host"))
	assert.Len(t, m.Targets(99), 10, "no more hosts than were generated")
}

// With Spread the gateways route, and the traffic targets, hosts spread over the order the API
// server lists their ServiceEntries in (by name: se-999 last of 3000), the last one included.
func TestSpreadTargetsHostsOverTheListOrder(t *testing.T) {
	exp := Expected{}
	for i := range 3000 {
		exp[Host(i)] = nil
	}
	m := &Mesh{Spec: Spec{Gateway: Gateway{Spread: true}}, Expected: exp, GatewayIPs: []string{"10.244.1.5"}}
	assert.Equal(t, []string{"se-1672.mesh.test", "se-2347.mesh.test", "se-322.mesh.test", "se-999.mesh.test"}, m.gatewayHosts(4))
	assert.Equal(t, []string{"se-999.mesh.test"}, m.gatewayHosts(1), "one host: the last listed")
	ts := m.Targets(2)
	require.Len(t, ts, 2)
	assert.Equal(t, "se-2347.mesh.test", ts[0].Header.Get("Host"))
	assert.Equal(t, "se-999.mesh.test", ts[1].Header.Get("Host"))
	assert.Len(t, m.gatewayHosts(5000), 3000, "no more hosts than were generated")
	m.Spec.Gateway.Spread = false
	assert.Equal(t, []string{"se-0.mesh.test", "se-1.mesh.test"}, m.gatewayHosts(2), "without Spread: the first generated")
}

func TestSyntheticServiceEntriesWithOwnEndpointPorts(t *testing.T) {
	g := ServiceEntries{Count: 3, From: 500, Prefix: "port", Endpoints: 4, EndpointPort: 9000}
	objs, exp := g.Objects(nil)
	require.Len(t, objs, 3)
	assert.Equal(t, "port-500", objs[0].Name)
	assert.Equal(t, []string{"port-500.mesh.test"}, objs[0].Spec.Hosts)
	assert.Equal(t, uint32(8080), objs[0].Spec.Ports[0].TargetPort, "the service's target port differs from the endpoints' own")
	require.Len(t, objs[0].Spec.Endpoints, 4)
	assert.Equal(t, map[string]uint32{"http": 9003}, objs[0].Spec.Endpoints[3].Ports)
	// Every endpoint of every ServiceEntry has an address of its own and is expected at its own port.
	seen := map[string]bool{}
	for _, se := range objs {
		for j, ep := range se.Spec.Endpoints {
			assert.False(t, seen[ep.Address], ep.Address)
			seen[ep.Address] = true
			assert.Equal(t, fmt.Sprintf("%s:%d", ep.Address, 9000+j), exp[se.Spec.Hosts[0]][j])
		}
	}
	assert.Equal(t, 12, exp.Endpoints())
	_, plain := ServiceEntries{Count: 1, Endpoints: 2}.Objects(nil)
	assert.Equal(t, []string{"10.128.0.0:8080", "10.128.0.1:8080"}, plain[Host(0)])
}

// holder is a cluster whose host has only the images in has.
type holder struct {
	cluster.Cluster
	has  map[string]bool
	held []string
}

func (h *holder) HoldImage(_ context.Context, ref string) (bool, error) {
	if !h.has[ref] {
		return false, nil
	}
	h.held = append(h.held, ref)
	return true, nil
}

func TestDataPlaneChoice(t *testing.T) {
	ctx := context.Background()
	t.Setenv(EnvoyImageEnv, "")
	wl, why, err := workloadSubstrate(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, wlmanifests.XDSProxy, wl.Proxy)
	assert.Contains(t, why, "xdsproxy")

	// A substrate that cannot be given images: never Envoy (its pods would pull it).
	wl, why, err = workloadSubstrate(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, wlmanifests.XDSProxy, wl.Proxy, why)

	// kind without the Envoy image: xdsproxy, never a pull, and the note says how to get Envoy.
	h := &holder{has: map[string]bool{}}
	wl, why, err = workloadSubstrate(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, wlmanifests.XDSProxy, wl.Proxy)
	assert.Equal(t, "Never", wl.PullPolicy, "meshchaos images are loaded, never pulled")
	assert.Contains(t, why, "docker pull "+wlmanifests.DefaultEnvoyImage)
	assert.Empty(t, h.held)

	// kind with it: Envoy, given to the nodes.
	h.has[wlmanifests.DefaultEnvoyImage] = true
	wl, why, err = workloadSubstrate(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, wlmanifests.Envoy, wl.Proxy)
	assert.Equal(t, wlmanifests.DefaultEnvoyImage, wl.EnvoyImage)
	assert.Equal(t, []string{wlmanifests.DefaultEnvoyImage}, h.held)
	assert.Equal(t, "Envoy "+wlmanifests.DefaultEnvoyImage, why)

	// The user's Envoy image, when named, is the one asked for.
	t.Setenv(EnvoyImageEnv, "example.test/envoy:v1")
	wl, _, err = workloadSubstrate(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, wlmanifests.XDSProxy, wl.Proxy, "the host has no example.test/envoy:v1")
}

// The tracked cluster is the Service's in the mesh's namespace: "default" on a cluster of the
// run's own, the run's namespace on a shared one (a cluster name naming "default" there tracks
// nothing, and the convergence measurement never starts).
func TestServiceCluster(t *testing.T) {
	assert.Equal(t, "||flap.default.svc.", serviceCluster("flap", "default"))
	assert.Equal(t, "||flap.meshchaos-workloads.svc.", serviceCluster("flap", "meshchaos-workloads"))
	assert.Contains(t, "outbound|80||flap.meshchaos-workloads.svc.cluster.local", serviceCluster("flap", "meshchaos-workloads"))
}

// The gRPC clients call the first generated hosts, or those whose ServiceEntries the API server
// lists last (by name: se-999 after se-2999).
func TestGRPCClientsTargets(t *testing.T) {
	exp := Expected{}
	for i := range 3000 {
		exp[Host(i)] = nil
	}
	assert.Equal(t, []string{"se-0.mesh.test:80", "se-1.mesh.test:80"}, GRPCClients{Hosts: 2}.targets(exp))
	assert.Equal(t, []string{"se-999.mesh.test:80", "se-998.mesh.test:80", "se-997.mesh.test:80"}, GRPCClients{Hosts: 3, LastListed: true}.targets(exp))
}
