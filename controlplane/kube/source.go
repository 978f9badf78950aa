// Package kube feeds the model from the cluster: client-go informers for Services,
// EndpointSlices and Pods and istio.io/client-go informers for ServiceEntries, WorkloadEntries,
// Sidecars, Gateways and VirtualServices. Informer handlers only enqueue; one worker applies
// events to the model in order and hands each resulting change to the pusher. Synced reports when every informer has
// synced and every event delivered before that has been applied (the sync gate's condition).
package kube

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	apinet "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/meshchaos/meshchaos/controlplane/model"
)

// Source runs the informers and the event worker.
type Source struct {
	model    *model.Model
	onChange func(model.Change)
	log      *slog.Logger

	kubeFactory  informers.SharedInformerFactory
	istioFactory istioinformers.SharedInformerFactory
	// seInformer is the ServiceEntry informer, outside the factory: it decodes with protojson
	// (see wireServiceEntry).
	seInformer cache.SharedIndexInformer
	seDone     chan struct{}
	regs       []cache.ResourceEventHandlerRegistration

	// OnEvent, if set before Start, is called for every informer event with the object's kind
	// and "add", "update" or "delete" (for metrics).
	OnEvent func(kind, event string)
	// SyncedBeforeApplied, if set before Start, closes Synced as soon as the informers have
	// synced, before the initial events queued by then are applied (regress.GateBeforeEvents).
	SyncedBeforeApplied bool

	q       *queue
	synced  chan struct{}
	applied uint64 // events applied (worker only)
	mu      sync.Mutex
}

// NewSource creates informers on cfg. onChange receives every non-empty model change.
func NewSource(cfg *rest.Config, m *model.Model, onChange func(model.Change), log *slog.Logger) (*Source, error) {
	if log == nil {
		log = slog.Default()
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 100, 200
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ic, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("istio client: %w", err)
	}
	s := &Source{model: m, onChange: onChange, log: log, q: newQueue(), synced: make(chan struct{})}
	s.kubeFactory = informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithTransform(strip))
	s.istioFactory = istioinformers.NewSharedInformerFactoryWithOptions(ic, 0, istioinformers.WithTransform(strip))
	if s.seInformer, err = newServiceEntryInformer(cfg, strip); err != nil {
		return nil, err
	}

	add := func(kind string, inf cache.SharedIndexInformer, set func(obj any) model.Change, del func(ns, name string) model.Change) error {
		reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				s.event(kind, "add")
				s.q.push(func() model.Change { return set(obj) })
			},
			UpdateFunc: func(_, obj any) {
				s.event(kind, "update")
				s.q.push(func() model.Change { return set(obj) })
			},
			DeleteFunc: func(obj any) {
				s.event(kind, "delete")
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				a, err := meta.Accessor(obj)
				if err != nil {
					return
				}
				ns, name := a.GetNamespace(), a.GetName()
				s.q.push(func() model.Change { return del(ns, name) })
			},
		})
		if err != nil {
			return err
		}
		s.regs = append(s.regs, reg)
		return nil
	}
	errs := []error{
		add("Service", s.kubeFactory.Core().V1().Services().Informer(),
			func(o any) model.Change { return m.SetKubeService(o.(*corev1.Service)) }, m.DeleteKubeService),
		add("EndpointSlice", s.kubeFactory.Discovery().V1().EndpointSlices().Informer(),
			func(o any) model.Change { return m.SetEndpointSlice(o.(*discoveryv1.EndpointSlice)) }, m.DeleteEndpointSlice),
		add("Pod", s.kubeFactory.Core().V1().Pods().Informer(),
			func(o any) model.Change { return m.SetPod(o.(*corev1.Pod)) }, m.DeletePod),
		add("ServiceEntry", s.seInformer, func(o any) model.Change {
			se := o.(*ConvertedServiceEntry)
			for _, sk := range se.Skips {
				m.Skip(sk)
			}
			return m.SetServiceEntry(se.Namespace, se.Name, se.CreationTimestamp.Time, se.Conv)
		}, m.DeleteServiceEntry),
		add("WorkloadEntry", s.istioFactory.Networking().V1().WorkloadEntries().Informer(), func(o any) model.Change {
			we := o.(*networkingv1.WorkloadEntry)
			ep, sk := model.ConvertWorkloadEntry(we.Namespace, we.Name, &we.Spec)
			if sk != nil {
				m.Skip(*sk)
			}
			return m.SetWorkloadEntry(we.Namespace, we.Name, ep, sk == nil)
		}, m.DeleteWorkloadEntry),
		add("Sidecar", s.istioFactory.Networking().V1().Sidecars().Informer(), func(o any) model.Change {
			sc := o.(*networkingv1.Sidecar)
			conv, sk := model.ConvertSidecar(sc.Namespace, sc.Name, sc.CreationTimestamp.Time, &sc.Spec)
			if sk != nil {
				m.Skip(*sk)
			}
			return m.SetSidecar(sc.Namespace, sc.Name, conv)
		}, m.DeleteSidecar),
		add("Gateway", s.istioFactory.Networking().V1().Gateways().Informer(), func(o any) model.Change {
			gw := o.(*networkingv1.Gateway)
			conv, skips := model.ConvertGateway(gw.Namespace, gw.Name, gw.CreationTimestamp.Time, &gw.Spec)
			for _, sk := range skips {
				m.Skip(sk)
			}
			return m.SetGateway(gw.Namespace, gw.Name, conv)
		}, m.DeleteGateway),
		add("VirtualService", s.istioFactory.Networking().V1().VirtualServices().Informer(), func(o any) model.Change {
			vs := o.(*networkingv1.VirtualService)
			conv, skips := model.ConvertVirtualService(vs.Namespace, vs.Name, vs.CreationTimestamp.Time, &vs.Spec)
			for _, sk := range skips {
				m.Skip(sk)
			}
			return m.SetVirtualService(vs.Namespace, vs.Name, conv)
		}, m.DeleteVirtualService),
	}
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("add event handler: %w", err)
		}
	}
	return s, nil
}

func (s *Source) event(kind, event string) {
	if s.OnEvent != nil {
		s.OnEvent(kind, event)
	}
}

// ConvertedServiceEntry is what the ServiceEntry informer keeps of a ServiceEntry: its metadata
// and the model's conversion of its spec, made once by the informer's transform (strip). The
// decoded spec (a proto message per endpoint, with its labels) is dropped as soon as it is
// converted: kept, it was a quarter of the control plane's heap at 5000 ServiceEntries, a copy
// of what the model holds anyway. Conv is shared with the model, which never changes it.
type ConvertedServiceEntry struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Conv  *model.ConvertedServiceEntry // nil: nothing usable (see Skips)
	Skips []model.Skip
}

// DeepCopyObject copies the metadata and shares the (immutable) conversion.
func (c *ConvertedServiceEntry) DeepCopyObject() runtime.Object {
	out := &ConvertedServiceEntry{TypeMeta: c.TypeMeta, Conv: c.Conv, Skips: slices.Clone(c.Skips)}
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// convertServiceEntry is what the informer keeps of se (see ConvertedServiceEntry).
func convertServiceEntry(se *wireServiceEntry) *ConvertedServiceEntry {
	spec := se.Spec.se
	if spec == nil {
		spec = &apinet.ServiceEntry{}
	}
	conv, skips, _ := model.ConvertServiceEntry(se.Namespace, se.Name, spec)
	return &ConvertedServiceEntry{TypeMeta: se.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: se.Name, Namespace: se.Namespace, UID: se.UID,
			ResourceVersion: se.ResourceVersion, Generation: se.Generation, CreationTimestamp: se.CreationTimestamp},
		Conv: conv, Skips: skips}
}

// strip drops managed fields and the last-applied annotation: the model never reads them and
// they are a large share of an informer cache's memory. Pods are cut down to what the model
// reads: labels and service account; ServiceEntries are converted (see
// ConvertedServiceEntry). Idempotent: client-go may hand it an object it already transformed.
func strip(obj any) (any, error) {
	if se, ok := obj.(*wireServiceEntry); ok {
		return convertServiceEntry(se), nil
	}
	if p, ok := obj.(*corev1.Pod); ok {
		slim := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
				ResourceVersion: p.ResourceVersion, Labels: p.Labels},
			Spec: corev1.PodSpec{ServiceAccountName: p.Spec.ServiceAccountName},
		}
		return slim, nil
	}
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
		if ann := a.GetAnnotations(); ann != nil {
			delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
		}
	}
	return obj, nil
}

// Start starts the informers and the worker; it returns at once. Synced closes once every
// informer has synced and every event delivered up to then has been applied.
func (s *Source) Start(ctx context.Context) {
	go s.work(ctx)
	s.kubeFactory.Start(ctx.Done())
	s.istioFactory.Start(ctx.Done())
	s.seDone = make(chan struct{})
	go func() { defer close(s.seDone); s.seInformer.RunWithContext(ctx) }()
	go func() {
		syncs := make([]cache.DoneChecker, len(s.regs))
		for i, r := range s.regs {
			syncs[i] = r.HasSyncedChecker()
		}
		// Registration synced: the informer has listed AND delivered every listed object to
		// our handler (which enqueued it). The marker below then drains the queue up to here.
		// WaitFor wakes on the sync itself; WaitForCacheSync polled every 100 ms, up to a
		// tenth of a second on the path to the sync gate.
		if !cache.WaitFor(ctx, "", syncs...) {
			return
		}
		s.log.Info("informers synced; applying the initial events", "queued", s.q.len())
		if s.SyncedBeforeApplied {
			// istio 1.7–1.8's gate: HasSynced says the informers listed, not that the handlers
			// ran; the model is still being filled when the gate opens.
			close(s.synced)
			return
		}
		s.q.push(func() model.Change {
			close(s.synced)
			return model.Change{}
		})
	}()
}

// Synced is closed once the initial state is completely in the model.
func (s *Source) Synced() <-chan struct{} { return s.synced }

// Applied counts events applied to the model.
func (s *Source) Applied() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied
}

// Shutdown stops the informers (after ctx ended) and waits for their goroutines.
func (s *Source) Shutdown() {
	s.kubeFactory.Shutdown()
	s.istioFactory.Shutdown()
	if s.seDone != nil {
		<-s.seDone
	}
	s.q.close()
}

func (s *Source) work(ctx context.Context) {
	for {
		fn, ok := s.q.pop()
		if !ok {
			return
		}
		ch := fn()
		s.mu.Lock()
		s.applied++
		s.mu.Unlock()
		if !ch.Empty() {
			s.onChange(ch)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// queue is an unbounded FIFO: informer handlers must never block.
type queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []func() model.Change
	closed bool
}

func newQueue() *queue {
	q := &queue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) push(fn func() model.Change) {
	q.mu.Lock()
	q.items = append(q.items, fn)
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *queue) pop() (func() model.Change, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return nil, false
	}
	fn := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return fn, true
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}
