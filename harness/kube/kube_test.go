package kube

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
)

func TestDecodeSkipsEmptyDocuments(t *testing.T) {
	objs, err := Decode([]byte("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n# only a comment\n---\n{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"name\": \"b\"}}\n"))
	require.NoError(t, err)
	require.Len(t, objs, 2)
	assert.Equal(t, "ConfigMap", objs[0].GetKind())
	assert.Equal(t, "a", objs[0].GetName())
	assert.Equal(t, "Secret", objs[1].GetKind())

	_, err = Decode([]byte("kind: ConfigMap\n---\nkind: [unclosed\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "document 2")
}

func decodeOne(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	objs, err := Decode([]byte(y))
	require.NoError(t, err)
	require.Len(t, objs, 1)
	return objs[0]
}

const deploymentYAML = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: cp}
spec:
  template:
    spec:
      nodeSelector: {disk: ssd}
      initContainers:
      - {name: init, image: x}
      containers:
      - name: app
        image: x
        resources:
          requests: {cpu: 50m, memory: 64Mi}
          limits: {memory: 1Gi}
      - {name: sidecar, image: y}
`

func TestPinToNode(t *testing.T) {
	d := decodeOne(t, deploymentYAML)
	PinToNode("meshchaos.io/node", "2")(d)
	sel, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "spec", "nodeSelector")
	assert.Equal(t, map[string]string{"disk": "ssd", "meshchaos.io/node": "2"}, sel, "added to the selector, the rest kept")

	p := decodeOne(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x}]}\n")
	PinToNode("meshchaos.io/node", "1")(p)
	sel, _, _ = unstructured.NestedStringMap(p.Object, "spec", "nodeSelector")
	assert.Equal(t, map[string]string{"meshchaos.io/node": "1"}, sel)

	for _, kind := range []string{"DaemonSet", "StatefulSet"} {
		o := decodeOne(t, "apiVersion: apps/v1\nkind: "+kind+"\nmetadata: {name: x}\nspec: {template: {spec: {containers: []}}}\n")
		PinToNode("l", "v")(o)
		sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "spec", "nodeSelector")
		assert.Equal(t, map[string]string{"l": "v"}, sel, kind)
	}

	svc := decodeOne(t, "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n")
	before := svc.DeepCopy()
	PinToNode("l", "v")(svc)
	assert.Equal(t, before, svc, "objects without pods are left alone")

	d2 := decodeOne(t, deploymentYAML)
	PinToNode("l", "")(d2)
	assert.Equal(t, decodeOne(t, deploymentYAML), d2, "an empty value pins nothing")
}

// containerField reads a string field of the named container (or init container) of d's template.
func containerField(t *testing.T, d *unstructured.Unstructured, list, name string, path ...string) (string, bool) {
	t.Helper()
	cs, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", list)
	require.NoError(t, err)
	for _, c := range cs {
		m := c.(map[string]any)
		if m["name"] == name {
			v, found, err := unstructured.NestedString(m, path...)
			require.NoError(t, err)
			return v, found
		}
	}
	t.Fatalf("no container %s in %s", name, list)
	return "", false
}

func TestResourceLimits(t *testing.T) {
	d := decodeOne(t, deploymentYAML)
	require.NoError(t, CPULimit("app", "100m")(d))
	require.NoError(t, MemoryLimit("app", "256Mi")(d))
	v, _ := containerField(t, d, "containers", "app", "resources", "limits", "cpu")
	assert.Equal(t, "100m", v)
	v, _ = containerField(t, d, "containers", "app", "resources", "limits", "memory")
	assert.Equal(t, "256Mi", v, "replaces the manifest's limit")
	v, _ = containerField(t, d, "containers", "app", "resources", "requests", "cpu")
	assert.Equal(t, "50m", v, "requests kept")
	_, found := containerField(t, d, "containers", "sidecar", "resources", "limits", "cpu")
	assert.False(t, found, "other containers untouched")
	_, found = containerField(t, d, "initContainers", "init", "resources", "limits", "cpu")
	assert.False(t, found, "other init containers untouched")

	all := decodeOne(t, deploymentYAML)
	CPULimit("", "2")(all)
	for _, c := range []struct{ list, name string }{{"containers", "app"}, {"containers", "sidecar"}, {"initContainers", "init"}} {
		v, _ := containerField(t, all, c.list, c.name, "resources", "limits", "cpu")
		assert.Equal(t, "2", v, "container \"\" means every container: %s", c.name)
	}

	unchanged := decodeOne(t, deploymentYAML)
	CPULimit("app", "")(unchanged)
	MemoryLimit("app", "")(unchanged)
	assert.Equal(t, decodeOne(t, deploymentYAML), unchanged, "an empty quantity leaves the limits as they are")

	p := decodeOne(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x}]}\n")
	MemoryLimit("c", "64Mi")(p)
	cs, _, _ := unstructured.NestedSlice(p.Object, "spec", "containers")
	v, _, _ = unstructured.NestedString(cs[0].(map[string]any), "resources", "limits", "memory")
	assert.Equal(t, "64Mi", v, "bare Pods too")

	// A misspelt container must not leave the fault without its limit.
	err := CPULimit("meshchaos-controlplane", "100m")(decodeOne(t, deploymentYAML))
	assert.ErrorContains(t, err, `no container "meshchaos-controlplane" to set the cpu limit on`)
	svc := decodeOne(t, "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n")
	assert.NoError(t, CPULimit("app", "100m")(svc), "objects without pods are left alone")
}

func TestPodReadyAndNodeReady(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	pod := func(conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: conds}}
	}
	ok, when := PodReady(pod())
	assert.False(t, ok)
	assert.True(t, when.IsZero(), "no Ready condition: no transition time")
	ok, when = PodReady(pod(corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at}))
	assert.True(t, ok)
	assert.Equal(t, at.Time, when)
	ok, when = PodReady(pod(corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
		corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: at}))
	assert.False(t, ok, "ContainersReady is not Ready")
	assert.Equal(t, at.Time, when, "the time it became not ready")

	node := func(s corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}, {Type: corev1.NodeReady, Status: s}}}}
	}
	assert.True(t, NodeReady(node(corev1.ConditionTrue)))
	assert.False(t, NodeReady(node(corev1.ConditionFalse)))
	assert.False(t, NodeReady(node(corev1.ConditionUnknown)))
	assert.False(t, NodeReady(&corev1.Node{}), "a node without conditions is not ready")
}

func TestLastTermination(t *testing.T) {
	oom := &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}
	errd := &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}
	p := &corev1.Pod{Status: corev1.PodStatus{
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "restarted", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
				LastTerminationState: corev1.ContainerState{Terminated: oom}},
			{Name: "dead", State: corev1.ContainerState{Terminated: errd},
				LastTerminationState: corev1.ContainerState{Terminated: oom}},
			{Name: "fresh", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		},
		InitContainerStatuses: []corev1.ContainerStatus{
			{Name: "proxy", State: corev1.ContainerState{Terminated: oom}},
		},
	}}
	assert.Same(t, oom, LastTermination(p, "restarted"), "already restarted: the last state")
	assert.Same(t, errd, LastTermination(p, "dead"), "not restarted yet: the current state, newer than the last")
	assert.Nil(t, LastTermination(p, "fresh"))
	assert.Same(t, oom, LastTermination(p, "proxy"), "init (sidecar) containers too")
	assert.Nil(t, LastTermination(p, "missing"))
}

func TestPodIPs(t *testing.T) {
	now := metav1.Now()
	pod := func(name, ip string, phase corev1.PodPhase, app string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": app}},
			Status: corev1.PodStatus{Phase: phase, PodIP: ip}}
	}
	deleting := pod("deleting", "10.244.0.5", corev1.PodRunning, "echo")
	deleting.DeletionTimestamp = &now
	deleting.Finalizers = []string{"x"}
	cs := fake.NewClientset(
		pod("a", "10.244.0.10", corev1.PodRunning, "echo"),
		pod("b", "10.244.0.9", corev1.PodRunning, "echo"),
		pod("c", "10.244.1.2", corev1.PodRunning, "echo"),
		pod("pending", "", corev1.PodPending, "echo"),
		pod("done", "10.244.0.7", corev1.PodSucceeded, "echo"),
		pod("other", "10.244.0.8", corev1.PodRunning, "gateway"),
		deleting,
	)
	ips, err := PodIPs(context.Background(), cs, "ns", "app=echo")
	require.NoError(t, err)
	assert.Equal(t, []string{"10.244.0.9", "10.244.0.10", "10.244.1.2"}, ips, "running, with an IP, numeric order")

	_, err = PodIPs(context.Background(), cs, "ns", "app=none")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no running pod with an IP matches app=none in ns")
}
