package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakePod is a pod of app=echo created age seconds ago, owned by a ReplicaSet if controlled.
func fakePod(name string, age int, controlled bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
		Labels:            map[string]string{"app": "echo"},
		CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Duration(age) * time.Second))}}
	if controlled {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "echo-rs", UID: "rs", Controller: &yes}}
	}
	return p
}

// replaceOnDelete makes the fake clientset act as a ReplicaSet: every deleted pod gets a
// successor with a new name and UID.
func replaceOnDelete(cs *fake.Clientset) {
	n := 0
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n++
		_ = cs.Tracker().Add(fakePod(fmt.Sprintf("echo-new%d", n), 0, true))
		return false, nil, nil
	})
}

func TestPodKillDeletesOldestAndProvesReplacement(t *testing.T) {
	terminating := fakePod("echo-dying", 100, true)
	now := metav1.Now()
	terminating.DeletionTimestamp = &now
	terminating.Finalizers = []string{"test/hold"}
	cs := fake.NewClientset(fakePod("echo-young", 1, true), fakePod("echo-old", 50, true), fakePod("echo-mid", 10, true), terminating,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default", UID: "o", Labels: map[string]string{"app": "other"}}})
	replaceOnDelete(cs)
	k := &PodKill{Client: cs, Namespace: "default", Selector: "app=echo", Count: 2}
	assert.Equal(t, "pod-kill/default/app=echo", k.Name())

	ev, err := k.Inject(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2.0, ev.Values["killed"])
	assert.Equal(t, 2.0, ev.Values["replaced"])
	assert.Contains(t, ev.Summary, "echo-old")
	assert.Contains(t, ev.Summary, "echo-mid")
	pods, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=echo"})
	require.NoError(t, err)
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	assert.ElementsMatch(t, []string{"echo-young", "echo-dying", "echo-new1", "echo-new2"}, names, "the two oldest live pods died, the terminating one was not chosen")

	ev, err = k.Clear(context.Background())
	require.NoError(t, err)
	assert.NotEmpty(t, ev.Summary)
}

// A pod without a controller has no replacement to wait for; its disappearance is the proof.
func TestPodKillOfBarePod(t *testing.T) {
	cs := fake.NewClientset(fakePod("bare", 5, false))
	ev, err := (&PodKill{Client: cs, Namespace: "default", Selector: "app=echo"}).Inject(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1.0, ev.Values["killed"])
	assert.Zero(t, ev.Values["replaced"])
	_, err = cs.CoreV1().Pods("default").Get(context.Background(), "bare", metav1.GetOptions{})
	assert.Error(t, err, "the pod is gone")
}

func TestPodKillFailsWithoutProof(t *testing.T) {
	// A controlled pod whose controller never replaces it: the kill is not proven.
	cs := fake.NewClientset(fakePod("echo-a", 5, true))
	_, err := (&PodKill{Client: cs, Namespace: "default", Selector: "app=echo", Timeout: 300 * time.Millisecond}).Inject(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "replacement")

	// A pod that does not go (the fake ignores the delete, as a finalizer would hold it).
	cs = fake.NewClientset(fakePod("echo-a", 5, false))
	cs.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, nil })
	_, err = (&PodKill{Client: cs, Namespace: "default", Selector: "app=echo", Timeout: 300 * time.Millisecond}).Inject(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "echo-a still exist")

	_, err = (&PodKill{Client: cs, Namespace: "default", Selector: "app=echo", Count: 2}).Inject(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "lower Count")
}

// On a real cluster: the echo pod's UID is gone from the API, the ReplicaSet's replacement
// runs, and the Deployment is available again.
func TestPodKillOnCluster(t *testing.T) {
	c, cs := sharedCluster(t, "pod-kill")
	deployEcho(t, c, cs, "pod-kill", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before, err := cs.CoreV1().Pods("pod-kill").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
	require.NoError(t, err)
	require.Len(t, before.Items, 1)
	old := before.Items[0]

	zero := int64(0)
	ev, err := (&PodKill{Client: cs, Namespace: "pod-kill", Selector: "app=echo", Grace: &zero}).Inject(ctx)
	require.NoError(t, err)
	t.Log(ev.Summary)
	assert.Equal(t, 1.0, ev.Values["killed"])
	assert.Equal(t, 1.0, ev.Values["replaced"])

	_, err = cs.CoreV1().Pods("pod-kill").Get(ctx, old.Name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the killed pod is gone: %v", err)
	require.Eventually(t, func() bool {
		after, err := cs.CoreV1().Pods("pod-kill").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		require.NoError(t, err)
		return len(after.Items) == 1 && after.Items[0].UID != old.UID && podReady(&after.Items[0])
	}, time.Minute, 100*time.Millisecond, "a new pod serves")
}
