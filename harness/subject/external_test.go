package subject

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	cpmanifests "github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"
)

const refDescriptor = "../../examples/controlplanes/reference.yaml"

// TestReferenceDescriptor: the example descriptor says of the reference control plane what
// Reference knows (metrics, names, ports), so an experiment measures the same through either.
func TestReferenceDescriptor(t *testing.T) {
	cp, err := Parse("external:" + refDescriptor)
	require.NoError(t, err)
	assert.Equal(t, "external:"+refDescriptor, cp.Name())
	ref := &Reference{ns: "meshchaos-system"}
	assert.Equal(t, ref.Metrics(), cp.Metrics())
	assert.Equal(t, ref.Namespace(), cp.Namespace())
	assert.Equal(t, ref.Selector(), cp.Selector())
	assert.Equal(t, ref.Container(), cp.Container())
	assert.Equal(t, ref.MetricsPath(), cp.MetricsPath())
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.244.0.5"}}
	assert.Equal(t, ref.AdminURL(pod), cp.AdminURL(pod))
	assert.Equal(t, ref.PprofURL(pod), cp.PprofURL(pod))
	_, hook := cp.(Ballaster)
	assert.False(t, hook, "the example leaves the ballast hook out, so memory faults use the generic hog")
	var _ Remover = cp.(Remover)
}

// TestReferenceManifestsRendered: examples/controlplanes/reference holds what --cp reference
// applies today (re-render with 'meshchaos controlplane manifests --out examples/controlplanes/reference').
func TestReferenceManifestsRendered(t *testing.T) {
	want, err := cpmanifests.ControlPlane(cpmanifests.Params{SyncGate: true})
	require.NoError(t, err)
	dir := filepath.Dir(refDescriptor) + "/reference"
	got, err := os.ReadFile(filepath.Join(dir, "controlplane.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "stale: run 'meshchaos controlplane manifests --out examples/controlplanes/reference'")
	written, err := os.ReadFile(filepath.Join(dir, "crds.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(crds.Istio), string(written), "stale CRDs: re-render as above")

	cp, err := LoadExternal(refDescriptor)
	require.NoError(t, err)
	y, err := cp.(*External).Render(context.Background())
	require.NoError(t, err)
	objs, err := kube.Decode(y)
	require.NoError(t, err)
	assert.Len(t, objs, 5+10, "5 CRDs, then the control plane's 10 objects")
}

// TestExternalPlacement: only the descriptor's Deployment is placed: node, limits, replicas
// spread by the descriptor's selector.
func TestExternalPlacement(t *testing.T) {
	cp, err := LoadExternal(refDescriptor)
	require.NoError(t, err)
	e := cp.(*External)
	place, err := e.placement(Placement{Node: 1, CPULimit: "200m", MemoryLimit: "256Mi", Replicas: 2})
	require.NoError(t, err)
	y, err := e.Render(context.Background())
	require.NoError(t, err)
	objs, err := kube.Decode(y)
	require.NoError(t, err)
	other := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "gateway", "namespace": "meshchaos-system"},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "gw"}}}}}}}
	objs = append(objs, other)
	var dep *unstructured.Unstructured
	for _, o := range objs {
		require.NoError(t, place(o))
		if o.GetKind() == "Deployment" && o.GetName() == "meshchaos-controlplane" {
			dep = o
		}
	}
	require.NotNil(t, dep)
	sel, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "spec", "nodeSelector")
	assert.Equal(t, "1", sel["meshchaos.io/node"])
	c := container(t, dep)
	lim, _, _ := unstructured.NestedStringMap(c, "resources", "limits")
	assert.Equal(t, map[string]string{"cpu": "200m", "memory": "256Mi"}, lim)
	n, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas")
	assert.Equal(t, int64(2), n)
	anti, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "affinity", "podAntiAffinity",
		"preferredDuringSchedulingIgnoredDuringExecution")
	require.Len(t, anti, 1)
	match, _, _ := unstructured.NestedStringMap(anti[0].(map[string]any), "podAffinityTerm", "labelSelector", "matchLabels")
	assert.Equal(t, map[string]string{"app": "meshchaos-controlplane"}, match)
	_, found, _ := unstructured.NestedFieldNoCopy(other.Object, "spec", "template", "spec", "nodeSelector")
	assert.False(t, found, "the chart's other workloads keep their own placement")
}

// TestExternalCommandAndHook: a command's output is the install; a declared ballast hook makes
// the control plane a Ballaster.
func TestExternalCommandAndHook(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cp.yaml"), []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: mesh}\n"), 0o644))
	file := filepath.Join(dir, "d.yaml")
	require.NoError(t, os.WriteFile(file, []byte(minimal+`
ballast: {path: "/debug/grow?to={mib}"}
`), 0o644))
	cp, err := Parse("external:" + file)
	require.NoError(t, err)
	b, ok := cp.(Ballaster)
	require.True(t, ok)
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.244.0.7"}}
	assert.Equal(t, "http://10.244.0.7:15014/debug/grow?to=512", b.BallastURL(pod, 512))
	y, err := cp.(externalBallaster).Render(context.Background())
	require.NoError(t, err)
	assert.Contains(t, string(y), "name: mesh", "the command ran in the descriptor's directory")
	assert.Empty(t, cp.Metrics())
}

// minimal is a valid descriptor whose install is a command.
const minimal = `install: {command: [cat, cp.yaml]}
namespace: mesh
selector: app=cp
deployment: cp
container: discovery
xds: {service: cp, port: 15010}
admin: {port: 15014, metricsPath: /metrics}
`

// TestExternalBadDescriptors: each mistake is one line naming the field.
func TestExternalBadDescriptors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ name, yaml, want string }{
		{"unknown field", minimal + "xds_port: 1\n", `unknown field "xds_port"`},
		{"typo in a nested field", strings.Replace(minimal, "metricsPath", "metricPath", 1), `unknown field "metricPath"`},
		{"no install", strings.Replace(minimal, "install: {command: [cat, cp.yaml]}", "", 1), "install: give manifests"},
		{"both installs", strings.Replace(minimal, "command: [cat, cp.yaml]", "command: [cat], manifests: .", 1), "not both"},
		{"missing manifests dir", strings.Replace(minimal, "command: [cat, cp.yaml]", "manifests: nowhere", 1), `install.manifests "nowhere": not a directory`},
		{"no namespace", strings.Replace(minimal, "namespace: mesh", "", 1), "namespace: required"},
		{"set selector", strings.Replace(minimal, "app=cp", "app in (cp)", 1), `selector "app in (cp)"`},
		{"bad port", strings.Replace(minimal, "port: 15010", "port: 0", 1), "xds.port 0"},
		{"port as text", strings.Replace(minimal, "port: 15010", "port: grpc", 1), "xds.port"},
		{"relative path", strings.Replace(minimal, "/metrics", "metrics", 1), `admin.metricsPath "metrics"`},
		{"unknown measure", minimal + "metrics: {pushes: {name: x}}\n", `unknown measure "pushes"; known: full-pushes`},
		{"bad metric name", minimal + "metrics: {full-pushes: {name: 'a-b'}}\n", `metrics.full-pushes.name "a-b"`},
		{"label typo", minimal + "metrics: {full-pushes: {name: x, label: {a: b}}}\n", `unknown field "label"`},
		{"hook without size", minimal + "ballast: {path: /debug/ballast}\n", "{mib}"},
		{"bad timeout", minimal + "ready: {timeout: soon}\n", `ready.timeout "soon"`},
		{"bad remove", minimal + "remove: uninstall\n", `remove "uninstall"`},
		{"repeated field", minimal + "namespace: again\n", `"namespace" already set`},
		{"secure port without root", minimal + "secureXDS: {service: cp, port: 15012}\n", "secureXDS.rootConfigMap: required"},
		{"secure port without port", minimal + "secureXDS: {service: cp, rootConfigMap: root}\n", "secureXDS: want service and port"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, "bad.yaml")
			require.NoError(t, os.WriteFile(file, []byte(c.yaml), 0o644))
			_, err := Parse("external:" + file)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "control plane external:"+file)
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
	_, err := Parse("external:" + filepath.Join(dir, "absent.yaml"))
	assert.ErrorContains(t, err, "no such file")
	_, err = Parse("external:")
	assert.ErrorContains(t, err, "name the descriptor file")
	_, err = Parse("external:" + refDescriptor + ":ungated")
	assert.ErrorContains(t, err, `regression switches ("ungated") belong to the reference control plane`)
}

// TestIstiodDescriptorParses: the istiod example is valid (it is not deployed here: it needs
// istio's charts and images from the network).
func TestIstiodDescriptorParses(t *testing.T) {
	cp, err := Parse("external:../../examples/controlplanes/istiod.yaml")
	require.NoError(t, err)
	assert.Equal(t, "istio-system", cp.Namespace())
	assert.Equal(t, "discovery", cp.Container())
	assert.Equal(t, Metric{Name: "pilot_xds_pushes", Labels: map[string]string{"type": "eds"}}, cp.Metrics()[EDSPushes])
	_, hook := cp.(Ballaster)
	assert.False(t, hook)
	// It says of istiod what --cp istiod knows: the same names, ports and measures.
	assert.Equal(t, istiodDescriptor.Metrics, cp.Metrics())
	assert.Equal(t, istiodDescriptor.Admin, cp.(*External).d.Admin)
	assert.Equal(t, istiodDescriptor.XDS, cp.(*External).d.XDS)
	assert.Equal(t, istiodDescriptor.SecureXDS, cp.(*External).d.SecureXDS)
	_, serves := cp.(SecureServer).SecureXDS()
	assert.True(t, serves, "the example declares istiod's 15012")
}
