package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// describeTimeout bounds the API calls that explain a timeout.
const describeTimeout = 5 * time.Second

// WaitPod waits until cond holds for pod ns/name and returns the pod it held for. cond sees the
// pod when the wait starts and after every change to it (a watch, no poll interval); while the
// pod does not exist cond is not called. An error from cond ends the wait with that error. On
// timeout the error (wrapping context.DeadlineExceeded) names the pod and shows its last state.
func WaitPod(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration, cond func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	var got *corev1.Pod
	lw := listWatch(cs.CoreV1().Pods(ns).List, cs.CoreV1().Pods(ns).Watch, fields.OneTermEqualSelector("metadata.name", name).String(), "")
	last, err := until(ctx, lw, cs, &corev1.Pod{}, timeout, func(pods []*corev1.Pod) (bool, error) {
		if len(pods) == 0 {
			return false, nil
		}
		ok, err := cond(pods[0])
		if ok {
			got = pods[0]
		}
		return ok, err
	})
	switch {
	case err == nil:
		return got, nil
	case !timedOut(err):
		return nil, fmt.Errorf("wait for pod %s/%s: %w", ns, name, err)
	case len(last) == 0:
		return nil, fmt.Errorf("pod %s/%s not found within %s: %w", ns, name, timeout, err)
	}
	return nil, fmt.Errorf("pod %s/%s: condition not met within %s; last seen: %s: %w",
		ns, name, timeout, describePods(ctx, cs, last), err)
}

// WaitPodsReady waits until at least n pods matching selector in ns are Ready (and not being
// deleted) and returns those, sorted by name. On timeout the error says which pods are not
// ready and why.
func WaitPodsReady(ctx context.Context, cs kubernetes.Interface, ns, selector string, n int, timeout time.Duration) ([]*corev1.Pod, error) {
	var ready []*corev1.Pod
	lw := listWatch(cs.CoreV1().Pods(ns).List, cs.CoreV1().Pods(ns).Watch, "", selector)
	last, err := until(ctx, lw, cs, &corev1.Pod{}, timeout, func(pods []*corev1.Pod) (bool, error) {
		ready = readyPods(pods)
		return len(ready) >= n, nil
	})
	switch {
	case err == nil:
		return ready, nil
	case !timedOut(err):
		return nil, fmt.Errorf("wait for %d ready pod(s) %s in %s: %w", n, selector, ns, err)
	}
	return nil, fmt.Errorf("%d of %d pod(s) %s in %s ready after %s: %s: %w",
		len(readyPods(last)), n, selector, ns, timeout, describePods(ctx, cs, last), err)
}

func readyPods(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if ok, _ := PodReady(p); ok && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// WaitDeploymentReady waits until Deployment ns/name has rolled out: the controller has seen
// its latest spec and every replica is updated, ready and available, with no old replica left.
// On timeout the error says what the Deployment reports and what its pods are doing (phase,
// conditions, container waiting reasons, recent events).
func WaitDeploymentReady(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	dc := cs.AppsV1().Deployments(ns)
	lw := listWatch(dc.List, dc.Watch, fields.OneTermEqualSelector("metadata.name", name).String(), "")
	last, err := until(ctx, lw, cs, &appsv1.Deployment{}, timeout, func(ds []*appsv1.Deployment) (bool, error) {
		return len(ds) == 1 && deploymentReady(ds[0]), nil
	})
	switch {
	case err == nil:
		return nil
	case !timedOut(err):
		return fmt.Errorf("wait for deployment %s/%s: %w", ns, name, err)
	case len(last) == 0:
		return fmt.Errorf("deployment %s/%s not found within %s (was it applied?): %w", ns, name, timeout, err)
	}
	d := last[0]
	return fmt.Errorf("deployment %s/%s not ready after %s: %s; pods: %s: %w",
		ns, name, timeout, describeDeployment(d), describeSelected(ctx, cs, ns, d.Spec.Selector), err)
}

// WaitNodesReady waits until at least n nodes are Ready. On timeout the error lists the nodes
// that are not, with the reason their Ready condition gives.
func WaitNodesReady(ctx context.Context, cs kubernetes.Interface, n int, timeout time.Duration) error {
	nc := cs.CoreV1().Nodes()
	lw := listWatch(nc.List, nc.Watch, "", "")
	count := func(nodes []*corev1.Node) int {
		return len(slices.DeleteFunc(slices.Clone(nodes), func(n *corev1.Node) bool { return !NodeReady(n) }))
	}
	last, err := until(ctx, lw, cs, &corev1.Node{}, timeout, func(nodes []*corev1.Node) (bool, error) {
		return count(nodes) >= n, nil
	})
	switch {
	case err == nil:
		return nil
	case !timedOut(err):
		return fmt.Errorf("wait for %d ready node(s): %w", n, err)
	}
	var notReady []string
	for _, nd := range last {
		if NodeReady(nd) {
			continue
		}
		s := nd.Name + " NotReady"
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady {
				s += fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
			}
		}
		notReady = append(notReady, s)
	}
	return fmt.Errorf("%d of %d node(s) ready after %s (%d registered; not ready: %s): %w",
		count(last), n, timeout, len(last), strings.Join(notReady, "; "), err)
}

// listWatch lists and watches through typed (or dynamic) client functions, restricted to the
// field and label selectors ("" for none). Going through the functions rather than a REST client
// keeps fake clientsets working.
func listWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), field, label string) *cache.ListWatch {
	restrict := func(o *metav1.ListOptions) {
		if field != "" {
			o.FieldSelector = field
		}
		if label != "" {
			o.LabelSelector = label
		}
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			restrict(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			restrict(&o)
			return watchFn(ctx, o)
		},
	}
}

// waitTimeout is until's error when cond did not hold in time; the objects it returns are then
// what the API server last said, which the caller describes.
type waitTimeout struct{ after time.Duration }

func (e *waitTimeout) Error() string { return fmt.Sprintf("timed out after %s", e.after) }
func (e *waitTimeout) Unwrap() error { return context.DeadlineExceeded }

func timedOut(err error) bool {
	var t *waitTimeout
	return errors.As(err, &t)
}

// until runs an informer over lw and returns once cond holds for the objects it holds (sorted
// by namespace/name), checked when the informer has synced and after every change. It returns
// the objects last seen with the result, so the caller can explain a *waitTimeout; the end of
// ctx returns ctx's error, an API server that never answered the first list a plain error
// (both wrap context.DeadlineExceeded on a deadline). client is the client behind lw (a fake
// clientset does not support watch-list semantics; the informer must know).
func until[T runtime.Object](ctx context.Context, lw *cache.ListWatch, client any, objType T, timeout time.Duration, cond func([]T) (bool, error)) ([]T, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var store cache.Store
	check := func() (bool, error) { return cond(storeObjects[T](store)) }
	_, err := watchtools.UntilWithSync(wctx, cache.ToListWatcherWithWatchListSemantics(lw, client), objType,
		func(s cache.Store) (bool, error) { store = s; return check() },
		func(watch.Event) (bool, error) { return check() })
	last := storeObjects[T](store)
	switch {
	case err == nil:
		return last, nil
	case ctx.Err() != nil:
		return last, context.Cause(ctx)
	case wctx.Err() != nil && store == nil:
		return nil, fmt.Errorf("no list from the API server within %s: %w", timeout, err)
	case wctx.Err() != nil:
		return last, &waitTimeout{after: timeout}
	}
	return last, err
}

// storeObjects returns the store's objects of type T sorted by namespace/name (nil store: none).
func storeObjects[T runtime.Object](store cache.Store) []T {
	if store == nil {
		return nil
	}
	var out []T
	for _, o := range store.List() {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	key := func(o T) string {
		a, err := meta.Accessor(o)
		if err != nil {
			return ""
		}
		return a.GetNamespace() + "/" + a.GetName()
	}
	slices.SortFunc(out, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	return out
}

// describeDeployment summarises a Deployment's rollout status for an error message.
func describeDeployment(d *appsv1.Deployment) string {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	out := fmt.Sprintf("%d replica(s) wanted, %d updated, %d ready, %d available, %d in total (generation %d, observed %d)",
		want, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, s.Replicas, d.Generation, s.ObservedGeneration)
	for _, c := range s.Conditions {
		if c.Status != corev1.ConditionTrue {
			out += fmt.Sprintf("; %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return out
}

// describeSelected lists the pods sel selects in ns and describes them. It runs after the wait
// timed out, so it gets its own short deadline.
func describeSelected(ctx context.Context, cs kubernetes.Interface, ns string, sel *metav1.LabelSelector) string {
	if sel == nil {
		return "none (the Deployment has no selector)"
	}
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(sel)})
	if err != nil {
		return fmt.Sprintf("cannot list them: %v", err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return describePods(ctx, cs, pods)
}

// maxDescribed bounds how many pods an error message describes (and looks up events for).
const maxDescribed = 5

// describePods summarises pods for an error message: phase and node, conditions that are not
// True, containers waiting or last terminated, and the latest events of pods that are not ready.
func describePods(ctx context.Context, cs kubernetes.Interface, pods []*corev1.Pod) string {
	if len(pods) == 0 {
		return "none (is kube-controller-manager running?)"
	}
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	var parts []string
	for i, p := range pods {
		if i == maxDescribed {
			parts = append(parts, fmt.Sprintf("and %d more", len(pods)-maxDescribed))
			break
		}
		s := fmt.Sprintf("%s (%s, node %q", p.Name, p.Status.Phase, p.Spec.NodeName)
		if p.DeletionTimestamp != nil {
			s += ", being deleted"
		}
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				s += fmt.Sprintf(", %s=%s", c.Type, c.Status)
				if c.Reason != "" || c.Message != "" {
					s += fmt.Sprintf(" %s: %s", c.Reason, c.Message)
				}
			}
		}
		for _, st := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if w := st.State.Waiting; w != nil {
				s += fmt.Sprintf(", container %s waiting: %s: %s", st.Name, w.Reason, w.Message)
			}
			if t := LastTermination(p, st.Name); t != nil {
				s += fmt.Sprintf(", container %s exited: %s (code %d)", st.Name, t.Reason, t.ExitCode)
			}
		}
		if ok, _ := PodReady(p); !ok {
			if ev := podEvents(ctx, cs, p); ev != "" {
				s += ", events: " + ev
			}
		}
		parts = append(parts, s+")")
	}
	return strings.Join(parts, "; ")
}

// podEvents returns the pod's three latest events, oldest first ("" if none or on error: they
// only decorate an error message).
func podEvents(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) string {
	list, err := cs.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(p.UID)).String()})
	if err != nil || len(list.Items) == 0 {
		return ""
	}
	evs := list.Items
	at := func(e corev1.Event) time.Time {
		switch {
		case !e.EventTime.IsZero():
			return e.EventTime.Time
		case !e.LastTimestamp.IsZero():
			return e.LastTimestamp.Time
		}
		return e.CreationTimestamp.Time
	}
	slices.SortStableFunc(evs, func(a, b corev1.Event) int { return at(a).Compare(at(b)) })
	evs = evs[max(0, len(evs)-3):]
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, strings.TrimSpace(e.Message)))
	}
	return strings.Join(out, " | ")
}

// Poll runs cond every interval (and at once) until it holds, fails or ctx ends: for waits on
// something other than the Kubernetes API (an HTTP answer, a node process).
func Poll(ctx context.Context, interval time.Duration, cond func(ctx context.Context) (bool, error)) error {
	return wait.PollUntilContextCancel(ctx, interval, true, cond)
}
