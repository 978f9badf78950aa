package kube

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PodCondition returns the pod's condition of type t, nil if the pod reports none.
func PodCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// PodReady reports whether the pod's Ready condition is True, and when that condition last
// changed (zero if the pod has no Ready condition yet).
func PodReady(p *corev1.Pod) (bool, time.Time) {
	c := PodCondition(p, corev1.PodReady)
	if c == nil {
		return false, time.Time{}
	}
	return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// LastTermination returns how the named container (regular or init) last ended: its current
// state if it is terminated (dead, not restarted yet), else its last state if that one is
// terminated (already restarted); nil if it never ended or the pod has no such container.
func LastTermination(p *corev1.Pod, container string) *corev1.ContainerStateTerminated {
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for _, st := range list {
			if st.Name != container {
				continue
			}
			if st.State.Terminated != nil {
				return st.State.Terminated
			}
			return st.LastTerminationState.Terminated
		}
	}
	return nil
}

// PodIPs returns the IPs of the running pods matching selector in namespace ns, sorted, leaving
// out pods being deleted; an error if there is none.
func PodIPs(ctx context.Context, cs kubernetes.Interface, ns, selector string) ([]string, error) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list pods %s in %s: %w", selector, ns, err)
	}
	var ips []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			ips = append(ips, p.Status.PodIP)
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("no running pod with an IP matches %s in %s (%d pod(s) match; wait for them first, e.g. with WaitPodsReady)",
			selector, ns, len(pods.Items))
	}
	// Numeric order: 10.244.0.9 before 10.244.0.10.
	slices.SortFunc(ips, func(a, b string) int {
		pa, ea := netip.ParseAddr(a)
		pb, eb := netip.ParseAddr(b)
		if ea != nil || eb != nil {
			return cmp.Compare(a, b)
		}
		return pa.Compare(pb)
	})
	return ips, nil
}

// deploymentReady mirrors kubectl rollout status: the controller has seen the latest spec, every
// replica runs it and is available, and no old replica is left.
func deploymentReady(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want &&
		s.AvailableReplicas == want && s.ReadyReplicas == want
}
