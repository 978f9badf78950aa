package webhook

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
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

// applied is pod with patch applied, as the apiserver applies it.
func applied(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	require.NoError(t, err)
	ops, err := jsonpatch.DecodePatch(patch)
	require.NoError(t, err)
	doc, err = ops.Apply(doc)
	require.NoError(t, err)
	var out corev1.Pod
	require.NoError(t, json.Unmarshal(doc, &out))
	return &out
}

// patched applies nothing: it reads the patch's values by path.
func patched(t *testing.T, patch []byte) map[string]json.RawMessage {
	t.Helper()
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	require.NoError(t, json.Unmarshal(patch, &ops))
	got := map[string]json.RawMessage{}
	for _, o := range ops {
		require.Equal(t, "add", o.Op)
		got[o.Path] = o.Value
	}
	return got
}

// With a root ConfigMap the proxy dials secure xDS, in every start mode: its args name the
// mounted root and token and the server name, and the pod gets both volumes after its own.
func TestInjectSecureXDS(t *testing.T) {
	s := Sidecar{Image: "proxy:1", XDSAddress: "meshchaos-controlplane.cp.svc:15012", RootConfigMap: "meshchaos-ca-root-cert"}
	for _, mode := range []StartMode{StartNone, StartHold, StartNative} {
		t.Run(string(mode), func(t *testing.T) {
			p := pod(map[string]string{StartAnnotation: string(mode)}, "app")
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			patch, _, _, err := s.Inject(p)
			require.NoError(t, err)
			got := patched(t, patch)
			path := "/spec/containers"
			if mode == StartNative {
				path = "/spec/initContainers"
			}
			var containers []corev1.Container
			require.NoError(t, json.Unmarshal(got[path], &containers))
			var proxy *corev1.Container
			for i := range containers {
				if containers[i].Name == ProxyContainer {
					proxy = &containers[i]
				}
			}
			require.NotNil(t, proxy)
			assert.Subset(t, proxy.Args, []string{"--xds", "meshchaos-controlplane.cp.svc:15012",
				"--xds-root-cert", "/var/run/secrets/istio/root-cert.pem", "--xds-token", "/var/run/secrets/tokens/istio-token",
				"--xds-server-name", "meshchaos-controlplane.cp.svc"})
			assert.ElementsMatch(t, []corev1.VolumeMount{{Name: RootCertVolume, MountPath: "/var/run/secrets/istio", ReadOnly: true},
				{Name: TokenVolume, MountPath: "/var/run/secrets/tokens", ReadOnly: true}}, proxy.VolumeMounts)

			var vols []corev1.Volume
			require.NoError(t, json.Unmarshal(got["/spec/volumes"], &vols))
			require.Len(t, vols, 3)
			assert.Equal(t, "data", vols[0].Name, "the pod's own volumes are kept")
			assert.Equal(t, vols, applied(t, p, patch).Spec.Volumes, "what the apiserver would store")
			assert.Equal(t, "meshchaos-ca-root-cert", vols[1].ConfigMap.Name)
			assert.Equal(t, []corev1.KeyToPath{{Key: "root-cert.pem", Path: "root-cert.pem"}}, vols[1].ConfigMap.Items)
			tok := vols[2].Projected.Sources[0].ServiceAccountToken
			assert.Equal(t, "istio-ca", tok.Audience)
			assert.Equal(t, int64(43200), *tok.ExpirationSeconds)
			assert.Equal(t, "istio-token", tok.Path)
		})
	}
	t.Run("a pod without volumes", func(t *testing.T) {
		p := pod(nil, "app")
		patch, _, _, err := s.Inject(p)
		require.NoError(t, err)
		vols := applied(t, p, patch).Spec.Volumes
		assert.Equal(t, []string{RootCertVolume, TokenVolume}, []string{vols[0].Name, vols[1].Name})
	})
	t.Run("plaintext without a root ConfigMap", func(t *testing.T) {
		plain := Sidecar{Image: "proxy:1", XDSAddress: "cp:15010"}
		patch, _, _, err := plain.Inject(pod(nil, "app"))
		require.NoError(t, err)
		got := patched(t, patch)
		assert.NotContains(t, got, "/spec/volumes")
		assert.NotContains(t, string(got["/spec/containers"]), "--xds-token")
	})
}
