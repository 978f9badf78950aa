package subject

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	cpmanifests "github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/harness/kube"
)

// deployment renders the reference control plane and applies p's mutators to its Deployment.
func deployment(t *testing.T, p Placement) *unstructured.Unstructured {
	t.Helper()
	y, err := cpmanifests.ControlPlane(cpmanifests.Params{})
	require.NoError(t, err)
	objs, err := kube.Decode(y)
	require.NoError(t, err)
	muts, err := placementMutators(p, map[string]string{"app": refName}, "controlplane")
	require.NoError(t, err)
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		for _, m := range muts {
			require.NoError(t, m(o))
		}
		return o
	}
	t.Fatal("no Deployment in the control plane's manifests")
	return nil
}

func container(t *testing.T, d *unstructured.Unstructured) map[string]any {
	cs, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	require.NoError(t, err)
	return cs[0].(map[string]any)
}

func TestPlacementQoS(t *testing.T) {
	own := container(t, deployment(t, Placement{}))
	cpu, _, _ := unstructured.NestedString(own, "resources", "requests", "cpu")
	assert.Equal(t, "100m", cpu, "no QoS leaves the control plane's own request")

	_, found, _ := unstructured.NestedMap(container(t, deployment(t, Placement{QoS: QoSBestEffort})), "resources")
	assert.False(t, found, "BestEffort: no requests, no limits")

	g := container(t, deployment(t, Placement{QoS: QoSGuaranteed, CPULimit: "500m", MemoryLimit: "512Mi"}))
	for _, kind := range []string{"requests", "limits"} {
		res, _, _ := unstructured.NestedStringMap(g, "resources", kind)
		assert.Equal(t, map[string]string{"cpu": "500m", "memory": "512Mi"}, res, kind)
	}

	_, err := placementMutators(Placement{QoS: QoSGuaranteed, MemoryLimit: "1Gi"}, map[string]string{"app": refName}, "controlplane")
	assert.ErrorContains(t, err, "needs a CPU and a memory limit")
	_, err = placementMutators(Placement{QoS: "Gold"}, map[string]string{"app": refName}, "controlplane")
	assert.ErrorContains(t, err, `QoS "Gold"`)
}

func TestPlacementReplicasNodesPriority(t *testing.T) {
	d := deployment(t, Placement{Replicas: 2, Nodes: []int{2, 3}, PriorityClass: "mesh"})
	n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
	assert.Equal(t, int64(2), n)
	terms, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "affinity", "nodeAffinity",
		"requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
	require.Len(t, terms, 1)
	expr := terms[0].(map[string]any)["matchExpressions"].([]any)[0].(map[string]any)
	assert.Equal(t, "meshchaos.io/node", expr["key"])
	assert.Equal(t, []any{"2", "3"}, expr["values"])
	anti, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "affinity", "podAntiAffinity",
		"preferredDuringSchedulingIgnoredDuringExecution")
	require.Len(t, anti, 1, "replicas spread where they can")
	pc, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "priorityClassName")
	assert.Equal(t, "mesh", pc)
	assert.Contains(t, string(priorityClassYAML("mesh")), "name: mesh")
}
