package kube

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

var (
	clusterRoles = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	webhooks     = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
	namespaces   = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	configMaps   = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

func object(gvr schema.GroupVersionResource, kind, namespace, name, run string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(gvr.GroupVersion().String())
	o.SetKind(kind)
	o.SetName(name)
	o.SetNamespace(namespace)
	o.SetUID(types.UID("uid-" + name))
	if run != "" {
		o.SetLabels(map[string]string{OwnerLabel: run})
	}
	return o
}

// fakeOwnedClients serves cluster roles, webhook configurations, CRDs, namespaces and config
// maps (the last namespaced) holding objs.
func fakeOwnedClients(objs ...runtime.Object) (OwnedClients, *fakedynamic.FakeDynamicClient) {
	verbs := metav1.Verbs{"get", "list", "delete"}
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "namespaces", Kind: "Namespace", Verbs: verbs},
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: verbs},
		}},
		{GroupVersion: "apiextensions.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "customresourcedefinitions", Kind: "CustomResourceDefinition", Verbs: verbs}}},
		{GroupVersion: "rbac.authorization.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "clusterroles", Kind: "ClusterRole", Verbs: verbs}}},
		{GroupVersion: "admissionregistration.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "validatingwebhookconfigurations", Kind: "ValidatingWebhookConfiguration", Verbs: verbs}}},
	}}}
	dyn := fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		clusterRoles: "ClusterRoleList", webhooks: "ValidatingWebhookConfigurationList", crdGVR: "CustomResourceDefinitionList",
		namespaces: "NamespaceList", configMaps: "ConfigMapList",
	}, objs...)
	return OwnedClients{Discovery: disc, Dynamic: dyn}, dyn
}

// DeleteOwned by a run's name deletes what carries that run's label and nothing else: not
// another run's objects, not the cluster's own, not Namespaces (their owner deletes them after
// their pods) and nothing namespaced.
func TestDeleteOwnedTouchesOnlyTheRunsObjects(t *testing.T) {
	ctx := context.Background()
	c, dyn := fakeOwnedClients(
		object(crdGVR, "CustomResourceDefinition", "", "gateways.example.io", "run-a"),
		object(clusterRoles, "ClusterRole", "", "cp", "run-a"),
		object(webhooks, "ValidatingWebhookConfiguration", "", "cp-validator", "run-a"),
		object(clusterRoles, "ClusterRole", "", "other-run", "run-b"),
		object(clusterRoles, "ClusterRole", "", "cluster-admin", ""),
		object(namespaces, "Namespace", "", "meshchaos-workloads", "run-a"),
		object(configMaps, "ConfigMap", "meshchaos-workloads", "cfg", "run-a"),
	)

	left, err := c.ListOwned(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{
		"run-a": {"ValidatingWebhookConfiguration cp-validator", "ClusterRole cp", "CustomResourceDefinition gateways.example.io"},
		"run-b": {"ClusterRole other-run"},
	}, left, "every run's cluster-scoped objects, namespaces and namespaced objects aside")

	deleted, err := c.DeleteOwned(ctx, "run-a")
	require.NoError(t, err)
	assert.Equal(t, []string{"ValidatingWebhookConfiguration cp-validator", "ClusterRole cp", "CustomResourceDefinition gateways.example.io"}, deleted,
		"webhook configurations first, CRDs last")

	var deletes []string
	for _, a := range dyn.Actions() {
		if d, ok := a.(clienttesting.DeleteAction); ok {
			deletes = append(deletes, d.GetResource().Resource+"/"+d.GetName())
		}
	}
	assert.Equal(t, []string{"validatingwebhookconfigurations/cp-validator", "clusterroles/cp", "customresourcedefinitions/gateways.example.io"}, deletes,
		"nothing without run-a's label was deleted")
	for _, kept := range []struct {
		gvr             schema.GroupVersionResource
		namespace, name string
	}{{clusterRoles, "", "other-run"}, {clusterRoles, "", "cluster-admin"}, {namespaces, "", "meshchaos-workloads"}, {configMaps, "meshchaos-workloads", "cfg"}} {
		_, err := dyn.Resource(kept.gvr).Namespace(kept.namespace).Get(ctx, kept.name, metav1.GetOptions{})
		assert.NoError(t, err, "%s %s is still there", kept.gvr.Resource, kept.name)
	}

	left, err = c.ListOwned(ctx, "run-a")
	require.NoError(t, err)
	assert.Empty(t, left, "run-a left nothing cluster-scoped")
	_, err = c.DeleteOwned(ctx, "")
	assert.ErrorContains(t, err, "no run name", "an empty name would match everything")
}
