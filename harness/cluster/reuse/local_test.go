package reuse

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
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/images"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

const testCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.reuse.meshchaos.io}
spec:
  group: reuse.meshchaos.io
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// TestPoolOnALocalCluster lends a real local cluster to three runs: the first leaves what a
// control plane run leaves (pods in its namespaces, a CRD with objects, a cluster role, a root
// certificate ConfigMap published into "default"), all of which the pool deletes and the second
// run does not see; the second leaves a pod in kube-system (nothing a run's cleanup deletes) and
// the third a changed kube-proxy CPU quota: each such cluster is torn down, and the next run gets
// a new one.
func TestPoolOnALocalCluster(t *testing.T) {
	prereq.Root(t, "local clusters")
	require.NoError(t, local.Preflight(), "the local substrate's integration tests need 'make deps' and 'make bins'")
	imagesDir, err := bins.ImagesDir("")
	require.NoError(t, err)
	home, err := os.MkdirTemp("", "mc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	p := New(local.Substrate{Home: home, ImagesDir: imagesDir}, fmt.Sprintf("ru%d", os.Getpid()%100000))
	t.Cleanup(func() { assert.NoError(t, p.Close(context.Background())) })

	up := func(k int) (cluster.Cluster, kubernetes.Interface, string) {
		t.Helper()
		rs := p.Run(k)
		ns := rs.(cluster.Shared).WorkloadNamespace()
		c, err := rs.Up(ctx, cluster.Spec{Nodes: 1, Logf: t.Logf, Namespaces: []string{ns, "cp-system"}})
		require.NoError(t, err)
		cs, err := kubernetes.NewForConfig(c.RESTConfig())
		require.NoError(t, err)
		got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		require.NoError(t, err, "the run's namespace is created for it")
		assert.Equal(t, c.Name(), got.Labels[kube.OwnerLabel])
		return c, cs, ns
	}
	pod := func(cs kubernetes.Interface, ns, name string) {
		t.Helper()
		_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: images.Ref("echo"), ImagePullPolicy: corev1.PullNever}},
				TerminationGracePeriodSeconds: new(int64(30))},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = kube.WaitPod(ctx, cs, ns, name, 2*time.Minute, func(p *corev1.Pod) (bool, error) { return p.Status.Phase == corev1.PodRunning, nil })
		require.NoError(t, err)
	}

	// Run 1 leaves what a control plane's run leaves; the pool deletes it all.
	c1, cs, ns1 := up(1)
	pod(cs, ns1, "workload")
	pod(cs, "cp-system", "controlplane")
	_, err = kube.Apply(ctx, c1.RESTConfig(), []byte(testCRD+"---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: reuse-test}\nrules: []\n"), kube.Owned(c1.Name()))
	require.NoError(t, err)
	_, err = kube.Apply(ctx, c1.RESTConfig(), []byte("apiVersion: reuse.meshchaos.io/v1\nkind: Widget\nmetadata: {name: w, namespace: "+ns1+"}\n"), kube.Owned(c1.Name()))
	require.NoError(t, err)
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "istio-ca-root-cert"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, c1.Down(ctx))
	t.Logf("run 1 given back in %s", time.Since(start).Round(100*time.Millisecond))
	require.Equal(t, Stats{Clusters: 1}, p.Stats(), "run 1's leftovers deleted: the cluster is kept")

	c2, cs, ns2 := up(2)
	assert.Equal(t, Stats{Clusters: 1, Reused: 1}, p.Stats(), "run 2 has run 1's cluster")
	for _, ns := range []string{ns1} {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "run 1's namespace %s is gone: %v", ns, err)
	}
	_, err = cs.CoreV1().ConfigMaps("default").Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the ConfigMap run 1's control plane published is gone: %v", err)
	_, err = cs.RbacV1().ClusterRoles().Get(ctx, "reuse-test", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "run 1's ClusterRole is gone: %v", err)
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		assert.NotEqual(t, ns1, p.Namespace, "no pod of run 1 is left")
		assert.NotEqual(t, "cp-system", p.Namespace, "no pod of run 1's control plane is left")
	}
	// Run 2 leaves a pod where no run's cleanup looks.
	pod(cs, "kube-system", "stray")
	require.NoError(t, c2.Down(ctx))
	st := p.Stats()
	assert.Equal(t, 1, st.Clusters)
	require.Len(t, st.Discarded, 1, "run 2's stray pod: the cluster is torn down")
	assert.Contains(t, st.Discarded[0], "Pod kube-system/stray")
	_ = ns2

	// Run 3 gets a new cluster, and leaves kube-proxy throttled.
	c3, cs, _ := up(3)
	assert.Equal(t, 2, p.Stats().Clusters, "run 3 gets a new cluster")
	_, err = cs.CoreV1().Pods("kube-system").Get(ctx, "stray", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the new cluster holds nothing of run 2: %v", err)
	kp, err := c3.KubeProxyCgroup(1)
	require.NoError(t, err)
	require.NoError(t, kp.SetCPUQuota(0.5))
	require.NoError(t, c3.Down(ctx))
	st = p.Stats()
	require.Len(t, st.Discarded, 2, "run 3's throttled kube-proxy: the cluster is torn down")
	assert.Contains(t, st.Discarded[1], "kube-proxy CPU quota")
}
