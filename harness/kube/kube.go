// Package kube holds the Kubernetes helpers the harness needs, written once: apply of
// multi-document YAML with mutators (pin to a node, limits), CRD installation, and waits built on
// client-go's wait package (no hand-written polling loops elsewhere), with one pod and one
// Deployment readiness rule.
package kube

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	cpmanifests "github.com/meshchaos/meshchaos/controlplane/manifests"
)

type Mutator = func(*unstructured.Unstructured)

func Apply(ctx context.Context, cfg *rest.Config, data []byte, mutate ...Mutator) error {
	objs, err := cpmanifests.Decode(data)
	if err != nil {
		return err
	}
	var docs []string
	for _, o := range objs {
		for _, m := range mutate {
			m(o)
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		docs = append(docs, string(b))
	}
	return cpmanifests.Apply(ctx, cfg, []byte(strings.Join(docs, "\n---\n")))
}

func InstallCRDs(ctx context.Context, cfg *rest.Config, yaml []byte) error {
	return cpmanifests.InstallCRDs(ctx, cfg)
}

func PinToNode(label, value string) func(*unstructured.Unstructured) {
	return func(o *unstructured.Unstructured) {
		if o.GetKind() == "Deployment" {
			_ = unstructured.SetNestedStringMap(o.Object, map[string]string{label: value}, "spec", "template", "spec", "nodeSelector")
		}
	}
}

func setLimit(res, container, qty string) func(*unstructured.Unstructured) {
	return func(o *unstructured.Unstructured) {
		if o.GetKind() != "Deployment" || qty == "" {
			return
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for i := range cs {
			c := cs[i].(map[string]any)
			if c["name"] == container {
				_ = unstructured.SetNestedField(c, qty, "resources", "limits", res)
			}
			cs[i] = c
		}
		_ = unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")
	}
}

func CPULimit(container, qty string) func(*unstructured.Unstructured) {
	return setLimit("cpu", container, qty)
}
func MemoryLimit(container, qty string) func(*unstructured.Unstructured) {
	return setLimit("memory", container, qty)
}

// WaitDeploymentReady waits until every replica of a Deployment is available. On timeout the
// error says what its pods are doing.
func WaitDeploymentReady(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	var d *appsv1.Deployment
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		d = got
		return d.Spec.Replicas != nil && d.Status.ObservedGeneration >= d.Generation &&
			d.Status.AvailableReplicas == *d.Spec.Replicas && d.Status.UpdatedReplicas == *d.Spec.Replicas, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("deployment %s/%s not available after %s: %s", ns, name, timeout, podStates(context.WithoutCancel(ctx), cs, ns, d))
	}
	return nil
}

// podStates summarises the pods of a Deployment for an error message.
func podStates(ctx context.Context, cs kubernetes.Interface, ns string, d *appsv1.Deployment) string {
	if d == nil || d.Spec.Selector == nil {
		return "deployment not found"
	}
	sel := metav1.FormatLabelSelector(d.Spec.Selector)
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err.Error()
	}
	if len(pods.Items) == 0 {
		return "no pods (scheduler or controller-manager not running?)"
	}
	var s string
	for _, p := range pods.Items {
		s += fmt.Sprintf("[%s %s node=%q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				s += fmt.Sprintf(" %s: %s", c.Type, c.Message)
			}
		}
		for _, st := range p.Status.ContainerStatuses {
			if w := st.State.Waiting; w != nil {
				s += fmt.Sprintf(" %s waiting: %s %s", st.Name, w.Reason, w.Message)
			}
			if t := st.LastTerminationState.Terminated; t != nil {
				s += fmt.Sprintf(" %s last exit: %s (%d)", st.Name, t.Reason, t.ExitCode)
			}
		}
		s += "] "
	}
	return s
}

func PodReady(p *corev1.Pod) (bool, time.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

func PodIPs(ctx context.Context, cs kubernetes.Interface, ns, selector string) ([]string, error) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, p := range pods.Items {
		if ok, _ := PodReady(&p); ok && p.Status.PodIP != "" {
			ips = append(ips, p.Status.PodIP)
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("no ready pod matches %s in %s", selector, ns)
	}
	return ips, nil
}

func WaitPod(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration, cond func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // transient: the API may be busy
		}
		last = p
		return cond(p)
	})
	if err != nil {
		phase := "never read"
		if last != nil {
			phase = string(last.Status.Phase)
		}
		return nil, fmt.Errorf("pod %s/%s: condition not met within %s (phase %s): %w", ns, name, timeout, phase, err)
	}
	return last, nil
}

func LastTermination(p *corev1.Pod, container string) *corev1.ContainerStateTerminated {
	for _, st := range p.Status.ContainerStatuses {
		if container != "" && st.Name != container {
			continue
		}
		if st.State.Terminated != nil {
			return st.State.Terminated
		}
		return st.LastTerminationState.Terminated
	}
	return nil
}

func Poll(ctx context.Context, interval time.Duration, cond func(ctx context.Context) (bool, error)) error {
	return wait.PollUntilContextCancel(ctx, interval, true, cond)
}
