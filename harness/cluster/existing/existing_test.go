package existing

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshchaos/meshchaos/harness/chaos"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

func TestRESTConfigSaysWhatIsWrong(t *testing.T) {
	t.Setenv("KUBECONFIG", "/nonexistent/kubeconfig") // not the machine's own
	_, err := Substrate{}.RESTConfig()
	assert.ErrorContains(t, err, "needs the cluster's kubeconfig")
	_, err = Substrate{Kubeconfig: "/nonexistent/kubeconfig"}.RESTConfig()
	assert.ErrorContains(t, err, "kubeconfig /nonexistent/kubeconfig")
	bad := t.TempDir() + "/kubeconfig"
	require.NoError(t, os.WriteFile(bad, []byte("apiVersion: v1\nkind: Config\n"), 0o600))
	_, err = Substrate{Kubeconfig: bad, Context: "nope"}.RESTConfig()
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "\n", "one line")
}

// TestExistingCluster uses a local cluster as if it were someone else's: only its kubeconfig is
// handed to the existing substrate.
func TestExistingCluster(t *testing.T) {
	prereq.Integration(t)
	require.NoError(t, local.Preflight())
	imagesDir, err := bins.ImagesDir("")
	require.NoError(t, err)
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	start := time.Now()
	lc, err := local.Substrate{Home: home, ImagesDir: imagesDir}.Up(ctx, cluster.Spec{Name: fmt.Sprintf("x%d", os.Getpid()%100000), Nodes: 2, Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Down(context.Background()) })
	t.Logf("local cluster up in %s", time.Since(start).Round(100*time.Millisecond))
	kubeconfig := lc.(*local.Cluster).KubeconfigPath()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	p := Substrate{Kubeconfig: kubeconfig, AllowNodeChaos: true}
	spec := cluster.Spec{Name: "run-a", Nodes: 2, Logf: t.Logf, Namespaces: []string{WorkloadNamespace, "meshchaos-system"}}

	t.Run("refuses a namespace it does not own, creating nothing", func(t *testing.T) {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshchaos-system"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = p.Up(ctx, spec)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "namespace meshchaos-system already exists and was not created by meshchaos")
		for _, ns := range []string{AgentNamespace, WorkloadNamespace} {
			_, gerr := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(gerr), "%s was not created: %v", ns, gerr)
		}
		_, err = cs.CoreV1().Namespaces().Get(ctx, "meshchaos-system", metav1.GetOptions{})
		assert.NoError(t, err, "the other's namespace is untouched")
		require.NoError(t, cs.CoreV1().Namespaces().Delete(ctx, "meshchaos-system", metav1.DeleteOptions{}))
		waitGone(ctx, t, cs, "meshchaos-system")
	})

	start = time.Now()
	c, err := p.Up(ctx, spec)
	require.NoError(t, err)
	t.Logf("existing substrate up (namespaces, agent) in %s", time.Since(start).Round(100*time.Millisecond))
	down := false
	t.Cleanup(func() {
		if !down {
			_ = c.Down(context.Background())
		}
	})
	assert.Equal(t, lc.Nodes(), c.Nodes(), "node k is the node labelled meshchaos.io/node=k")

	t.Run("refuses another run's namespaces", func(t *testing.T) {
		_, err := p.Up(ctx, cluster.Spec{Name: "run-b", Nodes: 2, Namespaces: []string{WorkloadNamespace}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "belongs to meshchaos run run-a")
	})

	t.Run("dials a ClusterIP from a node", func(t *testing.T) {
		conn, err := c.Dialer(2)(ctx, "tcp", "10.96.0.1:443")
		require.NoError(t, err)
		conn.Close()
		_, err = c.Dialer(2)(ctx, "tcp", "127.0.0.1:1")
		assert.ErrorContains(t, err, "refused", "a refused dial fails as a dial")
	})

	t.Run("kube-proxy throttled through the agent", func(t *testing.T) {
		g, err := c.KubeProxyCgroup(2)
		require.NoError(t, err)
		// The same group the local substrate throttles: the agent found it from the node alone.
		want, err := lc.KubeProxyCgroup(2)
		require.NoError(t, err)
		assert.Equal(t, want.Path, g.Path)
		before, err := g.CPUUsage()
		require.NoError(t, err)
		th := &chaos.CPUThrottle{Target: "kube-proxy/node2", Group: g, CPUs: 0.01}
		ev, err := th.Inject(ctx)
		require.NoError(t, err)
		t.Log(ev.Summary)
		// The kernel's own view (read on the host, not through the agent) shows the quota.
		q, err := want.CPUQuota()
		require.NoError(t, err)
		assert.InDelta(t, 0.01, q, 0.001)
		// Make kube-proxy work: a Service and its endpoints to program on every node.
		_, err = cs.CoreV1().Services(WorkloadNamespace).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "busy"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "none"}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			st, err := g.CPUStat()
			return err == nil && st.ThrottledPeriods > 0
		}, time.Minute, 200*time.Millisecond, "the kernel throttles kube-proxy")
		ev, err = th.Clear(ctx)
		require.NoError(t, err)
		t.Log(ev.Summary)
		assert.Positive(t, ev.Values["throttledPeriods"])
		q, err = want.CPUQuota()
		require.NoError(t, err)
		assert.Zero(t, q, "the quota is lifted")
		after, err := g.CPUUsage()
		require.NoError(t, err)
		assert.Greater(t, after, before)
	})

	t.Run("node commands and pod cgroups", func(t *testing.T) {
		out, err := c.NodeExec(ctx, 2, "iptables-save", "-t", "nat")
		require.NoError(t, err)
		assert.Contains(t, string(out), "KUBE-SERVICES")
		pods, err := cs.CoreV1().Pods(AgentNamespace).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, pods.Items)
		g, err := c.PodCgroup(&pods.Items[0])
		require.NoError(t, err)
		mem, err := observe.OpenGroupMemory(g)
		require.NoError(t, err)
		u, err := mem.ReadMemory()
		require.NoError(t, err)
		assert.Positive(t, u.Usage)
		k := 1
		for i, n := range c.Nodes() {
			if n == pods.Items[0].Spec.NodeName {
				k = i + 1
			}
		}
		pg, err := c.PodsCgroup(k)
		require.NoError(t, err)
		assert.True(t, pg.Exists())
		assert.True(t, strings.HasPrefix(g.Path, pg.Path+"/") || strings.HasPrefix(g.Path, pg.Path+"-"), "pod %s under kubepods %s", g.Path, pg.Path)
		// Only cgroup files: the agent refuses anything else of the node.
		_, err = g.Files().ReadFile("/proc/1/root/etc/shadow")
		assert.ErrorContains(t, err, "not in a cgroup hierarchy")
	})

	require.NoError(t, c.Down(ctx))
	down = true
	for _, ns := range []string{AgentNamespace, WorkloadNamespace, "meshchaos-system"} {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "Down deleted %s: %v", ns, err)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		assert.NotEmpty(t, n.Labels[cluster.NodeLabel], "labels the cluster's owner set stay")
	}

	t.Run("a Down out of time says what is left", func(t *testing.T) {
		// Down's own budget, short: the caller's deadline is not Down's.
		short := p
		short.DownBudget = 10 * time.Second
		c, err := short.Up(ctx, cluster.Spec{Name: "run-c", Nodes: 2, Logf: t.Logf, Namespaces: []string{WorkloadNamespace}})
		require.NoError(t, err)
		// A pod held by a finalizer (and never scheduled): its namespace cannot go until it does.
		const hold = "meshchaos.io/test-hold"
		_, err = cs.CoreV1().Pods(WorkloadNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{hold}},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"meshchaos.io/no-such-node": "x"},
				Containers: []corev1.Container{{Name: "c", Image: "meshchaos.invalid/none:0"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		release := func() {
			_, _ = cs.CoreV1().Pods(WorkloadNamespace).Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
		t.Cleanup(release)
		start := time.Now()
		err = c.Down(ctx)
		require.Error(t, err)
		t.Log(err)
		assert.Less(t, time.Since(start), 30*time.Second, "within its budget and its last looks' short deadlines")
		assert.Contains(t, err.Error(), "pod "+WorkloadNamespace+"/held (unscheduled, ", "the pod is named as a pod, not only inside its namespace")
		assert.Contains(t, err.Error(), "no kubelet log excerpt: the pod was never scheduled to a node")
		assert.Contains(t, err.Error(), "namespace "+WorkloadNamespace+" still terminating")
		assert.Contains(t, err.Error(), "pod held (unscheduled, ")
		assert.Contains(t, err.Error(), "deletion timestamp")
		assert.Contains(t, err.Error(), "finalizers "+hold)
		release()
		for _, ns := range []string{AgentNamespace, WorkloadNamespace} {
			waitGone(ctx, t, cs, ns)
		}
	})
}

// TestWithoutNodeAccessErrors: the agent has no privilege, dials still work, node methods say why not.
func TestWithoutNodeAccessErrors(t *testing.T) {
	c := &existingCluster{allow: false, nodes: []string{"n1"}, agents: map[string]string{"n1": "a"}, sessions: map[string]*session{}}
	_, err := c.KubeProxyCgroup(1)
	assert.ErrorIs(t, err, ErrNodeChaosNotAllowed)
	_, err = c.NodeExec(context.Background(), 1, "true")
	assert.ErrorIs(t, err, ErrNodeChaosNotAllowed)
	_, err = c.PodCgroup(&corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}})
	assert.ErrorIs(t, err, ErrNodeChaosNotAllowed)
}

func waitGone(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 2*time.Minute, 250*time.Millisecond, "namespace %s deleted", ns)
}
