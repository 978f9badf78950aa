package webhook

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshchaos/meshchaos/controlplane/ca"
)

func pod(ann map[string]string, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Annotations: ann, Labels: map[string]string{"app": "a"}}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	return p
}

func TestInjectSkipsWhatItMustNotTouch(t *testing.T) {
	s := Sidecar{Image: "proxy:1", XDSAddress: "cp:15010"}
	for name, p := range map[string]*corev1.Pod{
		"opted out":        pod(map[string]string{InjectAnnotation: "false"}, "app"),
		"already injected": pod(map[string]string{StatusAnnotation: "none"}, "app"),
		"own proxy":        pod(nil, "app", ProxyContainer),
	} {
		patch, _, skip, err := s.Inject(p)
		require.NoError(t, err, name)
		assert.NotEmpty(t, skip, name)
		assert.Nil(t, patch, name)
	}
}

func TestInjectPatchKeepsAnnotationsAndInitContainers(t *testing.T) {
	s := Sidecar{Image: "proxy:1", XDSAddress: "cp:15010", DefaultMode: StartNative}
	p := pod(map[string]string{"team": "x"}, "app")
	p.Spec.InitContainers = []corev1.Container{{Name: "migrate"}}
	patch, mode, skip, err := s.Inject(p)
	require.NoError(t, err)
	require.Empty(t, skip)
	assert.Equal(t, StartNative, mode, "the default mode applies without the annotation")
	var ops []struct {
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	require.NoError(t, json.Unmarshal(patch, &ops))
	got := map[string]json.RawMessage{}
	for _, o := range ops {
		got[o.Path] = o.Value
	}
	var ann map[string]string
	require.NoError(t, json.Unmarshal(got["/metadata/annotations"], &ann))
	assert.Equal(t, map[string]string{"team": "x", StatusAnnotation: "native"}, ann)
	var inits []corev1.Container
	require.NoError(t, json.Unmarshal(got["/spec/initContainers"], &inits))
	require.Len(t, inits, 2)
	assert.Equal(t, []string{ProxyContainer, "migrate"}, []string{inits[0].Name, inits[1].Name}, "the app's init containers run with the mesh")
	assert.Equal(t, int32(60), inits[0].StartupProbe.FailureThreshold, "the startup probe allows WaitTimeout")
}

// Replicas each add their CA to the caBundle: the bundle trusts all of them, a CA already there
// changes nothing, and the oldest are dropped past maxBundleCAs.
func TestWithCAKeepsEveryReplicasCA(t *testing.T) {
	var cas [][]byte
	for i := range maxBundleCAs + 1 {
		c, err := ca.New(fmt.Sprintf("replica-%d", i), time.Hour)
		require.NoError(t, err)
		cas = append(cas, c.PEM)
	}
	b, had := withCA(nil, cas[0])
	assert.False(t, had)
	assert.Equal(t, cas[0], b, "an empty bundle becomes the one CA")
	b, had = withCA(b, cas[1])
	assert.False(t, had)
	assert.Equal(t, append(append([]byte{}, cas[0]...), cas[1]...), b)
	same, had := withCA(b, cas[0])
	assert.True(t, had, "a CA already trusted is not added again")
	assert.Equal(t, b, same)
	for _, ca := range cas[2:] {
		b, _ = withCA(b, ca)
	}
	_, had = withCA(b, cas[0])
	assert.False(t, had, "the oldest CA was dropped")
	for _, ca := range cas[1:] {
		_, had = withCA(b, ca)
		assert.True(t, had)
	}
}
