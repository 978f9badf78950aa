package kube

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apinet "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// The informer keeps a ServiceEntry as its metadata and the model's conversion, not the decoded
// spec; the informer's machinery (keys, deletes, a relist handing back transformed objects) still
// works on it.
func TestStripConvertsServiceEntry(t *testing.T) {
	// As the apiserver sends it: enums by name, a field this version does not know, a status.
	raw := `{"apiVersion":"networking.istio.io/v1","kind":"ServiceEntry",
		"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","uid":"u1","annotations":{"big":"x"}},
		"spec":{"hosts":["a.test"],"resolution":"STATIC","location":"MESH_INTERNAL","futureField":{"x":1},
			"ports":[{"number":80,"name":"http","protocol":"HTTP","targetPort":8080},{"number":80,"name":"dup","protocol":"HTTP"}],
			"endpoints":[{"address":"10.0.0.1","labels":{"app":"a"},"ports":{"http":9090}}]},
		"status":{"conditions":[]}}`
	obj, _, err := seCodecs().UniversalDeserializer().Decode([]byte(raw), nil, nil)
	require.NoError(t, err)
	se, ok := obj.(*wireServiceEntry)
	require.True(t, ok, "got %T", obj)
	assert.Equal(t, apinet.ServiceEntry_STATIC, se.Spec.se.GetResolution())
	assert.Equal(t, uint32(9090), se.Spec.se.GetEndpoints()[0].GetPorts()["http"])
	assert.Equal(t, "7", se.ResourceVersion)

	out, err := strip(se)
	require.NoError(t, err)
	c, ok := out.(*ConvertedServiceEntry)
	require.True(t, ok, "got %T", out)
	require.NotNil(t, c.Conv)
	require.Len(t, c.Conv.Services, 1)
	assert.Equal(t, "a.test", c.Conv.Services[0].Hostname)
	require.Len(t, c.Conv.Endpoints, 1)
	require.Len(t, c.Skips, 1, "the duplicate port is reported when the event is applied")
	assert.Nil(t, c.Annotations, "only the metadata the informer needs is kept")

	key, err := cache.MetaNamespaceKeyFunc(c)
	require.NoError(t, err)
	assert.Equal(t, "ns/a", key)
	a, err := meta.Accessor(c)
	require.NoError(t, err)
	assert.Equal(t, "7", a.GetResourceVersion())

	again, err := strip(c)
	require.NoError(t, err)
	assert.Same(t, c, again, "transforming twice changes nothing")

	cp := c.DeepCopyObject().(*ConvertedServiceEntry)
	assert.Equal(t, c.ObjectMeta, cp.ObjectMeta)
	assert.Same(t, c.Conv, cp.Conv)

	bad, err := strip(&wireServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}})
	require.NoError(t, err)
	assert.Nil(t, bad.(*ConvertedServiceEntry).Conv, "nothing usable: the model deletes what it had")
	assert.NotEmpty(t, bad.(*ConvertedServiceEntry).Skips)
}
