package crds_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"
)

func TestIstioCRDsAreTheKindsTheControlPlanesRead(t *testing.T) {
	objs, err := kube.Decode(crds.Istio)
	require.NoError(t, err)
	var names []string
	for _, o := range objs {
		require.Equal(t, "CustomResourceDefinition", o.GetKind())
		names = append(names, o.GetName())
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		served := map[string]bool{}
		for _, v := range versions {
			m := v.(map[string]any)
			served[m["name"].(string)] = m["served"].(bool)
		}
		require.True(t, served["v1"], "%s must serve networking.istio.io/v1", o.GetName())
	}
	require.ElementsMatch(t, []string{"serviceentries.networking.istio.io", "workloadentries.networking.istio.io", "sidecars.networking.istio.io",
		"gateways.networking.istio.io", "virtualservices.networking.istio.io"}, names)
}
