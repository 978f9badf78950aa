package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	apinet "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// configLoadLabel selects what a ConfigLoad created (InjectorLabel=config-load).
var configLoadLabel = InjectorLabel + "=config-load"

// ConfigLoad is memory pressure through configuration, for a control plane that has no ballast
// hook: it creates ServiceEntries (STATIC, Endpoints addresses each) in batches until Stop holds
// (e.g. "the control plane was OOM-killed") or Max exist, as the 5000-ServiceEntries incident
// grew istiod's heap. Inject returns once the first batch is accepted and the load goes on in
// the background; Wait reports how many existed when it ended; Clear deletes them all.
type ConfigLoad struct {
	// Istio is the client for ServiceEntries (the CRD must be installed).
	Istio istioclient.Interface
	// Namespace to create them in (it must exist).
	Namespace string
	// Batch is how many are created between two checks of Stop (default 100).
	Batch int
	// Max ends the load without Stop holding (default 10000).
	Max int
	// Endpoints per ServiceEntry (default 10, as in the incident).
	Endpoints int
	// Workers create a batch concurrently (default 8).
	Workers int
	// Stop is checked after every batch; the load ends when it returns true (an error ends it
	// too, and Wait returns it). Nil: run to Max.
	Stop func(ctx context.Context) (bool, error)

	mu      sync.Mutex
	created int
	cancel  context.CancelFunc
	done    chan struct{}
	result  LoadResult
	err     error
}

// LoadResult is how a ConfigLoad ended.
type LoadResult struct {
	// Created is the number of ServiceEntries created when the load ended.
	Created int
	// Stopped tells that Stop held.
	Stopped bool
	// Reason says why the load ended: "stop condition held", "max reached", "cleared" or
	// "failed".
	Reason string
	// At is when the load ended.
	At time.Time
}

// Name implements Injector: "config-load/NAMESPACE".
func (l *ConfigLoad) Name() string { return "config-load/" + l.Namespace }

// Inject creates the first batch and returns once the apiserver accepted it; the load goes on
// until Stop holds, Max is reached or Clear is called (not when ctx ends: use Clear).
func (l *ConfigLoad) Inject(ctx context.Context) (Evidence, error) {
	batch, limit := orDefault(l.Batch, 100), orDefault(l.Max, 10000)
	if batch < 1 || limit < 1 || orDefault(l.Endpoints, 10) < 1 || orDefault(l.Workers, 8) < 1 {
		return Evidence{}, fmt.Errorf("%s: Batch %d, Max %d, Endpoints %d, Workers %d: use positive numbers (0 for the defaults)", l.Name(), l.Batch, l.Max, l.Endpoints, l.Workers)
	}
	if n := limit * orDefault(l.Endpoints, 10); n > maxLoadEndpoints {
		return Evidence{}, fmt.Errorf("%s: Max × Endpoints = %d: at most %d endpoint addresses can be made; lower Max or Endpoints", l.Name(), n, maxLoadEndpoints)
	}
	l.mu.Lock()
	running := l.done != nil
	l.mu.Unlock()
	if running {
		return Evidence{}, fmt.Errorf("%s: already loading: Clear it before injecting again", l.Name())
	}
	left, err := l.Istio.NetworkingV1().ServiceEntries(l.Namespace).List(ctx, metav1.ListOptions{LabelSelector: configLoadLabel, Limit: 1})
	if err != nil {
		return Evidence{}, fmt.Errorf("%s: list ServiceEntries: %w", l.Name(), l.hint(err))
	}
	if len(left.Items) > 0 {
		return Evidence{}, fmt.Errorf("%s: ServiceEntries labelled %s exist already: a previous load was not cleared; delete them (kubectl delete serviceentries -n %s -l %s)", l.Name(), configLoadLabel, l.Namespace, configLoadLabel)
	}
	start := time.Now()
	first := min(batch, limit)
	l.mu.Lock()
	l.created = 0
	l.mu.Unlock()
	if err := l.create(ctx, 0, first); err != nil {
		if derr := l.deleteAll(context.WithoutCancel(ctx)); derr != nil {
			err = fmt.Errorf("%w (and removing the %d created: %v)", err, l.Created(), derr)
		}
		return Evidence{}, err
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	l.mu.Lock()
	l.cancel, l.done, l.result, l.err = cancel, done, LoadResult{}, nil
	l.mu.Unlock()
	go l.run(bg, done, batch, limit)
	return Evidence{At: time.Now(),
		Summary: fmt.Sprintf("first %d ServiceEntries (%d endpoints each) accepted in %s in %.1f s; loading on to %d or until the stop condition holds",
			first, orDefault(l.Endpoints, 10), l.Namespace, time.Since(start).Seconds(), limit),
		Values: map[string]float64{"created": float64(first)}}, nil
}

// run adds batches until Stop holds, limit is reached, an error or Clear; then closes done.
func (l *ConfigLoad) run(ctx context.Context, done chan struct{}, batch, limit int) {
	defer close(done)
	finish := func(reason string, err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.result = LoadResult{Created: l.created, Stopped: reason == reasonStopped, Reason: reason, At: time.Now()}
		l.err = err
	}
	for {
		if l.Stop != nil {
			stop, err := l.Stop(ctx)
			if err != nil && ctx.Err() == nil {
				finish("failed", fmt.Errorf("%s: stop condition: %w", l.Name(), err))
				return
			}
			if stop {
				finish(reasonStopped, nil)
				return
			}
		}
		n := l.Created()
		switch {
		case ctx.Err() != nil:
			finish("cleared", nil)
			return
		case n >= limit:
			finish("max reached", nil)
			return
		}
		if err := l.create(ctx, n, min(n+batch, limit)); err != nil {
			if ctx.Err() != nil {
				finish("cleared", nil)
			} else {
				finish("failed", err)
			}
			return
		}
	}
}

const reasonStopped = "stop condition held"

// Created is how many ServiceEntries the load has created so far.
func (l *ConfigLoad) Created() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.created
}

// Wait blocks until the load ends (Stop held, Max reached, an error, or Clear) and reports it.
func (l *ConfigLoad) Wait(ctx context.Context) (LoadResult, error) {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done == nil {
		return LoadResult{}, fmt.Errorf("%s: not injected: call Inject first", l.Name())
	}
	select {
	case <-ctx.Done():
		return LoadResult{}, fmt.Errorf("%s: waiting for the load to end (%d created so far): %w", l.Name(), l.Created(), ctx.Err())
	case <-done:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.result, l.err
}

// Clear ends the load, deletes every ServiceEntry it created (by its label) and waits until the
// apiserver lists none.
func (l *ConfigLoad) Clear(ctx context.Context) (Evidence, error) {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if done == nil {
		return Evidence{At: time.Now(), Summary: "nothing to clear: no load runs"}, nil
	}
	cancel()
	<-done
	res, lerr := l.result, l.err
	if err := l.deleteAll(ctx); err != nil {
		return Evidence{}, err
	}
	l.mu.Lock()
	l.done, l.cancel, l.created = nil, nil, 0
	l.mu.Unlock()
	ev := Evidence{At: time.Now(), Summary: fmt.Sprintf("deleted the %d ServiceEntries the load created (it ended: %s)", res.Created, res.Reason),
		Values: map[string]float64{"created": float64(res.Created)}}
	if lerr != nil {
		ev.Summary += "; " + lerr.Error()
	}
	return ev, nil
}

// deleteAll deletes every ServiceEntry carrying the load's label and waits until none is listed.
func (l *ConfigLoad) deleteAll(ctx context.Context) error {
	se := l.Istio.NetworkingV1().ServiceEntries(l.Namespace)
	if err := se.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: configLoadLabel}); err != nil {
		return fmt.Errorf("%s: delete ServiceEntries -l %s: %w: delete them by hand (kubectl delete serviceentries -n %s -l %s)", l.Name(), configLoadLabel, l.hint(err), l.Namespace, configLoadLabel)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left, err := se.List(ctx, metav1.ListOptions{LabelSelector: configLoadLabel, Limit: 1})
		return err == nil && len(left.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%s: ServiceEntries -l %s still listed after their deletion (%w): check them for finalizers", l.Name(), configLoadLabel, err)
	}
	return nil
}

// maxLoadEndpoints is how many distinct endpoint addresses loadAddress makes.
const maxLoadEndpoints = 80 << 16

// loadAddress is endpoint n's address, in 10.16.0.0–10.95.255.255: clear of the local
// substrate's Service (10.96/16) and pod (10.244/16) ranges.
func loadAddress(n int) string {
	n += 16 << 16
	return fmt.Sprintf("10.%d.%d.%d", n>>16, n>>8&255, n&255)
}

// serviceEntry is load entry i.
func (l *ConfigLoad) serviceEntry(i int) *networkingv1.ServiceEntry {
	se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("config-load-%d", i), Namespace: l.Namespace,
		Labels: map[string]string{InjectorLabel: "config-load"}}}
	se.Spec.Hosts = []string{fmt.Sprintf("config-load-%d.load.test", i)}
	se.Spec.Location = apinet.ServiceEntry_MESH_INTERNAL
	se.Spec.Resolution = apinet.ServiceEntry_STATIC
	se.Spec.ExportTo = []string{"."} // the run's namespace only, as every entry of a run
	se.Spec.Ports = []*apinet.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080}}
	eps := orDefault(l.Endpoints, 10)
	for j := 0; j < eps; j++ {
		se.Spec.Endpoints = append(se.Spec.Endpoints, &apinet.WorkloadEntry{Address: loadAddress(i*eps + j),
			Labels: map[string]string{"app": se.Name}})
	}
	return se
}

// create makes entries [from, to) with Workers concurrent requests, counting each one accepted.
func (l *ConfigLoad) create(ctx context.Context, from, to int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(orDefault(l.Workers, 8))
	for i := from; i < to && gctx.Err() == nil; i++ {
		g.Go(func() error {
			se := l.serviceEntry(i)
			if _, err := l.Istio.NetworkingV1().ServiceEntries(l.Namespace).Create(gctx, se, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("%s: create ServiceEntry %s: %w", l.Name(), se.Name, l.hint(err))
			}
			l.mu.Lock()
			l.created++
			l.mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// hint adds what to do to the apiserver's usual refusals.
func (l *ConfigLoad) hint(err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: install the Istio ServiceEntry CRD (controlplane/crds.Istio) and create namespace %s", err, l.Namespace)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w: let this client create, list and delete serviceentries.networking.istio.io in %s", err, l.Namespace)
	}
	return err
}

var _ Injector = (*ConfigLoad)(nil)
