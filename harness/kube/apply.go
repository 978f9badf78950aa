// Package kube holds the harness's Kubernetes helpers, written once: applying manifests
// (Decode, Apply, InstallCRDs and the mutators experiments use on them), readiness of pods and
// nodes (PodReady, NodeReady, LastTermination, PodIPs) and waits on them. The waits watch the
// API (client-go informers through tools/watch.UntilWithSync), so they return when the change
// happens rather than on a poll tick; their timeout errors say what was seen last and wrap
// context.DeadlineExceeded.
package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side apply field manager of everything Apply writes.
const FieldManager = "meshchaos"

// crdEstablishTimeout bounds the wait for CRDs to be served; the API server takes well under a
// second, so a minute only trips when something is wrong.
const crdEstablishTimeout = time.Minute

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Decode splits multi-document YAML (or JSON) into objects, skipping empty documents.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode manifest document %d: %w", len(out)+1, err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// Apply creates or updates every object in data (multi-document YAML or JSON) by server-side
// apply as FieldManager, taking over fields other managers own (kubectl apply --server-side
// --force-conflicts), so applying the same data twice is a no-op. Namespaces and
// CustomResourceDefinitions are applied first and Apply waits until the API server serves the
// CRDs, so objects in the same data find their namespace and kind wherever they are; the other
// objects follow in their order in data. Namespaced objects without a namespace go to "default". Every mutate function adjusts every decoded
// object before it is sent.
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
	return applyObjects(ctx, cfg, objs)
}

// InstallCRDs applies the CustomResourceDefinitions in data (see Apply) and waits until every
// one is Established. data must hold nothing but CRDs.
func InstallCRDs(ctx context.Context, cfg *rest.Config, data []byte) error {
	objs, err := Decode(data)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() != crdGVK.GroupKind() {
			return fmt.Errorf("install CRDs: %s %s is not a CustomResourceDefinition (use Apply for other objects)", o.GetKind(), o.GetName())
		}
	}
	return applyObjects(ctx, cfg, objs)
}

// dynamicClients are a dynamic client and a REST mapper (kinds to resources, discovered lazily
// and cached; Reset forgets, for kinds a CRD just added).
func dynamicClients(cfg *rest.Config) (dynamic.Interface, *restmapper.DeferredDiscoveryRESTMapper, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("discovery client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("dynamic client: %w", err)
	}
	return dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), nil
}

// applyObjects applies the Namespaces and CRDs among objs, waits until the CRDs are Established,
// then applies the rest in order.
func applyObjects(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) error {
	dyn, mapper, err := dynamicClients(cfg)
	if err != nil {
		return err
	}
	var first, crds, others []*unstructured.Unstructured
	for _, o := range objs {
		switch gk := o.GroupVersionKind().GroupKind(); {
		case gk == crdGVK.GroupKind():
			crds = append(crds, o)
			first = append(first, o)
		case gk == schema.GroupKind{Kind: "Namespace"}:
			first = append(first, o)
		default:
			others = append(others, o)
		}
	}
	for _, o := range first {
		if err := applyOne(ctx, dyn, mapper, o, nil); err != nil {
			return err
		}
	}
	if len(crds) > 0 {
		if err := waitEstablished(ctx, dyn, crds); err != nil {
			return err
		}
		// The cached discovery predates the new kinds.
		mapper.Reset()
	}
	// Kinds whose CRD this call installed: discovery may lag behind them for a moment.
	fresh := map[schema.GroupKind]bool{}
	for _, o := range crds {
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		fresh[schema.GroupKind{Group: group, Kind: kind}] = true
	}
	for _, o := range others {
		if err := applyOne(ctx, dyn, mapper, o, fresh); err != nil {
			return err
		}
	}
	return nil
}

// applyOne server-side applies o. A kind the API server does not serve is looked up again after
// a fresh discovery, and for a few seconds if it is one of the fresh kinds: discovery can trail a
// CRD's Established condition by a moment.
func applyOne(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, o *unstructured.Unstructured, fresh map[schema.GroupKind]bool) error {
	gvk := o.GroupVersionKind()
	what := gvk.Kind + " " + o.GetName()
	lookups := 0
	var mapping *meta.RESTMapping
	var lookupErr error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		mapping, lookupErr = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if lookups++; meta.IsNoMatchError(lookupErr) && (lookups < 2 || fresh[gvk.GroupKind()]) {
			mapper.Reset()
			return false, nil
		}
		return lookupErr == nil, lookupErr
	})
	if err != nil {
		if meta.IsNoMatchError(lookupErr) {
			return fmt.Errorf("apply %s: the API server does not serve %s (is its CRD installed?): %w", what, gvk, lookupErr)
		}
		return fmt.Errorf("apply %s: look up its resource: %w", what, err)
	}
	ri := dynamic.ResourceInterface(dyn.Resource(mapping.Resource))
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			o.SetNamespace(metav1.NamespaceDefault)
		}
		what = gvk.Kind + " " + o.GetNamespace() + "/" + o.GetName()
		ri = dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
	}
	if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("apply %s: %w", what, err)
	}
	return nil
}

// waitEstablished waits until every CRD in crds has condition Established=True.
func waitEstablished(ctx context.Context, dyn dynamic.Interface, crds []*unstructured.Unstructured) error {
	ri := dyn.Resource(crdGVR)
	lw := listWatch(ri.List, ri.Watch, "", "")
	pending := func(seen []*unstructured.Unstructured) []string {
		established := map[string]bool{}
		for _, o := range seen {
			established[o.GetName()] = crdEstablished(o)
		}
		var out []string
		for _, o := range crds {
			if !established[o.GetName()] {
				out = append(out, o.GetName())
			}
		}
		return out
	}
	seen, err := until(ctx, lw, dyn, &unstructured.Unstructured{}, crdEstablishTimeout, func(seen []*unstructured.Unstructured) (bool, error) {
		return len(pending(seen)) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("CRDs %v not established: %w", pending(seen), err)
	}
	return nil
}

func crdEstablished(o *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// Delete removes every object in data (multi-document YAML or JSON) in reverse order, so what
// Apply created first (Namespaces, CRDs) goes last; an object already gone is not an error, and
// a kind the API server does not serve (its CRD went first) has nothing left to delete. Delete
// does not wait for the objects to disappear (a Namespace's finalizers take their time).
func Delete(ctx context.Context, cfg *rest.Config, data []byte) error {
	objs, err := Decode(data)
	if err != nil {
		return err
	}
	dyn, mapper, err := dynamicClients(cfg)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(objs) - 1; i >= 0; i-- {
		o := objs[i]
		gvk := o.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete %s %s: look up its resource: %w", gvk.Kind, o.GetName(), err))
			continue
		}
		ri := dynamic.ResourceInterface(dyn.Resource(mapping.Resource))
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := o.GetNamespace()
			if ns == "" {
				ns = metav1.NamespaceDefault
			}
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", gvk.Kind, o.GetName(), err))
		}
	}
	return errors.Join(errs...)
}
