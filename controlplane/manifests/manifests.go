// Package manifests holds what the reference control plane needs in a cluster: the Istio
// ServiceEntry/WorkloadEntry CRDs and its Namespace, RBAC, Deployment and Service, embedded so
// the harness can apply them.
package manifests

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"text/template"
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

	"github.com/meshchaos/meshchaos/images"
)

// CRDs is the YAML of the ServiceEntry and WorkloadEntry CRDs (istio.io/api v1.31.1).
//
//go:embed crds.yaml
var CRDs []byte

//go:embed controlplane.yaml
var controlPlaneTemplate string

// Params fill the control plane's manifests.
type Params struct {
	Namespace   string   // default meshchaos-system
	Image       string   // default images.Ref("controlplane")
	PullPolicy  string   // default Never (images are imported, there is no registry)
	SyncGate    bool     // --sync-gate
	Regress     []string // --regress switches
	MemoryLimit string   // default 1Gi
}

// ControlPlane renders the Namespace, ServiceAccount, ClusterRole(Binding), Deployment and
// Service of the reference control plane. Its readiness probe is /ready (the sync gate).
func ControlPlane(p Params) ([]byte, error) {
	if p.Namespace == "" {
		p.Namespace = "meshchaos-system"
	}
	if p.Image == "" {
		p.Image = images.Ref("controlplane")
	}
	if p.PullPolicy == "" {
		p.PullPolicy = "Never"
	}
	if p.MemoryLimit == "" {
		p.MemoryLimit = "1Gi"
	}
	t, err := template.New("controlplane").Parse(controlPlaneTemplate)
	if err != nil {
		return nil, fmt.Errorf("parse control plane manifest: %w", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, p); err != nil {
		return nil, fmt.Errorf("render control plane manifest: %w", err)
	}
	return b.Bytes(), nil
}

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

// Apply creates every object in data (or updates it if it exists).
func Apply(ctx context.Context, cfg *rest.Config, data []byte) error {
	objs, err := Decode(data)
	if err != nil {
		return err
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

// InstallCRDs applies the CRDs and waits until the API server serves them.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	objs, err := Decode(CRDs)
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
