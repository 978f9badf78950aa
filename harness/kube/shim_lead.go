package kube

// TEMPORARY: stands in for the harness/kube helpers being written on branch k-kube; deleted at
// the merge.

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	cpmanifests "github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
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

func WaitDeploymentReady(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	return local.WaitDeploymentReady(ctx, cs, ns, name, timeout)
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
	deadline := time.Now().Add(timeout)
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			ok, cerr := cond(p)
			if cerr != nil {
				return nil, cerr
			}
			if ok {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pod %s/%s: condition not met within %s", ns, name, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
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
