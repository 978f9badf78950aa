package controlplane_test

import (
	"bytes"
	"context"
	"log/slog"

	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apinet "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	admregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/controlplane"
	"github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/controlplane/webhook"
	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"
)

// TestAdmissionWebhooks runs the control plane's webhooks behind a real kube-apiserver, with the
// webhook configurations of the control plane's own manifests (their clientConfig pointed at
// the test's loopback address instead of the Service): the control plane patches its CA into
// their caBundle, the apiserver injects sidecars in each start mode, refuses an unknown mode and
// invalid ServiceEntries, and, with the injector gone, refuses pods of injected namespaces
// (failure policy Fail) while admitting config (Ignore).
func TestAdmissionWebhooks(t *testing.T) {
	s := apiserver.StartForTest(t)
	cfg := s.RESTConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := kube.InstallCRDs(ctx, cfg, crds.Istio)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ic, err := istioclient.NewForConfig(cfg)
	require.NoError(t, err)

	// Everything the control plane logs, at debug level, is kept: the webhook's keys must never
	// be in it (checked at the end).
	var logs lockedBuffer
	defer func() {
		out := logs.String()
		require.Contains(t, out, "control plane started", "the log was captured")
		for _, secret := range []string{"PRIVATE KEY", "BEGIN EC", "PrivateKey", "\"D\":"} {
			require.NotContains(t, out, secret, "key material in the control plane's log")
		}
	}()
	cp, err := controlplane.Start(ctx, controlplane.Options{Kube: cfg, XDSAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", SyncGate: true,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Webhook: &webhook.Options{Addr: "127.0.0.1:0", IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
			Sidecar:        webhook.Sidecar{Image: "meshchaos.local/xdsproxy:dev", PullPolicy: "Never", XDSAddress: "cp.test.svc:15010"},
			MutatingConfig: "meshchaos-sidecar-injector", ValidatingConfig: "meshchaos-validation"}})
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			cp.Stop()
		}
	}()

	// The manifests' webhook configurations, reaching the test's listener by URL.
	y, err := manifests.ControlPlane(manifests.Params{})
	require.NoError(t, err)
	objs, err := kube.Decode(y)
	require.NoError(t, err)
	base := "https://" + cp.Webhook.Addr()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	for _, o := range objs {
		if !strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
			continue
		}
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range hooks {
			hm := h.(map[string]any)
			path, _, _ := unstructured.NestedString(hm, "clientConfig", "service", "path")
			hm["clientConfig"] = map[string]any{"url": base + path}
		}
		require.NoError(t, unstructured.SetNestedSlice(o.Object, hooks, "webhooks"))
		gvr := admregv1.SchemeGroupVersion.WithResource(strings.ToLower(o.GetKind()) + "s")
		_, err = dyn.Resource(gvr).Create(ctx, o, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// The control plane patches its CA in (it polls every 5 s).
	require.NoError(t, kube.Poll(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshchaos-sidecar-injector", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "meshchaos-validation", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return string(m.Webhooks[0].ClientConfig.CABundle) == string(cp.Webhook.CA.PEM) &&
			string(v.Webhooks[0].ClientConfig.CABundle) == string(cp.Webhook.CA.PEM), nil
	}), "the control plane patches its CA into both configurations")

	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "injected", Labels: map[string]string{webhook.NamespaceLabel: "enabled"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
	} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		require.NoError(t, err)
		// No controller manager here: the service account admission needs the default account.
		_, err = cs.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	createPod := func(ns, name, mode string) (*corev1.Pod, error) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "startup"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "meshchaos.local/startup-app:dev"}}}}
		if mode != "" {
			p.Annotations = map[string]string{webhook.StartAnnotation: mode}
		}
		return cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	}
	names := func(cs []corev1.Container) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}

	none, err := createPod("injected", "none", "")
	require.NoError(t, err)
	assert.Equal(t, []string{"app", "proxy"}, names(none.Spec.Containers), "default mode none: the app starts first")
	assert.Empty(t, none.Spec.InitContainers)
	assert.Equal(t, "none", none.Annotations[webhook.StatusAnnotation])
	proxy := none.Spec.Containers[1]
	assert.Equal(t, "meshchaos.local/xdsproxy:dev", proxy.Image)
	assert.Equal(t, corev1.PullNever, proxy.ImagePullPolicy)
	assert.Contains(t, proxy.Args, "cp.test.svc:15010")
	assert.Nil(t, proxy.Lifecycle)
	require.NotNil(t, proxy.ReadinessProbe)
	assert.Equal(t, "/ready", proxy.ReadinessProbe.HTTPGet.Path)

	hold, err := createPod("injected", "hold", "hold")
	require.NoError(t, err)
	assert.Equal(t, []string{"proxy", "app"}, names(hold.Spec.Containers), "hold: the proxy first")
	require.NotNil(t, hold.Spec.Containers[0].Lifecycle)
	assert.Equal(t, []string{"/meshchaos", "workload", "xdsproxy", "wait", "--admin", "127.0.0.1:15000", "--timeout", "1m0s"},
		hold.Spec.Containers[0].Lifecycle.PostStart.Exec.Command)

	native, err := createPod("injected", "native", "native")
	require.NoError(t, err)
	assert.Equal(t, []string{"app"}, names(native.Spec.Containers))
	require.Equal(t, []string{"proxy"}, names(native.Spec.InitContainers), "native: an init container")
	ic0 := native.Spec.InitContainers[0]
	require.NotNil(t, ic0.RestartPolicy)
	assert.Equal(t, corev1.ContainerRestartPolicyAlways, *ic0.RestartPolicy)
	require.NotNil(t, ic0.StartupProbe, "the startup probe gates the app")
	assert.Equal(t, "/ready", ic0.StartupProbe.HTTPGet.Path)

	_, err = createPod("injected", "bogus", "later")
	require.Error(t, err, "an unknown start mode is refused")
	assert.Contains(t, err.Error(), "use none, hold or native")

	plain, err := createPod("plain", "plain", "native")
	require.NoError(t, err)
	assert.Equal(t, []string{"app"}, names(plain.Spec.Containers), "namespaces without the label are not injected")
	assert.Empty(t, plain.Spec.InitContainers)

	m := cp.Metrics.Registry
	requests, err := testutil.GatherAndCount(m, "sidecar_injection_requests_total")
	require.NoError(t, err)
	assert.Equal(t, 1, requests)
	assert.Equal(t, 4.0, counter(t, cp, "sidecar_injection_requests_total"))
	assert.Equal(t, 3.0, counter(t, cp, "sidecar_injection_success_total"))
	assert.Equal(t, 1.0, counter(t, cp, "sidecar_injection_failure_total"))

	// Validation: the model's conversion is the rule.
	good := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "good", Namespace: "plain"},
		Spec: apinet.ServiceEntry{Hosts: []string{"good.test"}, Resolution: apinet.ServiceEntry_STATIC,
			Ports:     []*apinet.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
			Endpoints: []*apinet.WorkloadEntry{{Address: "10.1.2.3"}}}}
	_, err = ic.NetworkingV1().ServiceEntries("plain").Create(ctx, good, metav1.CreateOptions{})
	require.NoError(t, err)
	bad := good.DeepCopy()
	// The CRD admits a wildcard host; this control plane cannot serve one.
	bad.Name, bad.Spec.Hosts = "bad", []string{"*.bad.test"}
	_, err = ic.NetworkingV1().ServiceEntries("plain").Create(ctx, bad, metav1.CreateOptions{})
	require.Error(t, err, "a ServiceEntry the control plane would skip is refused")
	assert.Contains(t, err.Error(), "denied the request")
	assert.Equal(t, 1.0, counter(t, cp, "galley_validation_passed"))
	assert.Equal(t, 1.0, counter(t, cp, "galley_validation_failed"))

	// The control plane gone: injected namespaces take no pods (Fail), config is still admitted (Ignore).
	cp.Stop()
	stopped = true
	_, err = createPod("injected", "orphan", "native")
	require.Error(t, err, "failure policy Fail: no pod without its sidecar")
	assert.Contains(t, err.Error(), "failed calling webhook")
	_, err = createPod("plain", "plain-2", "")
	assert.NoError(t, err, "other namespaces are unaffected")
	bad.Name = "bad-while-down"
	_, err = ic.NetworkingV1().ServiceEntries("plain").Create(ctx, bad, metav1.CreateOptions{})
	assert.NoError(t, err, "failure policy Ignore: config is admitted while the control plane is down")
}

// counter sums a counter's values over its label sets (0 before the first).
func counter(t *testing.T, cp *controlplane.ControlPlane, name string) float64 {
	t.Helper()
	mfs, err := cp.Metrics.Registry.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// lockedBuffer is a bytes.Buffer safe for the control plane's goroutines to log into.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
