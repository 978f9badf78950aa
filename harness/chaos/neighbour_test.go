package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/images"
)

func TestNoisyNeighbourPodIsPinnedAndUnlimited(t *testing.T) {
	n := &NoisyNeighbour{Node: 2, CPUs: 1.5}
	assert.Equal(t, "noisy-neighbour/node2", n.Name())
	p := n.podSpec()
	assert.Equal(t, "default", p.Namespace)
	assert.Equal(t, map[string]string{cluster.NodeLabel: "2"}, p.Spec.NodeSelector)
	c := p.Spec.Containers[0]
	assert.Equal(t, images.Ref("hog"), c.Image)
	assert.Equal(t, []string{"--cpus", "1.5"}, c.Args)
	assert.Empty(t, c.Resources.Limits, "a neighbour has no CPU limit")
	assert.Equal(t, "1500m", c.Resources.Requests.Cpu().String(), "it competes with the weight of what it burns")

	n.BestEffort = true
	assert.Empty(t, n.podSpec().Spec.Containers[0].Resources.Requests)

	// The download shape serves instead of burning; the same pod otherwise.
	n = &NoisyNeighbour{Node: 2, CPUs: 1.5, Shape: ShapeDownload}
	c = n.podSpec().Spec.Containers[0]
	assert.Equal(t, []string{"--serve", ":8080"}, c.Args)
	assert.Equal(t, "1500m", c.Resources.Requests.Cpu().String())
	_, err := (&NoisyNeighbour{Cluster: &fakeCluster{node: "n1"}, Node: 1, CPUs: 1, Shape: "disk"}).Inject(context.Background())
	assert.ErrorContains(t, err, `shape "disk"`)
}

// statusOnCreate makes the fake apiserver store every created pod with status st, as the
// scheduler and kubelet would report it.
func statusOnCreate(cs *fake.Clientset, st corev1.PodStatus) {
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).Status = st
		return false, nil, nil
	})
}

// A hog that cannot run fails Inject at once, says why, and is removed again.
func TestNoisyNeighbourFailsFastAndCleansUp(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]struct {
		status corev1.PodStatus
		want   string
	}{
		"unschedulable": {corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}},
			"Insufficient cpu"},
		"no image": {corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "hog", Image: "meshchaos.local/hog:dev",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}}}},
			"make images"},
	} {
		t.Run(name, func(t *testing.T) {
			cs := fake.NewClientset()
			statusOnCreate(cs, c.status)
			n := &NoisyNeighbour{Cluster: &fakeCluster{node: "n1"}, Client: cs, Node: 1, CPUs: 1, Timeout: 5 * time.Second}
			_, err := n.Inject(ctx)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			_, err = cs.CoreV1().Pods("default").Get(ctx, "hog-node1", metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "the failed hog is deleted: %v", err)
		})
	}
}

func TestNoisyNeighbourRefusesBadInput(t *testing.T) {
	cs := fake.NewClientset()
	_, err := (&NoisyNeighbour{Cluster: &fakeCluster{node: "n1"}, Client: cs, Node: 2, CPUs: 1}).Inject(context.Background())
	assert.ErrorContains(t, err, "nodes 1 to 1")
	_, err = (&NoisyNeighbour{Cluster: &fakeCluster{node: "n1"}, Client: cs, Node: 1}).Inject(context.Background())
	assert.ErrorContains(t, err, "CPUs 0")
	ev, err := (&NoisyNeighbour{}).Clear(context.Background())
	require.NoError(t, err)
	assert.Contains(t, ev.Summary, "nothing to clear")
}

func TestPodStartingReadsTheStatus(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "hog"}}}}
	running, stuck := podStarting(p)
	assert.False(t, running)
	assert.Empty(t, stuck, "a fresh pod may still start")
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "hog",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	running, stuck = podStarting(p)
	assert.True(t, running)
	assert.Empty(t, stuck)
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}
	_, stuck = podStarting(p)
	assert.Contains(t, stuck, "kubectl logs")
}

// On a real cluster: the hog runs on node 1 and the node's pods (kubelet's kubepods cgroup) use
// the CPU it burns; Clear removes the pod and its cgroup.
func TestNoisyNeighbourOnCluster(t *testing.T) {
	c, cs := sharedCluster(t, "noisy")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := &NoisyNeighbour{Cluster: c, Client: cs, Node: 1, CPUs: 0.5, Namespace: "noisy", Window: time.Second}
	ev, err := n.Inject(ctx)
	require.NoError(t, err)
	t.Log(ev.Summary)
	assert.GreaterOrEqual(t, ev.Values["cpus"], 0.25)
	assert.LessOrEqual(t, ev.Values["cpus"], 0.7, "a duty cycle, not a whole CPU")

	pod, err := cs.CoreV1().Pods("noisy").Get(ctx, "hog-node1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, c.Nodes()[0], pod.Spec.NodeName)
	assert.Equal(t, corev1.PodQOSBurstable, pod.Status.QOSClass, "requests CPU, no limit")
	podsGroup, err := c.PodsCgroup(1)
	require.NoError(t, err)
	u0, err := podsGroup.CPUUsage()
	require.NoError(t, err)
	t0 := time.Now()
	var rate float64
	require.Eventually(t, func() bool {
		u1, err := podsGroup.CPUUsage()
		require.NoError(t, err)
		rate = (u1 - u0).Seconds() / time.Since(t0).Seconds()
		return time.Since(t0) > time.Second && rate >= 0.25
	}, 20*time.Second, 200*time.Millisecond, "node 1's pods burn the hog's CPU")
	t.Logf("node 1's pods: %.2f CPU", rate)
	hogGroup, err := c.PodCgroup(pod)
	require.NoError(t, err)

	ev, err = n.Clear(ctx)
	require.NoError(t, err)
	t.Log(ev.Summary)
	assert.Greater(t, ev.Values["cpuSeconds"], 0.25)
	_, err = cs.CoreV1().Pods("noisy").Get(ctx, "hog-node1", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the hog pod is gone: %v", err)
	require.Eventually(t, func() bool { return !hogGroup.Exists() }, 30*time.Second, 100*time.Millisecond, "kubelet removes the hog's cgroup")
}

// The download shape on a real cluster: the serving hog's cgroup burns CPU streaming 150 MiB
// files to a client pod; Clear removes both pods.
func TestNoisyNeighbourDownloadOnCluster(t *testing.T) {
	c, cs := sharedCluster(t, "noisy-dl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := &NoisyNeighbour{Cluster: c, Client: cs, Node: 1, CPUs: 0.2, Shape: ShapeDownload, Streams: 2, Namespace: "noisy-dl", Window: time.Second}
	ev, err := n.Inject(ctx)
	require.NoError(t, err)
	t.Log(ev.Summary)
	assert.GreaterOrEqual(t, ev.Values["cpus"], 0.1, "serving downloads costs the serving pod CPU")
	client, err := cs.CoreV1().Pods("noisy-dl").Get(ctx, "hog-client-node1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.PodRunning, client.Status.Phase)
	assert.Contains(t, client.Spec.Containers[0].Args, "--download")

	ev, err = n.Clear(ctx)
	require.NoError(t, err)
	t.Log(ev.Summary)
	for _, name := range []string{"hog-node1", "hog-client-node1"} {
		_, err = cs.CoreV1().Pods("noisy-dl").Get(ctx, name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s is gone: %v", name, err)
	}
}
