package kube_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

// One kube-apiserver (and etcd) for every test here, stopped by TestMain: starting one costs
// seconds. Each test works in namespaces or names of its own.
var (
	srv     *apiserver.Server
	srvErr  error
	srvOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop kube-apiserver:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// server starts the shared API server on first use. It skips the test only when
// MESHCHAOS_SKIP_INTEGRATION=1; missing binaries fail it.
func server(t *testing.T) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	prereq.Integration(t)
	srvOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		srv, srvErr = apiserver.Start(ctx, apiserver.Options{})
	})
	require.NoError(t, srvErr, "start kube-apiserver")
	cfg := srv.RESTConfig()
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cfg, cs
}

// namespace creates a namespace with the default ServiceAccount the ServiceAccount admission
// plugin looks up (no kube-controller-manager here to create it).
func namespace(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	_, err = cs.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// createPod creates a pod (never scheduled: there is no scheduler or kubelet).
func createPod(t *testing.T, cs kubernetes.Interface, ns, name string, labels map[string]string) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "app", Image: "meshchaos.local/echo:dev"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return p
}

// setStatus writes a pod status as kubelet would.
func setStatus(t *testing.T, cs kubernetes.Interface, p *corev1.Pod, edit func(*corev1.PodStatus)) *corev1.Pod {
	t.Helper()
	cur, err := cs.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	require.NoError(t, err)
	edit(&cur.Status)
	out, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), cur, metav1.UpdateOptions{})
	require.NoError(t, err)
	return out
}

func ready(s *corev1.PodStatus) {
	s.Phase = corev1.PodRunning
	s.PodIP = "10.244.0.20"
	s.PodIPs = []corev1.PodIP{{IP: "10.244.0.20"}}
	s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
}

// The custom resource comes before its CRD on purpose: Apply must install the CRD first.
const widgets = `
apiVersion: test.meshchaos.io/v1
kind: Widget
metadata: {name: w1, namespace: apply-test}
spec: {size: 3}
---
apiVersion: v1
kind: Namespace
metadata: {name: apply-test}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.test.meshchaos.io}
spec:
  group: test.meshchaos.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {mode: "%s"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: apply-test}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: meshchaos.local/echo:dev
        resources: {requests: {cpu: 10m}}
`

func TestApplyMultiDocumentWithCRDAndCustomResource(t *testing.T) {
	cfg, cs := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := kube.Apply(ctx, cfg, fmt.Appendf(nil, widgets, "a"), kube.PinToNode("meshchaos.io/node", "2"), kube.CPULimit("web", "200m"))
	require.NoError(t, err)

	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	w, err := dyn.Resource(schema.GroupVersionResource{Group: "test.meshchaos.io", Version: "v1", Resource: "widgets"}).
		Namespace("apply-test").Get(ctx, "w1", metav1.GetOptions{})
	require.NoError(t, err, "the custom resource exists: its CRD was established first")
	size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size")
	assert.EqualValues(t, 3, size)

	cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
	require.NoError(t, err, "a namespaced object without a namespace goes to default")
	assert.Equal(t, "a", cm.Data["mode"])

	d, err := cs.AppsV1().Deployments("apply-test").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"meshchaos.io/node": "2"}, d.Spec.Template.Spec.NodeSelector, "mutators ran before the apply")
	assert.Equal(t, "200m", d.Spec.Template.Spec.Containers[0].Resources.Limits.Cpu().String())

	// Again, with a change: an update, not an AlreadyExists error.
	_, err = kube.Apply(ctx, cfg, fmt.Appendf(nil, widgets, "b"))
	require.NoError(t, err)
	cm, err = cs.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "b", cm.Data["mode"])
	d, err = cs.AppsV1().Deployments("apply-test").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, d.Spec.Template.Spec.NodeSelector, "apply sets what the manifest says: the pin is gone without the mutator")

	_, err = kube.Apply(ctx, cfg, []byte("apiVersion: nowhere.meshchaos.io/v1\nkind: Gadget\nmetadata: {name: g}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "apply Gadget g: the API server does not serve nowhere.meshchaos.io/v1, Kind=Gadget")
}

func TestInstallCRDs(t *testing.T) {
	cfg, _ := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := kube.InstallCRDs(ctx, cfg, crds.Istio, kube.Owned("run1"))
	require.NoError(t, err)
	rep, err := kube.InstallCRDs(ctx, cfg, crds.Istio, kube.Owned("run1"))
	require.NoError(t, err, "installing again is fine")
	assert.Empty(t, rep.Kept, "the run's own CRDs are updated, not kept")
	// Established: a ServiceEntry can be created at once.
	_, err = kube.Apply(ctx, cfg, []byte(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se, namespace: default}
spec: {hosts: [a.mesh.test], ports: [{number: 80, name: http, protocol: HTTP}], resolution: STATIC}
`))
	require.NoError(t, err)

	_, err = kube.InstallCRDs(ctx, cfg, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ConfigMap x is not a CustomResourceDefinition")
}

func TestWaitPodReactsToStatusChange(t *testing.T) {
	_, cs := server(t)
	namespace(t, cs, "waitpod")
	p := createPod(t, cs, "waitpod", "p", nil)

	type result struct {
		pod *corev1.Pod
		err error
		at  time.Time
	}
	seen := make(chan struct{}, 100)
	done := make(chan result, 1)
	go func() {
		pod, err := kube.WaitPod(context.Background(), cs, "waitpod", "p", 30*time.Second, func(p *corev1.Pod) (bool, error) {
			seen <- struct{}{}
			ok, _ := kube.PodReady(p)
			return ok, nil
		})
		done <- result{pod, err, time.Now()}
	}()
	select {
	case <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("WaitPod never looked at the pod")
	}
	select {
	case r := <-done:
		t.Fatalf("WaitPod returned before the pod was ready: %v", r.err)
	default:
	}
	updated := setStatus(t, cs, p, ready)
	updatedAt := time.Now()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("WaitPod did not return after the pod became ready")
	}
	require.NoError(t, r.err)
	ok, _ := kube.PodReady(r.pod)
	assert.True(t, ok, "returns the pod the condition held for")
	assert.Equal(t, updated.ResourceVersion, r.pod.ResourceVersion)
	// A watch, not a poll: the wait ends as soon as the change arrives.
	latency := r.at.Sub(updatedAt)
	t.Logf("WaitPod returned %s after the status update", latency)
	assert.Less(t, latency, 2*time.Second, "a sanity bound; on an idle machine it is well under a millisecond")

	// Timeouts name what was waited for.
	start := time.Now()
	_, err := kube.WaitPod(context.Background(), cs, "waitpod", "p", time.Second, func(p *corev1.Pod) (bool, error) {
		return p.Status.Phase == corev1.PodSucceeded, nil
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "pod waitpod/p: condition not met within 1s; last seen: p (Running")
	assert.Less(t, time.Since(start), 5*time.Second, "the timeout bounds the wait")

	_, err = kube.WaitPod(context.Background(), cs, "waitpod", "missing", time.Second, func(*corev1.Pod) (bool, error) { return true, nil })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pod waitpod/missing not found within 1s")

	boom := errors.New("boom")
	_, err = kube.WaitPod(context.Background(), cs, "waitpod", "p", 10*time.Second, func(*corev1.Pod) (bool, error) { return false, boom })
	assert.ErrorIs(t, err, boom, "the condition's error ends the wait")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = kube.WaitPod(ctx, cs, "waitpod", "p", 10*time.Second, func(*corev1.Pod) (bool, error) { return false, nil })
	assert.ErrorIs(t, err, context.Canceled)
}

func TestWaitPodsReady(t *testing.T) {
	_, cs := server(t)
	namespace(t, cs, "waitpods")
	labels := map[string]string{"app": "echo"}
	b := createPod(t, cs, "waitpods", "echo-b", labels)
	a := createPod(t, cs, "waitpods", "echo-a", labels)
	createPod(t, cs, "waitpods", "other", map[string]string{"app": "other"})
	setStatus(t, cs, b, ready)

	pods, err := kube.WaitPodsReady(context.Background(), cs, "waitpods", "app=echo", 1, 10*time.Second)
	require.NoError(t, err)
	require.Len(t, pods, 1)
	assert.Equal(t, "echo-b", pods[0].Name)

	_, err = kube.WaitPodsReady(context.Background(), cs, "waitpods", "app=echo", 2, time.Second)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "1 of 2 pod(s) app=echo in waitpods ready after 1s")
	assert.Contains(t, err.Error(), "echo-a (Pending")

	setStatus(t, cs, a, ready)
	pods, err = kube.WaitPodsReady(context.Background(), cs, "waitpods", "app=echo", 2, 10*time.Second)
	require.NoError(t, err)
	require.Len(t, pods, 2)
	assert.Equal(t, []string{"echo-a", "echo-b"}, []string{pods[0].Name, pods[1].Name}, "sorted by name")
}

// There is no kube-controller-manager or kubelet: a Deployment never becomes ready, which makes
// the timeout error testable. The test writes the pod and event a real cluster would have.
func TestWaitDeploymentReadyTimeoutSaysWhy(t *testing.T) {
	_, cs := server(t)
	ctx := context.Background()
	namespace(t, cs, "waitdeploy")
	labels := map[string]string{"app": "web"}
	_, err := cs.AppsV1().Deployments("waitdeploy").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "meshchaos.local/echo:dev"}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	err = kube.WaitDeploymentReady(ctx, cs, "waitdeploy", "web", time.Second)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "deployment waitdeploy/web not ready after 1s: 2 replica(s) wanted, 0 updated, 0 ready")
	assert.Contains(t, err.Error(), "pods: none (is kube-controller-manager running?)")

	// A pod of the Deployment whose image is missing, as kubelet reports it.
	p := createPod(t, cs, "waitdeploy", "web-1", labels)
	p = setStatus(t, cs, p, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady",
			Message: "containers with unready status: [app]"}}
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "meshchaos.local/echo:dev",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull",
				Message: "Container image \"meshchaos.local/echo:dev\" is not present with pull policy of Never"}}}}
	})
	_, err = cs.CoreV1().Events("waitdeploy").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "web-1.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "waitdeploy", Name: "web-1", UID: p.UID},
		Type:           corev1.EventTypeWarning, Reason: "ErrImageNeverPull", Message: "Container image is not present with pull policy of Never",
		LastTimestamp: metav1.Now(),
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	err = kube.WaitDeploymentReady(ctx, cs, "waitdeploy", "web", time.Second)
	require.Error(t, err)
	msg := err.Error()
	t.Log(msg)
	assert.Contains(t, msg, `pods: web-1 (Pending, node ""`)
	assert.Contains(t, msg, "Ready=False ContainersNotReady: containers with unready status: [app]")
	assert.Contains(t, msg, `container app waiting: ErrImageNeverPull: Container image "meshchaos.local/echo:dev" is not present`)
	assert.Contains(t, msg, "events: Warning ErrImageNeverPull: Container image is not present with pull policy of Never")

	err = kube.WaitDeploymentReady(ctx, cs, "waitdeploy", "missing", time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "deployment waitdeploy/missing not found within 1s")
}

func TestWaitNodesReady(t *testing.T) {
	_, cs := server(t)
	ctx := context.Background()
	node := func(name string, cond corev1.NodeCondition) {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
		cond.Type = corev1.NodeReady
		n.Status.Conditions = []corev1.NodeCondition{cond}
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	node("n1", corev1.NodeCondition{Status: corev1.ConditionTrue, Reason: "KubeletReady"})
	node("n2", corev1.NodeCondition{Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "container runtime network not ready"})

	require.NoError(t, kube.WaitNodesReady(ctx, cs, 1, 10*time.Second))
	err := kube.WaitNodesReady(ctx, cs, 2, time.Second)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "1 of 2 node(s) ready after 1s (2 registered; not ready: n2 NotReady (KubeletNotReady: container runtime network not ready))")
}

// The cluster's own objects, as a staging cluster has them: a CRD of another version (it serves
// v1 only, where the run's copy serves v1 and v2) and a ClusterRole of the same name as one in
// the run's manifests.
const stagingObjects = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.staging.meshchaos.io, labels: {release: staging-1.22}}
spec:
  group: staging.meshchaos.io
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: mesh-reader}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
`

// runObjects are a run's manifests: its copies of the cluster's CRD and ClusterRole, and a
// ClusterRole and a ConfigMap of its own.
const runObjects = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.staging.meshchaos.io}
spec:
  group: staging.meshchaos.io
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo}
  versions:
  - name: v1
    served: true
    storage: false
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
  - name: v2
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: mesh-reader}
rules: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: run-reader}
rules: [{apiGroups: [""], resources: [%s], verbs: [get]}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: run-settings, namespace: default}
data: {mode: a}
`

// On a cluster that is someone's staging mesh, a run creates what is absent, changes only what
// it created, leaves the cluster's own cluster-scoped objects exactly as they were (same
// resourceVersion) and says how their CRD differs; another run does not change the first's
// cluster-scoped objects (namespaced ones live in namespaces each run claims); Delete and DeleteOwned remove the run's objects and nothing else.
func TestApplyChangesOnlyWhatTheRunCreated(t *testing.T) {
	cfg, cs := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := kube.Apply(ctx, cfg, []byte(stagingObjects))
	require.NoError(t, err)
	crds := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crdBefore, err := crds.Get(ctx, "gizmos.staging.meshchaos.io", metav1.GetOptions{})
	require.NoError(t, err)
	roleBefore, err := cs.RbacV1().ClusterRoles().Get(ctx, "mesh-reader", metav1.GetOptions{})
	require.NoError(t, err)

	rep, err := kube.Apply(ctx, cfg, fmt.Appendf(nil, runObjects, "pods"), kube.Owned("run1"))
	require.NoError(t, err)
	require.Len(t, rep.Kept, 2, "%q", rep.Kept)
	assert.Contains(t, rep.Kept[0], "CustomResourceDefinition gizmos.staging.meshchaos.io: the cluster's own, kept as it is (version mismatch: it serves v1, this run's copy v1, v2; objects of version v2 will be refused)")
	assert.Contains(t, rep.Kept[1], "ClusterRole mesh-reader: the cluster's own, kept as it is")
	crdAfter, err := crds.Get(ctx, "gizmos.staging.meshchaos.io", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, crdBefore.GetResourceVersion(), crdAfter.GetResourceVersion(), "the cluster's CRD is not written")
	roleAfter, err := cs.RbacV1().ClusterRoles().Get(ctx, "mesh-reader", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, roleBefore.ResourceVersion, roleAfter.ResourceVersion, "the cluster's ClusterRole is not written")
	assert.Equal(t, []string{"get"}, roleAfter.Rules[0].Verbs)

	mine, err := cs.RbacV1().ClusterRoles().Get(ctx, "run-reader", metav1.GetOptions{})
	require.NoError(t, err, "what is absent is created")
	assert.Equal(t, "run1", mine.Labels[kube.OwnerLabel])

	// The run's own object is updated by the run, not by another one.
	_, err = kube.Apply(ctx, cfg, fmt.Appendf(nil, runObjects, "services"), kube.Owned("run1"))
	require.NoError(t, err)
	mine, err = cs.RbacV1().ClusterRoles().Get(ctx, "run-reader", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"services"}, mine.Rules[0].Resources)
	rep, err = kube.Apply(ctx, cfg, []byte(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: run-reader}
rules: [{apiGroups: [""], resources: [secrets], verbs: [get]}]
`), kube.Owned("run2"))
	require.NoError(t, err)
	assert.Equal(t, []string{"ClusterRole run-reader: the cluster's own, kept as it is"}, rep.Kept, "run2 keeps run1's ClusterRole")
	mine, err = cs.RbacV1().ClusterRoles().Get(ctx, "run-reader", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"services"}, mine.Rules[0].Resources)

	// Delete as another run deletes nothing of run1's; as run1, its own objects only.
	require.NoError(t, kube.Delete(ctx, cfg, fmt.Appendf(nil, runObjects, "pods"), "run3"))
	_, err = cs.RbacV1().ClusterRoles().Get(ctx, "run-reader", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, kube.Delete(ctx, cfg, fmt.Appendf(nil, runObjects, "pods"), "run1"))
	_, err = cs.RbacV1().ClusterRoles().Get(ctx, "run-reader", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the run's ClusterRole is deleted: %v", err)
	_, err = cs.CoreV1().ConfigMaps("default").Get(ctx, "run-settings", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the run's ConfigMap is deleted: %v", err)
	crdAfter, err = crds.Get(ctx, "gizmos.staging.meshchaos.io", metav1.GetOptions{})
	require.NoError(t, err, "the cluster's CRD stays")
	assert.Equal(t, crdBefore.GetResourceVersion(), crdAfter.GetResourceVersion())
	_, err = cs.RbacV1().ClusterRoles().Get(ctx, "mesh-reader", metav1.GetOptions{})
	require.NoError(t, err, "the cluster's ClusterRole stays")

	// DeleteOwned finds the run's cluster-scoped objects of any kind by their label.
	_, err = kube.Apply(ctx, cfg, []byte(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: run-binding}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: mesh-reader}
subjects: [{kind: ServiceAccount, name: default, namespace: default}]
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: run-priority}
value: 1000
`), kube.Owned("run4"))
	require.NoError(t, err)
	deleted, err := kube.DeleteOwned(ctx, cfg, "run4")
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"ClusterRoleBinding run-binding", "PriorityClass run-priority"}, deleted)
	_, err = cs.SchedulingV1().PriorityClasses().Get(ctx, "run-priority", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "%v", err)
	_, err = cs.RbacV1().ClusterRoles().Get(ctx, "mesh-reader", metav1.GetOptions{})
	require.NoError(t, err, "DeleteOwned leaves what the run did not label")
}
