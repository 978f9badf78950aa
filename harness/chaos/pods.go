package chaos

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
)

// pollEvery is how often injectors re-read the API while they wait for a fault's proof.
const pollEvery = 100 * time.Millisecond

// livePods lists the pods matching selector that are not being deleted, oldest first (then by
// name), so victims are chosen the same way every run.
func livePods(ctx context.Context, c kubernetes.Interface, ns, selector string) ([]corev1.Pod, error) {
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list pods %q in namespace %s: %w", selector, ns, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := out[i].CreationTimestamp, out[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// podReady is kube's readiness rule without the transition time.
func podReady(p *corev1.Pod) bool {
	ok, _ := kube.PodReady(p)
	return ok
}

// podGone tells whether the pod with this name and UID no longer exists (a pod of the same name
// with another UID, as a StatefulSet makes, is a replacement).
func podGone(ctx context.Context, c kubernetes.Interface, ns, name string, uid types.UID) (bool, error) {
	p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	}
	return p.UID != uid, nil
}

// deletePod deletes the pod at once and waits until it is gone.
func deletePod(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, timeout time.Duration) error {
	zero := int64(0)
	err := c.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w: delete it by hand (kubectl delete pod)", pod.Namespace, pod.Name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, pollEvery, timeout, true, func(ctx context.Context) (bool, error) {
		return podGone(ctx, c, pod.Namespace, pod.Name, pod.UID)
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s still there %s after its deletion (%w): inspect it with kubectl describe", pod.Namespace, pod.Name, timeout, err)
	}
	return nil
}

// pause waits d, or until ctx ends (then it returns ctx's error).
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// nodeIndex is the 1-based index of the named node in c (cluster.Cluster's numbering).
func nodeIndex(c cluster.Cluster, nodeName string) (int, error) {
	for i, n := range c.Nodes() {
		if n == nodeName {
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("node %q is not a node of cluster %s (nodes %v): is the pod scheduled, and on this cluster?", nodeName, c.Name(), c.Nodes())
}

// orDefault returns d when v is zero.
func orDefault[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}
