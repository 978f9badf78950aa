package existing

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
)

// fakeCluster is run's view of a fake cluster holding objs (no cluster-scoped kinds to
// discover: kube's own tests cover DeleteOwned), logging to t.
func fakeCluster(t *testing.T, run string, objs ...runtime.Object) (*existingCluster, *fake.Clientset) {
	cs := fake.NewClientset(objs...)
	c := &existingCluster{name: run, client: cs, logf: t.Logf, sessions: map[string]*session{},
		owned: kube.OwnedClients{Discovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}, Dynamic: fakedynamic.NewSimpleDynamicClient(runtime.NewScheme())},
		runOnAgent: func(context.Context, string, ...string) ([]byte, error) {
			return nil, errors.New("no agent in this test")
		}}
	return c, cs
}

func runNamespace(name, run string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if run != "" {
		ns.Labels = map[string]string{RunLabel: run}
	}
	return ns
}

func pod(ns, name, node string, grace int64) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:   corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &grace},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func agentPod(node string) *corev1.Pod {
	p := pod(AgentNamespace, "agent-"+node, node, 1)
	p.Labels = map[string]string{"app": agentName}
	return p
}

func agentDaemonSet(nodeAccess bool) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: AgentNamespace, Name: agentName},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{HostPID: nodeAccess}}}}
}

// deletes lists the fake's delete actions in order, as "resource/[namespace/]name".
func deletes(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if d, ok := a.(clienttesting.DeleteAction); ok {
			what := d.GetResource().Resource + "/"
			if d.GetNamespace() != "" {
				what += d.GetNamespace() + "/"
			}
			out = append(out, what+d.GetName())
		}
	}
	return out
}

// Down deletes the run's pods before its namespaces (so that a pod its kubelet keeps is named
// with its node), the agent's DaemonSet before the agent's pods and the agent after the
// workloads (it reads kubelet logs for them).
func TestDownDeletesPodsBeforeNamespaces(t *testing.T) {
	c, cs := fakeCluster(t, "run-a",
		runNamespace(AgentNamespace, "run-a"), runNamespace(WorkloadNamespace, "run-a"),
		pod(WorkloadNamespace, "echo", "n1", 0), pod(WorkloadNamespace, "gateway", "n1", 0),
		agentDaemonSet(true), agentPod("n1"))
	c.namespaces = []string{AgentNamespace, WorkloadNamespace}
	require.NoError(t, c.Down(context.Background()))
	assert.Equal(t, []string{
		"pods/" + WorkloadNamespace + "/echo", "pods/" + WorkloadNamespace + "/gateway",
		"daemonsets/" + AgentNamespace + "/" + agentName, "pods/" + AgentNamespace + "/agent-n1",
		"namespaces/" + AgentNamespace, "namespaces/" + WorkloadNamespace,
	}, deletes(cs))
	assert.Empty(t, c.namespaces, "Down twice deletes nothing twice")
}

// A cluster that deletes nothing: Down returns within its budget, naming every pod left (with
// its node and the node's kubelet log, or why there is none) and every namespace left.
func TestDownHonoursItsBudget(t *testing.T) {
	c, cs := fakeCluster(t, "run-a", runNamespace(WorkloadNamespace, "run-a"),
		pod(WorkloadNamespace, "echo", "n1", 0), pod(WorkloadNamespace, "held", "", 0), pod(WorkloadNamespace, "far", "n9", 0))
	for _, res := range []string{"pods", "namespaces"} {
		cs.PrependReactor("delete", res, func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, nil // accepted, never done: a kubelet that never confirms, a finalizer
		})
	}
	const budget = 2 * time.Second
	c.budget, c.podMargin = budget, 100*time.Millisecond
	c.namespaces, c.nodes = []string{WorkloadNamespace}, []string{"n1"}
	c.allow, c.agents = true, map[string]string{"n1": "agent-n1"}
	var mu sync.Mutex
	var logged []string
	c.logf = func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, f)
	}
	var asked []string
	c.runOnAgent = func(_ context.Context, pod string, argv ...string) ([]byte, error) {
		asked = append([]string{pod}, argv...)
		return []byte("E0101 kubelet.go:1 \"Failed to kill pod\" pod=\"meshchaos-workloads/echo\" podUID=\"uid-echo\"\n"), nil
	}

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Down(context.Background()) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(budget + 10*time.Second):
		t.Fatalf("Down still running %s after its budget of %s", 10*time.Second, budget)
	}
	took := time.Since(start)
	require.Error(t, err)
	t.Log(err)
	assert.Less(t, took, budget+2*time.Second, "the budget bounds Down (plus the short deadlines of its last looks)")
	msg := err.Error()
	assert.Contains(t, msg, "pod "+WorkloadNamespace+"/echo (node n1, Running) still there")
	assert.Contains(t, msg, "kubelet on n1:\n  E0101 kubelet.go:1 \"Failed to kill pod\"", "the node's kubelet log, read through its agent")
	assert.Equal(t, []string{"agent-n1", "/meshchaos", "agent", "exec", "--", "sh", "-c", kubeletLogScript, "sh", "uid-echo", "echo"}, asked)
	assert.Contains(t, msg, "pod "+WorkloadNamespace+"/held (unscheduled, Running) still there")
	assert.Contains(t, msg, "no kubelet log excerpt: the pod was never scheduled to a node")
	assert.Contains(t, msg, "no kubelet log excerpt: no agent on node n9")
	assert.Contains(t, msg, "namespace "+WorkloadNamespace+" still terminating after the teardown's 2s")
	assert.Contains(t, msg, "meshchaos cluster down --substrate existing run-a")
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, logged, 3, "each pod left was reported as soon as it was past its grace period and margin")
}

// Down removes only the node labels the run set (the annotation names it): not the cluster
// owner's, not another run's, and no other label of the node.
func TestDownRemovesOnlyTheRunsNodeLabels(t *testing.T) {
	node := func(name string, labels, annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations, ResourceVersion: "7"}}
	}
	c, cs := fakeCluster(t, "run-a",
		node("ours", map[string]string{cluster.NodeLabel: "1", "team": "x"}, map[string]string{LabelledByAnnotation: "run-a", "note": "keep"}),
		node("owners", map[string]string{cluster.NodeLabel: "2"}, nil),
		node("theirs", map[string]string{cluster.NodeLabel: "1"}, map[string]string{LabelledByAnnotation: "run-b"}))
	c.labelled = []string{"ours", "owners", "theirs"}
	require.NoError(t, c.Down(context.Background()))

	get := func(name string) *corev1.Node {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		return n
	}
	assert.Equal(t, map[string]string{"team": "x"}, get("ours").Labels, "the run's label gone, the others' kept")
	assert.Equal(t, map[string]string{"note": "keep"}, get("ours").Annotations)
	assert.Equal(t, map[string]string{cluster.NodeLabel: "2"}, get("owners").Labels, "the cluster owner's label stays")
	assert.Equal(t, map[string]string{cluster.NodeLabel: "1"}, get("theirs").Labels, "another run's label stays")
	assert.Equal(t, "run-b", get("theirs").Annotations[LabelledByAnnotation])
}

// A killed run's leftovers are found by its owner label and removed by its name; nothing
// without its label is touched, and a second removal finds nothing.
func TestRemoveLeftoversByName(t *testing.T) {
	ctx := context.Background()
	c, cs := fakeCluster(t, "run-a",
		runNamespace(AgentNamespace, "run-a"), runNamespace(WorkloadNamespace, "run-a"), runNamespace("meshchaos-system", "run-a"),
		runNamespace("other-run", "run-b"), runNamespace("staging", ""),
		pod(WorkloadNamespace, "echo", "n1", 0), pod("staging", "app", "n1", 0), pod("other-run", "cp", "n2", 0),
		agentDaemonSet(true), agentPod("n1"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{cluster.NodeLabel: "1"}, Annotations: map[string]string{LabelledByAnnotation: "run-a"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{cluster.NodeLabel: "1"}, Annotations: map[string]string{LabelledByAnnotation: "run-b"}}})

	all, err := c.leftovers(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []Leftovers{
		{Run: "run-a", Namespaces: []string{AgentNamespace, "meshchaos-system", WorkloadNamespace}, NodeLabels: []string{"n1"}},
		{Run: "run-b", Namespaces: []string{"other-run"}, NodeLabels: []string{"n2"}},
	}, all)
	assert.Equal(t, "namespaces meshchaos-agent, meshchaos-system, meshchaos-workloads; its node labels on n1", all[0].String())

	got, err := c.removeLeftovers(ctx)
	require.NoError(t, err)
	assert.Equal(t, all[0], got)
	assert.True(t, c.allow, "the agent had node access: it may read kubelet logs")
	for _, ns := range []string{AgentNamespace, WorkloadNamespace, "meshchaos-system"} {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "run-a's namespace %s removed", ns)
	}
	for _, ns := range []string{"other-run", "staging"} {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		assert.NoError(t, err, "namespace %s is not run-a's", ns)
	}
	for _, d := range deletes(cs) {
		assert.False(t, strings.Contains(d, "/staging") || strings.Contains(d, "/other-run"), "deleted %s", d)
	}
	n2, err := cs.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "1", n2.Labels[cluster.NodeLabel], "run-b's node label stays")

	c2, _ := fakeCluster(t, "run-a")
	c2.client = cs
	_, err = c2.removeLeftovers(ctx)
	assert.ErrorIs(t, err, ErrNothingLeft)
}

// TestKeepLeavesTheRunsNamespaces: a kept run (meshchaos run --keep-cluster) deletes nothing on
// the cluster, says how to reach it, and leaves the namespaces for 'cluster down' to find.
func TestKeepLeavesTheRunsNamespaces(t *testing.T) {
	c, cs := fakeCluster(t, "r1", runNamespace(WorkloadNamespace, "r1"), runNamespace(AgentNamespace, "r1"),
		pod(WorkloadNamespace, "echo-0", "n1", 1), agentPod("n1"), agentDaemonSet(false))
	c.namespaces = []string{AgentNamespace, WorkloadNamespace}
	c.kubeconfig, c.context = "/home/me/staging.yaml", "staging"
	k, err := c.Keep(context.Background())
	require.NoError(t, err)
	assert.Equal(t, cluster.Kept{Kubeconfig: "/home/me/staging.yaml", Context: "staging"}, k)
	for _, a := range cs.Actions() {
		assert.NotEqual(t, "delete", a.GetVerb(), "a kept run deletes nothing: %v", a)
	}
	nss, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{LabelSelector: RunLabel + "=r1"})
	require.NoError(t, err)
	assert.Len(t, nss.Items, 2, "the run's namespaces stay, labelled for 'cluster down --substrate existing r1'")
}
