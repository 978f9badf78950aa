// Package kube holds the Kubernetes helpers the harness needs, written once: apply of
// multi-document YAML with mutators (pin to a node, limits), CRD installation, and waits built on
// client-go's wait package (no hand-written polling loops elsewhere), with one pod and one
// Deployment readiness rule.
package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	memory "k8s.io/client-go/discovery/cached"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Decode splits multi-document YAML into objects.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode manifest: %w", err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// Mutator adjusts a decoded object before it is applied; an error names what did not fit.
type Mutator func(o *unstructured.Unstructured) error

// Apply creates every object in data, or updates it if it exists, after the mutators.
func Apply(ctx context.Context, cfg *rest.Config, data []byte, mutate ...Mutator) error {
	objs, err := Decode(data)
	if err != nil {
		return err
	}
	for _, o := range objs {
		for _, m := range mutate {
			if err := m(o); err != nil {
				return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
		}
		_, err = ri.Create(ctx, o, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cur, gerr := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return fmt.Errorf("apply %s %s: %w", gvk.Kind, o.GetName(), gerr)
			}
			o.SetResourceVersion(cur.GetResourceVersion())
			_, err = ri.Update(ctx, o, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates the CRDs in yaml (those that exist are kept) and waits until the API
// server serves every one of them (condition Established).
func InstallCRDs(ctx context.Context, cfg *rest.Config, yaml []byte) error {
	objs, err := Decode(yaml)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	for _, o := range objs {
		if _, err := dyn.Resource(crdGVR).Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("install CRD %s: %w", o.GetName(), err)
		}
	}
	for _, o := range objs {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			cur, err := dyn.Resource(crdGVR).Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", o.GetName(), err)
		}
	}
	return nil
}

// workloadKinds carry a pod template at spec.template.
var workloadKinds = map[string]bool{"Deployment": true, "DaemonSet": true, "StatefulSet": true, "ReplicaSet": true, "Job": true}

// podSpecPath is where o's pod spec lives, or nil when o has none.
func podSpecPath(o *unstructured.Unstructured) []string {
	switch {
	case workloadKinds[o.GetKind()]:
		return []string{"spec", "template", "spec"}
	case o.GetKind() == "Pod":
		return []string{"spec"}
	}
	return nil
}

// PinToNode sets a nodeSelector label=value on every pod template and pod.
func PinToNode(label, value string) Mutator {
	return func(o *unstructured.Unstructured) error {
		p := podSpecPath(o)
		if p == nil {
			return nil
		}
		return unstructured.SetNestedStringMap(o.Object, map[string]string{label: value}, append(p, "nodeSelector")...)
	}
}

// CPULimit sets a CPU limit on the named container of every pod template and pod that has it;
// "" leaves the manifest's own.
func CPULimit(container, qty string) Mutator { return limit("cpu", container, qty) }

// MemoryLimit sets a memory limit on the named container, as CPULimit.
func MemoryLimit(container, qty string) Mutator { return limit("memory", container, qty) }

// limit sets resources.limits[res]; a pod spec without the container is an error, so a
// misspelt container name cannot leave a fault without its limit.
func limit(res, container, qty string) Mutator {
	return func(o *unstructured.Unstructured) error {
		p := podSpecPath(o)
		if p == nil || qty == "" {
			return nil
		}
		if _, err := resource.ParseQuantity(qty); err != nil {
			return fmt.Errorf("%s limit %q: %w", res, qty, err)
		}
		cs, _, err := unstructured.NestedSlice(o.Object, append(p, "containers")...)
		if err != nil {
			return err
		}
		found := false
		for i := range cs {
			c, ok := cs[i].(map[string]any)
			if !ok || c["name"] != container {
				continue
			}
			if err := unstructured.SetNestedField(c, qty, "resources", "limits", res); err != nil {
				return err
			}
			cs[i], found = c, true
		}
		if !found {
			return fmt.Errorf("no container %q to set the %s limit on", container, res)
		}
		return unstructured.SetNestedSlice(o.Object, cs, append(p, "containers")...)
	}
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

// ReadyCondition is the pod's Ready condition, nil before kubelet has reported one.
func ReadyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// PodReady is the one pod readiness rule: the Ready condition is True; it also returns when the
// condition last changed (the API keeps whole seconds).
func PodReady(p *corev1.Pod) (bool, time.Time) {
	c := ReadyCondition(p)
	if c == nil {
		return false, time.Time{}
	}
	return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
}

// NodeReady is the one node readiness rule: the Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodIPs lists the IPs of the ready pods matching selector, sorted; none is an error.
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
	sort.Strings(ips)
	return ips, nil
}

// WaitPod waits until cond holds for the named pod and returns the pod as it was then.
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

// LastTermination is a container's most recent termination: its state if it is terminated now,
// else its last state (nil when it never terminated). container "" means the first container.
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

// Poll runs cond every interval (and at once) until it holds, fails or ctx ends.
func Poll(ctx context.Context, interval time.Duration, cond func(ctx context.Context) (bool, error)) error {
	return wait.PollUntilContextCancel(ctx, interval, true, cond)
}
