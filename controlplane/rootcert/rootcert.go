// Package rootcert publishes the control plane's root certificate into namespaces, as istiod's
// namespace controller writes istio-ca-root-cert: proxies mount the ConfigMap and verify the
// secure xDS port's certificate against it. The ConfigMap is kept current: created when a
// selected namespace appears or the ConfigMap is deleted, rewritten when its content is not
// the CA's.
package rootcert

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

const (
	// DefaultConfigMap is the ConfigMap's name: not istio's istio-ca-root-cert, which an
	// installed istiod owns on a shared cluster.
	DefaultConfigMap = "meshchaos-ca-root-cert"
	// Key is the certificate's key in the ConfigMap, istio's.
	Key = "root-cert.pem"
)

// Labels are on every ConfigMap the publisher writes.
var Labels = map[string]string{"app": "meshchaos-controlplane"}

// skipped namespaces never get the ConfigMap, as istiod leaves Kubernetes' own alone.
var skipped = map[string]bool{"kube-system": true, "kube-public": true, "kube-node-lease": true}

// Options configure a Publisher.
type Options struct {
	Client kubernetes.Interface
	// ConfigMap is the name written (default DefaultConfigMap).
	ConfigMap string
	// Selector is a label selector of the namespaces written ("": every namespace, as istiod).
	Selector string
	// RootPEM is the CA certificate published.
	RootPEM []byte
	Logger  *slog.Logger
}

// Publisher keeps the root ConfigMap in every selected namespace.
type Publisher struct {
	o        Options
	selector labels.Selector
	queue    workqueue.TypedRateLimitingInterface[string]
	ns       corelisters.NamespaceLister
	cms      corelisters.ConfigMapLister
	synced   []cache.InformerSynced
	factory  []informers.SharedInformerFactory
}

// New checks the options and sets up the informers; Run publishes.
func New(o Options) (*Publisher, error) {
	if o.ConfigMap == "" {
		o.ConfigMap = DefaultConfigMap
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if len(o.RootPEM) == 0 {
		return nil, fmt.Errorf("root cert publisher: no root certificate")
	}
	sel, err := labels.Parse(o.Selector)
	if err != nil {
		return nil, fmt.Errorf("root cert publisher: namespace selector %q: %w (e.g. meshchaos.io/run or meshchaos.io/run=NAME)", o.Selector, err)
	}
	p := &Publisher{o: o, selector: sel,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "rootcert"})}
	nsf := informers.NewSharedInformerFactoryWithOptions(o.Client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = sel.String() }))
	// Only our ConfigMap, in every namespace: not every ConfigMap of the cluster in memory.
	cmf := informers.NewSharedInformerFactoryWithOptions(o.Client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.ConfigMap).String()
		}))
	nsi, cmi := nsf.Core().V1().Namespaces(), cmf.Core().V1().ConfigMaps()
	enqueueNS := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			p.queue.Add(ns.Name)
		}
	}
	enqueueCM := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == o.ConfigMap {
			p.queue.Add(cm.Namespace)
		}
	}
	if _, err := nsi.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueueNS,
		UpdateFunc: func(_, obj any) { enqueueNS(obj) }}); err != nil {
		return nil, fmt.Errorf("root cert publisher: %w", err)
	}
	if _, err := cmi.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueueCM,
		UpdateFunc: func(_, obj any) { enqueueCM(obj) }, DeleteFunc: enqueueCM}); err != nil {
		return nil, fmt.Errorf("root cert publisher: %w", err)
	}
	p.ns, p.cms = nsi.Lister(), cmi.Lister()
	p.synced = []cache.InformerSynced{nsi.Informer().HasSynced, cmi.Informer().HasSynced}
	p.factory = []informers.SharedInformerFactory{nsf, cmf}
	return p, nil
}

// Run publishes until ctx ends.
func (p *Publisher) Run(ctx context.Context) {
	defer p.queue.ShutDown()
	for _, f := range p.factory {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return
	}
	p.o.Logger.Info("publishing the root certificate", "configMap", p.o.ConfigMap, "key", Key, "namespaces", p.selectorText())
	go func() { <-ctx.Done(); p.queue.ShutDown() }()
	for p.next(ctx) {
	}
}

func (p *Publisher) selectorText() string {
	if p.selector.Empty() {
		return "all"
	}
	return p.selector.String()
}

func (p *Publisher) next(ctx context.Context) bool {
	ns, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(ns)
	if err := p.reconcile(ctx, ns); err != nil {
		p.o.Logger.Warn("root certificate not published (retrying)", "namespace", ns, "configMap", p.o.ConfigMap, "err", err)
		p.queue.AddRateLimited(ns)
		return true
	}
	p.queue.Forget(ns)
	return true
}

// reconcile makes namespace's ConfigMap hold the root, if the namespace is selected.
func (p *Publisher) reconcile(ctx context.Context, namespace string) error {
	ns, err := p.ns.Get(namespace)
	if apierrors.IsNotFound(err) {
		return nil // gone, or not selected
	}
	if err != nil {
		return err
	}
	// The watch is filtered by the selector already; checked again because a namespace whose
	// labels stop matching stays in the informer's store until it is relisted.
	if skipped[ns.Name] || ns.Status.Phase == corev1.NamespaceTerminating || !p.selector.Matches(labels.Set(ns.Labels)) {
		return nil
	}
	cms := p.o.Client.CoreV1().ConfigMaps(namespace)
	cm, err := p.cms.ConfigMaps(namespace).Get(p.o.ConfigMap)
	switch {
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.o.ConfigMap, Namespace: namespace, Labels: Labels},
			Data: map[string]string{Key: string(p.o.RootPEM)}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // another replica wrote it: its event brings it here again
		}
		if err != nil {
			return fmt.Errorf("create ConfigMap %s/%s: %w", namespace, p.o.ConfigMap, err)
		}
		return nil
	case err != nil:
		return err
	}
	if bytes.Equal([]byte(cm.Data[Key]), p.o.RootPEM) && hasLabels(cm.Labels) {
		return nil
	}
	cm = cm.DeepCopy()
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	for k, v := range Labels {
		cm.Labels[k] = v
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[Key] = string(p.o.RootPEM)
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update ConfigMap %s/%s: %w", namespace, p.o.ConfigMap, err)
	}
	return nil
}

func hasLabels(have map[string]string) bool {
	for k, v := range Labels {
		if have[k] != v {
			return false
		}
	}
	return true
}
