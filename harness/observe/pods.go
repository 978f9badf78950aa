package observe

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/results"
)

// Event kinds the pod watcher emits.
const (
	PodCreated   = "pod.created"
	PodDeleted   = "pod.deleted"
	PodReady     = "pod.ready"
	PodNotReady  = "pod.notready"
	PodRestarted = "pod.restarted"
	PodOOMKilled = "pod.oomkilled"
	// PodTerminated is a container ending for another reason (Error, Completed, …).
	PodTerminated = "pod.terminated"
)

// PodStats are the watcher's running counts.
type PodStats struct {
	Restarts int
	OOMKills int
	// Ready and NotReady count readiness transitions.
	Ready, NotReady int
}

// PodWatcher watches pods through a client-go informer and reports restarts, container
// terminations (OOMKilled in particular) and readiness transitions as timeline events. Each event
// carries the API's timestamp (At: container start/finish, condition transition; the API keeps
// whole seconds) and the watcher's own (ObservedAt), so the report shows how late the harness
// saw it. Pods present when the watcher starts are a baseline: only later changes are events.
type PodWatcher struct {
	client    kubernetes.Interface
	namespace string
	selector  string
	onEvent   func(results.Event)

	mu    sync.Mutex
	stats PodStats
	// seen keys terminations already reported (pod UID, container, finishedAt), so a
	// termination seen first as State and later as LastTerminationState counts once.
	seen map[string]bool
}

// NewPodWatcher watches pods in namespace ("" for all) matching labelSelector ("" for all);
// onEvent receives every event, from the informer's goroutine.
func NewPodWatcher(client kubernetes.Interface, namespace, labelSelector string, onEvent func(results.Event)) *PodWatcher {
	return &PodWatcher{client: client, namespace: namespace, selector: labelSelector, onEvent: onEvent, seen: map[string]bool{}}
}

// Stats returns the counts so far.
func (w *PodWatcher) Stats() PodStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Start starts the informer and returns once its cache has synced (the baseline is in, at most a
// minute); the watch runs until ctx ends.
func (w *PodWatcher) Start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(w.client, 0,
		informers.WithNamespace(w.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = w.selector }))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			if initial {
				w.baseline(pod)
				return
			}
			w.emit(results.Event{At: pod.CreationTimestamp.Time, Kind: PodCreated, Object: podName(pod)})
			w.diff(&corev1.Pod{}, pod)
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Pod)
			n, ok2 := newObj.(*corev1.Pod)
			if ok1 && ok2 {
				w.diff(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				at := time.Now()
				if pod.DeletionTimestamp != nil {
					at = pod.DeletionTimestamp.Time
				}
				w.emit(results.Event{At: at, Kind: PodDeleted, Object: podName(pod)})
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		return fmt.Errorf("watch pods: informer did not sync (is the API server reachable?): %w", context.Cause(syncCtx))
	}
	return nil
}

func podName(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func (w *PodWatcher) baseline(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cs := range p.Status.ContainerStatuses {
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil {
				w.seen[termKey(p, cs.Name, t)] = true
			}
		}
	}
}

func termKey(p *corev1.Pod, container string, t *corev1.ContainerStateTerminated) string {
	return fmt.Sprintf("%s/%s/%s/%d", p.UID, container, t.FinishedAt.UTC().Format(time.RFC3339Nano), t.ExitCode)
}

func (w *PodWatcher) emit(e results.Event) {
	now := time.Now().UTC()
	if e.At.IsZero() {
		e.At = now
	}
	e.At = e.At.UTC()
	e.ObservedAt = &now
	if w.onEvent != nil {
		w.onEvent(e)
	}
}

// diff turns the change from o to n into events.
func (w *PodWatcher) diff(o, n *corev1.Pod) {
	name := podName(n)
	old := map[string]corev1.ContainerStatus{}
	for _, cs := range o.Status.ContainerStatuses {
		old[cs.Name] = cs
	}
	var events []results.Event
	w.mu.Lock()
	for _, cs := range n.Status.ContainerStatuses {
		obj := name + "/" + cs.Name
		// Terminations: the current state (container dead, not yet restarted) or the last one
		// (already restarted); whichever shows it first.
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t == nil {
				continue
			}
			k := termKey(n, cs.Name, t)
			if w.seen[k] {
				continue
			}
			w.seen[k] = true
			kind := PodTerminated
			if t.Reason == "OOMKilled" {
				kind = PodOOMKilled
				w.stats.OOMKills++
			}
			events = append(events, results.Event{At: t.FinishedAt.Time, Kind: kind, Object: obj,
				Detail: fmt.Sprintf("reason %s, exit code %d", t.Reason, t.ExitCode)})
		}
		// A container missing from the old status counts from 0: its restarts all happened while
		// we watched (the baseline holds whatever was there before).
		if prev := old[cs.Name]; cs.RestartCount > prev.RestartCount {
			w.stats.Restarts += int(cs.RestartCount - prev.RestartCount)
			var at time.Time
			if cs.State.Running != nil {
				at = cs.State.Running.StartedAt.Time
			}
			detail := fmt.Sprintf("restart count %d", cs.RestartCount)
			if t := cs.LastTerminationState.Terminated; t != nil {
				detail += fmt.Sprintf(" after %s (exit code %d)", t.Reason, t.ExitCode)
			}
			events = append(events, results.Event{At: at, Kind: PodRestarted, Object: obj, Detail: detail})
		}
	}
	oc, nc := kube.PodCondition(o, corev1.PodReady), kube.PodCondition(n, corev1.PodReady)
	wasReady, _ := kube.PodReady(o)
	isReady, since := kube.PodReady(n)
	// A first condition that says NotReady is no transition.
	if nc != nil && isReady != wasReady && (oc != nil || isReady) {
		kind := PodNotReady
		if isReady {
			kind = PodReady
			w.stats.Ready++
		} else {
			w.stats.NotReady++
		}
		events = append(events, results.Event{At: since, Kind: kind, Object: name, Detail: nc.Reason})
	}
	w.mu.Unlock()
	for _, e := range events {
		w.emit(e)
	}
}
