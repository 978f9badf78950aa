package observe

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
	"github.com/meshchaos/meshchaos/results"
)

type eventLog struct {
	mu     sync.Mutex
	events []results.Event
}

func (l *eventLog) add(e results.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.events {
		out = append(out, e.Kind+" "+e.Object)
	}
	return out
}

func (l *eventLog) find(kind string) (results.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if e.Kind == kind {
			return e, true
		}
	}
	return results.Event{}, false
}

// TestPodWatcherOnRealAPIServer drives a pod's status through the lifecycle an OOM kill produces
// (there is no kubelet here, so the test writes the statuses kubelet would) and checks the
// watcher's events, timestamps and counts.
func TestPodWatcherOnRealAPIServer(t *testing.T) {
	srv := apiserver.StartForTest(t)
	cs, err := kubernetes.NewForConfig(srv.RESTConfig())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const ns = "default"
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	newPod := func(name string) *corev1.Pod {
		no := false
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "cp"}},
			Spec: corev1.PodSpec{AutomountServiceAccountToken: &no,
				Containers: []corev1.Container{{Name: "discovery", Image: "meshchaos.local/cp:dev"}}},
		}
	}
	// A pod that already had an OOM kill before the watcher started: baseline, no events.
	old, err := cs.CoreV1().Pods(ns).Create(ctx, newPod("old"), metav1.CreateOptions{})
	require.NoError(t, err)
	past := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	old.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "discovery", RestartCount: 1,
		State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: past}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, FinishedAt: past}}}}
	_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, old, metav1.UpdateOptions{})
	require.NoError(t, err)
	// A pod the selector excludes.
	other := newPod("other")
	other.Labels = map[string]string{"app": "else"}
	_, err = cs.CoreV1().Pods(ns).Create(ctx, other, metav1.CreateOptions{})
	require.NoError(t, err)

	var log eventLog
	w := NewPodWatcher(cs, ns, "app=cp", log.add)
	require.NoError(t, w.Start(ctx))

	pod, err := cs.CoreV1().Pods(ns).Create(ctx, newPod("cp-0"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := log.find(PodCreated); return ok }, 10*time.Second, 10*time.Millisecond)

	setStatus := func(mutate func(s *corev1.PodStatus)) {
		t.Helper()
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "cp-0", metav1.GetOptions{})
		require.NoError(t, err)
		mutate(&p.Status)
		_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	ready := func(s *corev1.PodStatus, ok bool, at metav1.Time) {
		st := corev1.ConditionFalse
		if ok {
			st = corev1.ConditionTrue
		}
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: at}}
	}
	t0 := metav1.NewTime(time.Now().Truncate(time.Second))
	setStatus(func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "discovery", Ready: true, Image: "x", ImageID: "x",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}}
		ready(s, true, t0)
	})
	// OOM kill: the container is terminated, the pod not ready.
	tKill := metav1.NewTime(t0.Add(3 * time.Second))
	beforeKill := time.Now()
	setStatus(func(s *corev1.PodStatus) {
		s.ContainerStatuses[0].Ready = false
		s.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, StartedAt: t0, FinishedAt: tKill}}
		ready(s, false, tKill)
	})
	// kubelet restarts it: the same termination moves to LastTerminationState.
	tRestart := metav1.NewTime(t0.Add(4 * time.Second))
	setStatus(func(s *corev1.PodStatus) {
		s.ContainerStatuses[0].RestartCount = 1
		s.ContainerStatuses[0].LastTerminationState = s.ContainerStatuses[0].State
		s.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: tRestart}}
	})
	tReady := metav1.NewTime(t0.Add(9 * time.Second))
	setStatus(func(s *corev1.PodStatus) {
		s.ContainerStatuses[0].Ready = true
		ready(s, true, tReady)
	})
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
	// A marker pod after everything else: the watch delivers in order, so once its creation is
	// in the log, nothing of cp-0 can still arrive.
	_, err = cs.CoreV1().Pods(ns).Create(ctx, newPod("cp-marker"), metav1.CreateOptions{})
	require.NoError(t, err)

	want := []string{
		"pod.created default/cp-0",
		"pod.ready default/cp-0",
		"pod.oomkilled default/cp-0/discovery",
		"pod.notready default/cp-0",
		"pod.restarted default/cp-0/discovery",
		"pod.ready default/cp-0",
		"pod.deleted default/cp-0",
		"pod.created default/cp-marker",
	}
	require.Eventually(t, func() bool { return slices.Contains(log.kinds(), want[len(want)-1]) }, 10*time.Second, 10*time.Millisecond, "events: %v", log.kinds())
	assert.Equal(t, want, log.kinds())
	assert.Equal(t, PodStats{Restarts: 1, OOMKills: 1, Ready: 2, NotReady: 1}, w.Stats())

	oom, _ := log.find(PodOOMKilled)
	assert.True(t, oom.At.Equal(tKill.Time), "API timestamp: container finishedAt")
	assert.Equal(t, "reason OOMKilled, exit code 137", oom.Detail)
	require.NotNil(t, oom.ObservedAt)
	// The API time is what the status says (here a made-up instant); the watcher's is when it saw it.
	assert.False(t, oom.ObservedAt.Before(beforeKill), "watcher time is the watcher's own clock")
	assert.WithinDuration(t, beforeKill, *oom.ObservedAt, 5*time.Second)
	rs, _ := log.find(PodRestarted)
	assert.True(t, rs.At.Equal(tRestart.Time))
	assert.Contains(t, rs.Detail, "after OOMKilled")
}
