package cli

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/existing"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/kube"
	imgs "github.com/meshchaos/meshchaos/images"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

// TestExistingDownAfterKill brings a run up through the existing substrate on a local cluster
// used as someone else's (its kubeconfig only), kills it without its teardown (the provider
// dropped, Down never called), and proves that 'cluster down --substrate existing NAME' removes
// everything the run made — namespaces and their pods, the agent, a cluster-scoped object, the
// node labels it set — and nothing of the cluster's own.
func TestExistingDownAfterKill(t *testing.T) {
	prereq.Integration(t)
	require.NoError(t, local.Preflight())
	imagesDir, err := bins.ImagesDir("")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	lc, err := local.Substrate{Home: t.TempDir(), ImagesDir: imagesDir}.Up(ctx, cluster.Spec{Name: fmt.Sprintf("xd%d", os.Getpid()%100000), Nodes: 2, Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Down(context.Background()) })
	kubeconfig := lc.(*local.Cluster).KubeconfigPath()
	cfg := lc.RESTConfig()
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	// The cluster's own: a namespace with a pod, a ClusterRole, labels on its nodes.
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "staging"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().Pods("staging").Create(ctx, sleeper("app"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.Apply(ctx, cfg, []byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: staging-reader}\nrules: []\n"))
	require.NoError(t, err)
	// Without the owner's node labels a run without node access labels nodes itself.
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		_, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{%q:null,"team":"staging"}}}`, cluster.NodeLabel), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	before := nodeMeta(ctx, t, cs)

	const name = "killed-run"
	p := existing.Substrate{Kubeconfig: kubeconfig}
	_, err = p.Up(ctx, cluster.Spec{Name: name, Nodes: 2, Logf: t.Logf, Namespaces: []string{existing.WorkloadNamespace, "meshchaos-system"}})
	require.NoError(t, err)
	_, err = kube.Apply(ctx, cfg, []byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: killed-run-cp}\nrules: []\n"), kube.Owned(name))
	require.NoError(t, err)
	_, err = cs.CoreV1().Pods(existing.WorkloadNamespace).Create(ctx, sleeper("echo"), metav1.CreateOptions{})
	require.NoError(t, err)
	// Killed: the run's cluster is dropped, its Down never called.

	code, out := run(t, "cluster", "list", "--substrate", "existing", "--kubeconfig", kubeconfig)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, name+" (existing): namespaces "+existing.AgentNamespace+", meshchaos-system, "+existing.WorkloadNamespace)
	assert.Contains(t, out, "ClusterRole killed-run-cp")
	assert.NotContains(t, out, "staging")

	start := time.Now()
	code, out = run(t, "cluster", "down", "--substrate", "existing", "--kubeconfig", kubeconfig, name)
	t.Logf("cluster down --substrate existing %s in %s:\n%s", name, time.Since(start).Round(100*time.Millisecond), out)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "removed run "+name)

	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: existing.RunLabel + "=" + name})
	require.NoError(t, err)
	assert.Empty(t, nss.Items, "the run's namespaces are gone, not terminating")
	_, err = cs.RbacV1().ClusterRoles().Get(ctx, "killed-run-cp", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the run's ClusterRole is gone: %v", err)
	assert.Equal(t, before, nodeMeta(ctx, t, cs), "the nodes' labels and annotations are as before the run")
	_, err = cs.RbacV1().ClusterRoles().Get(ctx, "staging-reader", metav1.GetOptions{})
	assert.NoError(t, err, "the cluster's ClusterRole stays")
	_, err = cs.CoreV1().Pods("staging").Get(ctx, "app", metav1.GetOptions{})
	assert.NoError(t, err, "the cluster's pod stays")

	code, out = run(t, "cluster", "down", "--substrate", "existing", "--kubeconfig", kubeconfig, name)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "run "+name+" left nothing on this cluster")
}

// sleeper is a pod that runs a meshchaos image as it is (nothing is pulled).
func sleeper(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: imgs.Ref("echo"), ImagePullPolicy: corev1.PullNever}}}}
}

// nodeMeta is every node's labels and annotations but the ones that change on their own.
func nodeMeta(ctx context.Context, t *testing.T, cs kubernetes.Interface) map[string][2]map[string]string {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string][2]map[string]string{}
	for _, n := range nodes.Items {
		ann := map[string]string{}
		for k, v := range n.Annotations {
			if k != "node.alpha.kubernetes.io/ttl" && k != "volumes.kubernetes.io/controller-managed-attach-detach" {
				ann[k] = v
			}
		}
		out[n.Name] = [2]map[string]string{n.Labels, ann}
	}
	return out
}
