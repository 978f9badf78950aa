package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// readinessWatch counts the Ready condition's transitions of the pods matching a selector, as
// the API reports them (the same view endpoints controllers and proxies act on).
type readinessWatch struct {
	mu    sync.Mutex
	ready map[types.UID]bool
	// toNotReady and toReady count transitions since the watch started; pods present then are
	// the baseline, new pods' first state is not a transition.
	toNotReady, toReady int
	first               transition
	changed             chan struct{} // closed and replaced on every observation
	stop                context.CancelFunc
	done                chan struct{}
}

// transition is one observed change of a pod's readiness.
type transition struct {
	at    time.Time
	pod   string
	ready bool
}

// counts is a consistent snapshot of a readinessWatch.
type counts struct {
	toNotReady, toReady, pods, readyPods int
	first                                transition
}

// watchReadiness lists the pods (the baseline) and follows them until stop; it re-lists when the
// watch ends, counting the changes the gap hid (at most one per pod).
func watchReadiness(ctx context.Context, c kubernetes.Interface, ns, selector string) (*readinessWatch, error) {
	w := &readinessWatch{ready: map[types.UID]bool{}, changed: make(chan struct{}), done: make(chan struct{})}
	rv, err := w.relist(ctx, c, ns, selector)
	if err != nil {
		return nil, err
	}
	ctx, w.stop = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			w.follow(ctx, c, ns, selector, rv)
			for ctx.Err() == nil {
				next, err := w.relist(ctx, c, ns, selector)
				if err == nil {
					rv = next
					break
				}
				_ = pause(ctx, time.Second)
			}
		}
	}()
	return w, nil
}

func (w *readinessWatch) relist(ctx context.Context, c kubernetes.Interface, ns, selector string) (string, error) {
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return "", fmt.Errorf("list pods %q in namespace %s: %w", selector, ns, err)
	}
	seen := map[types.UID]bool{}
	for i := range list.Items {
		w.observe(&list.Items[i], false)
		seen[list.Items[i].UID] = true
	}
	w.mu.Lock()
	for uid := range w.ready {
		if !seen[uid] {
			delete(w.ready, uid)
		}
	}
	w.mu.Unlock()
	return list.ResourceVersion, nil
}

// follow consumes one watch until it ends.
func (w *readinessWatch) follow(ctx context.Context, c kubernetes.Interface, ns, selector, rv string) {
	wi, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv})
	if err != nil {
		_ = pause(ctx, time.Second) // the apiserver may be restarting: do not hammer it
		return
	}
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			switch {
			case ev.Type == watch.Error:
				return // e.g. resource version too old: re-list
			case !isPod:
			default:
				w.observe(pod, ev.Type == watch.Deleted)
			}
		}
	}
}

// observe records a pod's state, counting a change of readiness of a pod already known.
func (w *readinessWatch) observe(p *corev1.Pod, deleted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() { close(w.changed); w.changed = make(chan struct{}) }()
	if deleted {
		delete(w.ready, p.UID)
		return
	}
	now := podReady(p)
	was, known := w.ready[p.UID]
	w.ready[p.UID] = now
	if !known || was == now {
		return
	}
	if now {
		w.toReady++
	} else {
		w.toNotReady++
	}
	if w.first.at.IsZero() {
		w.first = transition{at: time.Now(), pod: p.Name, ready: now}
	}
}

func (w *readinessWatch) counts() (counts, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := counts{toNotReady: w.toNotReady, toReady: w.toReady, pods: len(w.ready), first: w.first}
	for _, r := range w.ready {
		if r {
			c.readyPods++
		}
	}
	return c, w.changed
}

// waitFor returns the first snapshot for which cond has held for hold (0: at once), or an error
// after timeout.
func (w *readinessWatch) waitFor(ctx context.Context, timeout, hold time.Duration, cond func(counts) bool) (counts, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var since time.Time // when cond began to hold
	for {
		c, changed := w.counts()
		var held <-chan time.Time
		switch {
		case !cond(c):
			since = time.Time{}
		case since.IsZero() && hold <= 0:
			return c, nil
		case since.IsZero():
			since = time.Now()
			fallthrough
		default:
			left := hold - time.Since(since)
			if left <= 0 {
				return c, nil
			}
			held = time.After(left)
		}
		select {
		case <-changed:
		case <-held:
		case <-deadline.C:
			return c, fmt.Errorf("not within %s", timeout)
		case <-ctx.Done():
			return c, ctx.Err()
		}
	}
}

// close stops the watch and waits for its goroutine.
func (w *readinessWatch) close() {
	w.stop()
	<-w.done
}
