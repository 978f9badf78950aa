package subject

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
)

// attachedDescriptor is istiod's example descriptor with install: none and remove: keep.
const attachedDescriptor = `install: none
remove: keep
namespace: istio-system
selector: app=istiod
deployment: istiod
container: discovery
xds: {service: istiod, port: 15010}
admin: {port: 15014, metricsPath: /metrics}
`

func writeDescriptor(t *testing.T, y string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "cp.yaml")
	require.NoError(t, os.WriteFile(f, []byte(y), 0o644))
	return f
}

// TestInstallNone: install: none with remove: keep is an attached control plane (a Ballaster
// only with a hook), which neither renders nor removes anything; anything else is refused with
// a line naming the field.
func TestInstallNone(t *testing.T) {
	f := writeDescriptor(t, attachedDescriptor)
	cp, err := Parse("external:" + f)
	require.NoError(t, err)
	a, ok := cp.(Attached)
	require.True(t, ok, "install: none is attached")
	assert.Equal(t, "external:"+f, a.Name())
	_, hook := cp.(Ballaster)
	assert.False(t, hook)
	_, err = a.(*Installed).Render(context.Background())
	assert.ErrorContains(t, err, "installed already, nothing to render")
	require.NoError(t, cp.(Remover).Remove(context.Background(), nil), "remove deletes nothing and needs no cluster")

	cp, err = Parse("external:" + writeDescriptor(t, attachedDescriptor+"ballast: {path: \"/grow?mb={mib}\"}\n"))
	require.NoError(t, err)
	_, ok = cp.(Attached)
	assert.True(t, ok)
	b, hook := cp.(Ballaster)
	require.True(t, hook)
	assert.Equal(t, "http://10.0.0.1:15014/grow?mb=64", b.BallastURL(&corev1.Pod{Status: corev1.PodStatus{PodIP: "10.0.0.1"}}, 64))

	for y, want := range map[string]string{
		strings.Replace(attachedDescriptor, "remove: keep\n", "", 1):                      `remove "": with install none the run installs nothing and must delete nothing: say remove: keep`,
		strings.Replace(attachedDescriptor, "remove: keep", "remove: delete", 1):          `remove "delete": with install none`,
		strings.Replace(attachedDescriptor, "install: none", "install: nothing", 1):       `install "nothing": want none (attach to an installed control plane), {manifests: DIR} or {command: [ARGV]}`,
		strings.Replace(attachedDescriptor, "install: none", "install: {manifest: x}", 1): `unknown field "manifest"`,
		strings.Replace(attachedDescriptor, "install: none", "install: {}", 1):            "install: give manifests (a directory), command (an argv whose output is YAML) or none",
	} {
		_, err := Parse("external:" + writeDescriptor(t, y))
		assert.ErrorContains(t, err, want, y)
		if err != nil {
			assert.NotContains(t, err.Error(), "\n")
		}
	}
}

// TestInstalledIstiod: --cp istiod:installed is the built-in istiod descriptor attached: istiod's
// names, ports, measures and debug credentials, no build needed, nothing removed.
func TestInstalledIstiod(t *testing.T) {
	t.Setenv(bins.IstiodEnv, t.TempDir()) // an empty directory: no build, and none is needed
	cp, err := Parse("istiod:installed")
	require.NoError(t, err)
	assert.Equal(t, "istiod:installed", cp.Name())
	assert.Equal(t, "istio-system", cp.Namespace())
	assert.Equal(t, "app=istiod", cp.Selector())
	assert.Equal(t, "discovery", cp.Container())
	assert.Equal(t, istiodDescriptor.Metrics, cp.Metrics())
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.0.0.1"}}
	assert.Equal(t, "http://10.0.0.1:8080", cp.PprofURL(pod))
	for _, ok := range []bool{is[Attached](cp), is[DebugAuth](cp), is[Injector](cp), is[Remover](cp)} {
		assert.True(t, ok)
	}
	assert.False(t, is[Ballaster](cp), "istiod has no ballast hook: memory faults use the generic hog")
	require.NoError(t, cp.(Remover).Remove(context.Background(), nil))

	_, err = Parse("istiod:attached")
	assert.ErrorContains(t, err, "want istiod, istiod@PIN or istiod:installed")
}

func is[T any](v any) bool { _, ok := v.(T); return ok }

// TestInstalledPlacement: every setting a placement asks is honoured only when the installed
// control plane has it already; otherwise refused, naming the setting and what to pass.
func TestInstalledPlacement(t *testing.T) {
	st := installedState{Deployment: "istio-system/istiod", Container: "discovery", Replicas: 1,
		MemoryLimit: "1Gi", CPULimit: "500m", QoS: "Burstable"}
	none := installedState{Deployment: "istio-system/istiod", Container: "discovery", Replicas: 1, QoS: "BestEffort"}
	ok := []struct {
		st installedState
		p  Placement
	}{
		{st, Placement{}},
		{st, Placement{Node: 1, Nodes: []int{1, 2}}}, // nodes are Deploy's (where the pod runs)
		{st, Placement{MemoryLimit: "1024Mi", CPULimit: "0.5", Ballast: true, QoS: "Burstable", Replicas: 1}},
		{none, Placement{}},
		{none, Placement{QoS: QoSBestEffort}},
	}
	for _, c := range ok {
		assert.NoError(t, c.st.refuse("istiod:installed", c.p), "%+v", c.p)
	}
	refused := []struct {
		st   installedState
		p    Placement
		want string
	}{
		{st, Placement{MemoryLimit: "256Mi"}, "memory limit of 256Mi (parameter cpMemoryLimit=256Mi) and the installed istio-system/istiod's container discovery has 1Gi: an attached control plane is never patched: run with parameter cpMemoryLimit=1Gi"},
		{st, Placement{CPULimit: "100m"}, "run with parameter cpCPULimit=500m"},
		{none, Placement{CPULimit: "100m"}, "has none: an attached control plane is never patched: run with parameter cpCPULimit= (none)"},
		{none, Placement{MemoryLimit: "256Mi", Ballast: true}, "OOM-kills the control plane at its memory limit and the installed istio-system/istiod's container discovery has none: it cannot be OOM-killed honestly"},
		{st, Placement{QoS: QoSGuaranteed}, "QoS class Guaranteed and the installed istio-system/istiod's are Burstable"},
		{st, Placement{Replicas: 3}, "needs 3 control-plane replica(s) and the installed istio-system/istiod has 1: an attached control plane is never scaled"},
		{st, Placement{PriorityClass: "meshchaos-cp"}, "PriorityClass meshchaos-cp and the installed istio-system/istiod's have none"},
	}
	for _, c := range refused {
		err := c.st.refuse("istiod:installed", c.p)
		assert.ErrorContains(t, err, c.want, "%+v", c.p)
		assert.ErrorContains(t, err, "istiod:installed: ")
	}
	err := st.refuse("x", Placement{MemoryLimit: "2Gi", CPULimit: "1", Replicas: 2})
	assert.Equal(t, 3, strings.Count(err.Error(), "never"), "every refused setting is named: %v", err)
}

// TestCheckInstalled reads the Deployment and its ready pod; a control plane that is not there
// or does not serve is refused, saying what to do.
func TestCheckInstalled(t *testing.T) {
	cp, err := NewInstalledIstiod()
	require.NoError(t, err)
	a := cp.(Attached)
	ctx := context.Background()
	cs := fake.NewClientset()
	assert.ErrorContains(t, a.CheckInstalled(ctx, cs, Placement{}), "no Deployment istio-system/istiod: istiod:installed attaches to a control plane installed already and installs nothing: install it first")

	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "istiod", Namespace: "istio-system"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "discovery", Image: "meshchaos.local/istio/pilot:2026-08",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}},
		}}}}}}
	_, err = cs.AppsV1().Deployments("istio-system").Create(ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.ErrorContains(t, a.CheckInstalled(ctx, cs, Placement{}), "no ready pod of the installed control plane (app=istiod in istio-system, 0 pod(s))")

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "istiod-1", Namespace: "istio-system", Labels: map[string]string{"app": "istiod"}},
		Status: corev1.PodStatus{QOSClass: corev1.PodQOSBurstable, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	_, err = cs.CoreV1().Pods("istio-system").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.NoError(t, a.CheckInstalled(ctx, cs, Placement{Node: 1, MemoryLimit: "512Mi", Ballast: true}))
	assert.ErrorContains(t, a.CheckInstalled(ctx, cs, Placement{MemoryLimit: "256Mi", Ballast: true}), "run with parameter cpMemoryLimit=512Mi")
	assert.ErrorContains(t, a.CheckInstalled(ctx, cs, Placement{CPULimit: "100m"}), "has none")
}
