package runner

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/results"
)

// TestExecuteCountsOOMKillsFromPodWatcher: the pod watcher's events land on the timeline and its
// counts in controlPlaneStats, where the oomKills check reads them. There is no kubelet on the
// test API server, so the phase writes the status kubelet would after an OOM kill and restart.
func TestExecuteCountsOOMKillsFromPodWatcher(t *testing.T) {
	srv := apiserver.StartForTest(t)
	cs, err := kubernetes.NewForConfig(srv.RESTConfig())
	require.NoError(t, err)
	ctx := context.Background()
	_, err = cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	no := false
	exp := Experiment{
		Name: "pod-oom",
		Setup: func(ctx context.Context, r *Run) error {
			if _, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Labels: map[string]string{"app": "cp"}},
				Spec:       corev1.PodSpec{AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "discovery", Image: "x"}}},
			}, metav1.CreateOptions{}); err != nil {
				return err
			}
			return r.Measure(&observe.Pods{Client: cs, Namespace: "default", Selector: "app=cp", As: observe.RoleControlPlane})
		},
		Phases: []Phase{{Name: "chaos", Do: func(ctx context.Context, r *Run) error {
			r.Event("chaos.injected", "cp-0", "memory hog")
			p, err := cs.CoreV1().Pods("default").Get(ctx, "cp-0", metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "discovery", RestartCount: 1, Image: "x", ImageID: "x",
				State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, FinishedAt: now}}}}
			if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				return err
			}
			// Wait until the watcher has seen it (the phase ends observation).
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if s := r.Summary(); s.ControlPlaneStats != nil && s.ControlPlaneStats.OOMKills > 0 {
					return nil
				}
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}}},
		Checks: []Check{OOMKills(results.GE, 1), Restarts(results.EQ, 1)},
	}
	s, err := Execute(ctx, exp, Options{Dir: t.TempDir(), Progress: NewProgress(&bytes.Buffer{})})
	require.NoError(t, err)
	assert.Equal(t, results.VerdictPass, s.Verdict, "%s %v", s.Error, s.Checks)
	var kinds []string
	for _, e := range s.Events {
		if e.Kind == observe.PodOOMKilled || e.Kind == observe.PodRestarted {
			kinds = append(kinds, e.Kind)
			assert.NotNil(t, e.ObservedAt)
		}
	}
	assert.Equal(t, []string{observe.PodOOMKilled, observe.PodRestarted}, kinds)
}
