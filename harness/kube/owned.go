package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// OwnedClients are what DeleteOwned and ListOwned work through: the cluster's discovery (which
// cluster-scoped kinds it serves) and a dynamic client (objects of any kind). Tests give fakes.
type OwnedClients struct {
	Discovery discovery.DiscoveryInterface
	Dynamic   dynamic.Interface
}

// NewOwnedClients makes the OwnedClients of the cluster cfg reaches.
func NewOwnedClients(cfg *rest.Config) (OwnedClients, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return OwnedClients{}, fmt.Errorf("discovery client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return OwnedClients{}, fmt.Errorf("dynamic client: %w", err)
	}
	return OwnedClients{Discovery: dc, Dynamic: dyn}, nil
}

// DeleteOwned deletes every cluster-scoped object but Namespaces that carries run's OwnerLabel,
// whatever its kind (found through discovery): webhook configurations first, so that nothing
// deleted later is refused by a webhook whose server is gone, CRDs last. It returns what it
// deleted, as "Kind name".
func DeleteOwned(ctx context.Context, cfg *rest.Config, run string) ([]string, error) {
	if run == "" {
		return nil, errors.New("delete owned objects: no run name")
	}
	c, err := NewOwnedClients(cfg)
	if err != nil {
		return nil, err
	}
	return c.DeleteOwned(ctx, run)
}

// DeleteOwned is DeleteOwned through c.
func (c OwnedClients) DeleteOwned(ctx context.Context, run string) ([]string, error) {
	if run == "" {
		return nil, errors.New("delete owned objects: no run name")
	}
	var deleted []string
	err := c.eachOwned(ctx, OwnerLabel+"="+run, func(r clusterResource, ri dynamic.ResourceInterface, o *unstructured.Unstructured) error {
		// deleteIfOwned checks the label again, on the object as it is now: the list may be old.
		if err := deleteIfOwned(ctx, ri, o.GetName(), run); err != nil {
			return fmt.Errorf("delete %s %s: %w", r.kind, o.GetName(), err)
		}
		deleted = append(deleted, r.kind+" "+o.GetName())
		return nil
	})
	return deleted, err
}

// ListOwned returns the cluster-scoped objects but Namespaces that carry run's OwnerLabel
// (every run's when run is ""), by run, each as "Kind name" in the order DeleteOwned deletes
// them. It writes nothing.
func (c OwnedClients) ListOwned(ctx context.Context, run string) (map[string][]string, error) {
	selector := OwnerLabel
	if run != "" {
		selector += "=" + run
	}
	out := map[string][]string{}
	err := c.eachOwned(ctx, selector, func(r clusterResource, _ dynamic.ResourceInterface, o *unstructured.Unstructured) error {
		owner := o.GetLabels()[OwnerLabel]
		out[owner] = append(out[owner], r.kind+" "+o.GetName())
		return nil
	})
	return out, err
}

// clusterResource is a cluster-scoped resource the cluster serves.
type clusterResource struct {
	gvr  schema.GroupVersionResource
	kind string
}

// eachOwned calls do for every cluster-scoped object but Namespaces that selector matches, kind
// by kind: webhook configurations first, CRDs last. Errors are collected, not fatal.
func (c OwnedClients) eachOwned(ctx context.Context, selector string, do func(clusterResource, dynamic.ResourceInterface, *unstructured.Unstructured) error) error {
	// A group that fails discovery (an aggregated API that is down) is skipped, as kubectl does.
	// The package function, not the method: it works from ServerGroupsAndResources, which fakes
	// implement too.
	lists, err := discovery.ServerPreferredResources(c.Discovery)
	if err != nil && len(lists) == 0 {
		return fmt.Errorf("discover the cluster's resources: %w", err)
	}
	var all []clusterResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if r.Namespaced || r.Kind == "Namespace" || strings.Contains(r.Name, "/") ||
				!slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "delete") {
				continue
			}
			all = append(all, clusterResource{gv.WithResource(r.Name), r.Kind})
		}
	}
	rank := func(r clusterResource) int {
		switch {
		case r.gvr.Group == "admissionregistration.k8s.io":
			return 0
		case r.gvr.GroupResource() == crdGVR.GroupResource():
			return 2
		}
		return 1
	}
	slices.SortStableFunc(all, func(a, b clusterResource) int { return rank(a) - rank(b) })
	var errs []error
	for _, r := range all {
		ri := c.Dynamic.Resource(r.gvr)
		l, err := ri.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
			// Kinds the run may not list (a restricted user), or that went away (a CRD deleted
			// just before): the run cannot have created objects of them, or they are gone.
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s (%s): %w", r.gvr.Resource, selector, err))
			continue
		}
		for i := range l.Items {
			if err := do(r, ri, &l.Items[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
