package manifests

import (
	"context"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
)

func decode(t *testing.T, b []byte) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, doc := range strings.Split(string(b), "\n---\n") {
		body := false
		for _, line := range strings.Split(doc, "\n") {
			if l := strings.TrimSpace(line); l != "" && l != "---" && !strings.HasPrefix(l, "#") {
				body = true
			}
		}
		if !body {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		require.NoError(t, err, "document:\n%s", doc)
		out = append(out, obj)
	}
	return out
}

func render(t *testing.T, name string, v Values) []runtime.Object {
	t.Helper()
	if v.XDSAddress == "" {
		v.XDSAddress = "meshchaos-cp.meshchaos-system.svc:15010"
	}
	if v.Dependency == "" {
		v.Dependency = "echo.default.svc.cluster.local"
	}
	if v.GRPCTargets == nil {
		v.GRPCTargets, v.GRPCRate = []string{"se-0.mesh.test:80"}, 10
	}
	b, err := Render(name, v)
	require.NoError(t, err)
	return decode(t, b)
}

func deployment(t *testing.T, objs []runtime.Object) *appsv1.Deployment {
	t.Helper()
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			return d
		}
	}
	t.Fatal("no Deployment")
	return nil
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestLocalUsesImportedImagesAndXDSProxy(t *testing.T) {
	for _, n := range Names {
		for _, c := range deployment(t, render(t, n, Values{Substrate: Local()})).Spec.Template.Spec.Containers {
			assert.True(t, strings.HasPrefix(c.Image, "meshchaos.local/") && strings.HasSuffix(c.Image, ":dev"), "%s: %s", n, c.Image)
			assert.Equal(t, corev1.PullNever, c.ImagePullPolicy, n)
		}
	}
	gw := deployment(t, render(t, "gateway", Values{Substrate: Local(), Delta: true})).Spec.Template.Spec.Containers[0]
	assert.Equal(t, "meshchaos.local/xdsproxy:dev", gw.Image)
	assert.Contains(t, strings.Join(gw.Args, " "), "--xds meshchaos-cp.meshchaos-system.svc:15010 --node-id router~$(POD_IP)~")
	assert.Contains(t, gw.Args, "--delta")
	assert.Equal(t, "/ready", gw.ReadinessProbe.HTTPGet.Path)
	assert.Nil(t, gw.Lifecycle, "the gateway holds nothing")
	assert.Contains(t, gw.Ports, corev1.ContainerPort{Name: "http-80", ContainerPort: 80}, "the listener port")
}

// The gRPC clients speak as proxyless pods of their namespace (one node id per client, the
// pod's metadata), call every target, and reach a secure port with the sidecars' files.
func TestGRPCClientArgs(t *testing.T) {
	c := deployment(t, render(t, "grpc-client", Values{Substrate: Kind(""), Clients: 3, GRPCRate: 100,
		GRPCTargets: []string{"se-0.mesh.test:80", "se-1.mesh.test:80"}, SecureXDS: &SecureXDS{RootConfigMap: "istio-ca-root-cert"}})).Spec.Template.Spec
	require.Len(t, c.Containers, 1)
	args := strings.Join(c.Containers[0].Args, " ")
	for _, want := range []string{"--node-id sidecar~$(POD_IP)~$(POD_NAME)-%d.$(POD_NAMESPACE)~$(POD_NAMESPACE).svc.cluster.local",
		"--clients 3", "--rate 100", "--listen :8080", "--target se-0.mesh.test:80 --target se-1.mesh.test:80",
		"--xds-root-cert " + RootCertFile, "--xds-token " + TokenFile, `"NAMESPACE":"$(POD_NAMESPACE)"`} {
		assert.Contains(t, args, want)
	}
	assert.Equal(t, "meshchaos.local/grpc-client:dev", c.Containers[0].Image)
	assert.Equal(t, "/ready", c.Containers[0].ReadinessProbe.HTTPGet.Path, "ready once every channel was served")
	assert.Equal(t, "istio-ca-root-cert", c.Volumes[0].ConfigMap.Name, "grpc-go is no Envoy: secure on kind too")

	_, err := Render("grpc-client", withDefaults(Values{Substrate: Local()}))
	assert.ErrorContains(t, err, "GRPCTargets")
}

func TestAppStartOrderVariants(t *testing.T) {
	plain := deployment(t, render(t, "app", Values{Substrate: Local()})).Spec.Template.Spec
	assert.Equal(t, []string{"app", "proxy"}, names(plain.Containers), "plain: the app starts first (the incident)")
	for _, c := range plain.Containers {
		assert.Nil(t, c.Lifecycle)
	}
	app := plain.Containers[0]
	assert.Equal(t, "meshchaos.local/startup-app:dev", app.Image)
	assert.Equal(t, []string{"--target", "http://127.0.0.1:80/", "--host", "echo.default.svc.cluster.local", "--attempts", "1", "--addr", ":8080", "--termination-log", "/dev/termination-log"}, app.Args)

	injected := deployment(t, render(t, "app", Values{Substrate: Local(), StartMode: "native", Dependency: "echo.test",
		Attempts: 8, RetryInterval: 100 * time.Millisecond, RetryMaxInterval: 2 * time.Second}))
	assert.Equal(t, []string{"app"}, names(injected.Spec.Template.Spec.Containers), "injected: the webhook adds the proxy")
	assert.Equal(t, "native", injected.Spec.Template.Annotations["sidecar.meshchaos.io/start"])
	assert.Equal(t, "/attempts", injected.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, []string{"--target", "http://127.0.0.1:80/", "--host", "echo.test", "--attempts", "8", "--addr", ":8080",
		"--termination-log", "/dev/termination-log", "--interval", "100ms", "--max-interval", "2s"}, injected.Spec.Template.Spec.Containers[0].Args)

	hold := deployment(t, render(t, "app", Values{Substrate: Local(), HoldApp: true})).Spec.Template.Spec
	assert.Equal(t, []string{"proxy", "app"}, names(hold.Containers), "hold: the proxy starts first")
	require.NotNil(t, hold.Containers[0].Lifecycle)
	assert.Equal(t, []string{"/meshchaos", "workload", "xdsproxy", "wait", "--admin", "127.0.0.1:15000", "--timeout", "1m0s"}, hold.Containers[0].Lifecycle.PostStart.Exec.Command)
}

func TestEchoAndAdsload(t *testing.T) {
	objs := render(t, "echo", Values{Substrate: Local(), Name: "echo-a", Replicas: 3, EchoEnv: map[string]string{"ECHO_READY_FOR": "5s", "ECHO_UNREADY_FOR": "5s"}})
	d := deployment(t, objs)
	assert.EqualValues(t, 3, *d.Spec.Replicas)
	c := d.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "/ready", c.ReadinessProbe.HTTPGet.Path)
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "ECHO_UNREADY_FOR", Value: "5s"})
	var svc *corev1.Service
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			svc = s
		}
	}
	require.NotNil(t, svc)
	assert.Equal(t, "echo-a", svc.Name)

	ads := deployment(t, render(t, "adsload", Values{Substrate: Local(), Clients: 500})).Spec.Template.Spec.Containers[0]
	assert.Equal(t, "meshchaos.local/adsload:dev", ads.Image)
	assert.Contains(t, strings.Join(ads.Args, " "), "--clients 500")
	assert.NotContains(t, ads.Args, "--track")
	assert.NotContains(t, ads.Args, "--first-client", "one pod's clients start at 0")
	// A pod of a fleet spread over several: its clients are named from its first on.
	ads = deployment(t, render(t, "adsload", Values{Substrate: Local(), Name: "adsload-1", Clients: 10, FirstClient: 10})).Spec.Template.Spec.Containers[0]
	assert.Contains(t, strings.Join(ads.Args, " "), "--clients 10 --first-client 10")
	ads = deployment(t, render(t, "adsload", Values{Substrate: Local(), Track: "outbound|80||flap.default"})).Spec.Template.Spec.Containers[0]
	assert.Equal(t, []string{"--track", "outbound|80||flap.default"}, ads.Args[len(ads.Args)-2:])
}

func TestKindRunsEnvoyWithAValidBootstrap(t *testing.T) {
	for _, hold := range []bool{false, true} {
		objs := render(t, "app", Values{Substrate: Kind(""), HoldApp: hold, Delta: true})
		spec := deployment(t, objs).Spec.Template.Spec
		var proxy corev1.Container
		for _, c := range spec.Containers {
			if c.Name == "proxy" {
				proxy = c
			} else {
				assert.Equal(t, corev1.PullIfNotPresent, c.ImagePullPolicy)
			}
		}
		assert.Equal(t, DefaultEnvoyImage, proxy.Image)
		assert.Equal(t, "/etc/envoy", proxy.VolumeMounts[0].MountPath)
		assert.Equal(t, "/ready", proxy.ReadinessProbe.HTTPGet.Path, "Envoy's admin /ready, like xdsproxy's")
		if hold {
			assert.Equal(t, "/bin/bash", proxy.Lifecycle.PostStart.Exec.Command[0])
		}
		var cm *corev1.ConfigMap
		for _, o := range objs {
			if c, ok := o.(*corev1.ConfigMap); ok {
				cm = c
			}
		}
		require.NotNil(t, cm)
		assert.Equal(t, spec.Volumes[0].ConfigMap.Name, cm.Name)
		js, err := yaml.YAMLToJSON([]byte(cm.Data["bootstrap.yaml"]))
		require.NoError(t, err)
		var bs bootstrapv3.Bootstrap
		require.NoError(t, protojson.Unmarshal(js, &bs), "the bootstrap is a valid Envoy v3 Bootstrap")
		require.NoError(t, bs.ValidateAll())
		assert.Equal(t, "DELTA_GRPC", bs.GetDynamicResources().GetAdsConfig().GetApiType().String())
		assert.Equal(t, "meshchaos-cp.meshchaos-system.svc", bs.GetStaticResources().GetClusters()[0].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
	}
}

// SecureXDS gives the proxies and adsload what Istio's sidecar template gives a sidecar: the
// control plane's root ConfigMap and a projected token, mounted where the flags point.
func TestSecureXDSMountsRootAndToken(t *testing.T) {
	secure := &SecureXDS{ServerName: "meshchaos-controlplane.meshchaos-system.svc", RootConfigMap: "meshchaos-ca-root-cert"}
	want := []string{"--xds-root-cert", "/var/run/secrets/istio/root-cert.pem", "--xds-token", "/var/run/secrets/tokens/istio-token",
		"--xds-server-name", "meshchaos-controlplane.meshchaos-system.svc"}
	for _, tc := range []struct {
		manifest string
		v        Values
	}{
		{"gateway", Values{}}, {"app", Values{}}, {"app", Values{HoldApp: true}}, {"adsload", Values{}},
	} {
		tc.v.Substrate, tc.v.SecureXDS = Local(), secure
		spec := deployment(t, render(t, tc.manifest, tc.v)).Spec.Template.Spec
		var c corev1.Container
		for _, x := range spec.Containers {
			if x.Name == "proxy" || x.Name == "adsload" {
				c = x
			}
		}
		require.NotEmpty(t, c.Name, tc.manifest)
		assert.Equal(t, want, c.Args[len(c.Args)-len(want):], "%s: the flags", tc.manifest)
		assert.Equal(t, []corev1.VolumeMount{
			{Name: "istiod-ca-cert", MountPath: "/var/run/secrets/istio", ReadOnly: true},
			{Name: "istio-token", MountPath: "/var/run/secrets/tokens", ReadOnly: true},
		}, c.VolumeMounts, tc.manifest)
		require.Len(t, spec.Volumes, 2, tc.manifest)
		assert.Equal(t, &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "meshchaos-ca-root-cert"},
			Items: []corev1.KeyToPath{{Key: "root-cert.pem", Path: "root-cert.pem"}}}, spec.Volumes[0].ConfigMap, tc.manifest)
		require.NotNil(t, spec.Volumes[1].Projected, tc.manifest)
		assert.Equal(t, &corev1.ServiceAccountTokenProjection{Audience: "istio-ca", ExpirationSeconds: ptrInt64(43200), Path: "istio-token"},
			spec.Volumes[1].Projected.Sources[0].ServiceAccountToken, tc.manifest)
		for _, other := range spec.Containers {
			if other.Name == "app" {
				assert.Empty(t, other.VolumeMounts, "the app gets no token")
			}
		}
	}

	// Another audience, and the dialled name as server name.
	ads := deployment(t, render(t, "adsload", Values{Substrate: Kind(""), SecureXDS: &SecureXDS{RootConfigMap: "istio-ca-root-cert", Audience: "other"}})).Spec.Template.Spec
	assert.NotContains(t, ads.Containers[0].Args, "--xds-server-name")
	assert.Equal(t, "other", ads.Volumes[1].Projected.Sources[0].ServiceAccountToken.Audience)
	assert.Equal(t, "istio-ca-root-cert", ads.Volumes[0].ConfigMap.Name, "adsload is no Envoy: secure on kind too")

	// Pods without an xDS client of ours render as without SecureXDS.
	for _, tc := range []struct {
		manifest string
		v        Values
	}{{"echo", Values{}}, {"app", Values{StartMode: "native"}}} {
		tc.v.Substrate = Local()
		plain, err := Render(tc.manifest, withDefaults(tc.v))
		require.NoError(t, err)
		tc.v.SecureXDS = secure
		got, err := Render(tc.manifest, withDefaults(tc.v))
		require.NoError(t, err)
		assert.Equal(t, string(plain), string(got), tc.manifest)
	}
	// And without SecureXDS, no volumes at all on the local substrate.
	for _, n := range Names {
		assert.Empty(t, deployment(t, render(t, n, Values{Substrate: Local()})).Spec.Template.Spec.Volumes, n)
	}
}

func ptrInt64(v int64) *int64 { return &v }

// withDefaults fills what render fills, for Render called directly.
func withDefaults(v Values) Values {
	v.XDSAddress, v.Dependency = "meshchaos-cp.meshchaos-system.svc:15010", "echo.default.svc.cluster.local"
	return v
}

func TestSecureXDSRefusals(t *testing.T) {
	secure := &SecureXDS{RootConfigMap: "istio-ca-root-cert"}
	for _, n := range []string{"gateway", "app"} {
		_, err := Render(n, withDefaults(Values{Substrate: Kind(""), SecureXDS: secure}))
		assert.ErrorContains(t, err, "SecureXDS is not supported with Envoy", n)
	}
	_, err := Render("gateway", withDefaults(Values{Substrate: Local(), SecureXDS: &SecureXDS{ServerName: "cp.ns.svc"}}))
	assert.ErrorContains(t, err, "SecureXDS.RootConfigMap")
}

func TestRenderRejectsBadValues(t *testing.T) {
	_, err := Render("nope", Values{Substrate: Local()})
	assert.ErrorContains(t, err, "unknown manifest")
	_, err = Render("gateway", Values{Substrate: Local(), XDSAddress: "no-port"})
	assert.ErrorContains(t, err, "HOST:PORT")
	_, err = Render("app", Values{Substrate: Local(), XDSAddress: "cp:15010"})
	assert.ErrorContains(t, err, "Dependency")
	_, err = Render("echo", Values{})
	assert.ErrorContains(t, err, "no substrate")
}

// The rendered objects are accepted by a real kube-apiserver, for both substrates.
func TestManifestsAreAcceptedByKubeAPIServer(t *testing.T) {
	s := apiserver.StartForTest(t)
	cs, err := kubernetes.NewForConfig(s.RESTConfig())
	require.NoError(t, err)
	ctx := context.Background()
	for _, sub := range []Substrate{Local(), Kind("")} {
		ns := sub.Name
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
		for _, v := range []Values{
			{Name: "gw"}, {Name: "echo", EchoEnv: map[string]string{"ECHO_LATENCY": "10ms"}},
			{Name: "app-plain"}, {Name: "app-hold", HoldApp: true}, {Name: "load"},
			{Name: "load-secure", SecureXDS: &SecureXDS{RootConfigMap: "istio-ca-root-cert"}},
			{Name: "gw-secure", SecureXDS: &SecureXDS{RootConfigMap: "istio-ca-root-cert", ServerName: "istiod.istio-system.svc"}},
		} {
			if v.SecureXDS != nil && v.Name == "gw-secure" && sub.Proxy == Envoy {
				continue // refused (TestSecureXDSRefusals)
			}
			manifest := map[string]string{"gw": "gateway", "echo": "echo", "app-plain": "app", "app-hold": "app", "load": "adsload",
				"load-secure": "adsload", "gw-secure": "gateway"}[v.Name]
			v.Substrate, v.Namespace = sub, ns
			for _, o := range render(t, manifest, v) {
				switch o := o.(type) {
				case *appsv1.Deployment:
					_, err = cs.AppsV1().Deployments(ns).Create(ctx, o, metav1.CreateOptions{})
				case *corev1.Service:
					_, err = cs.CoreV1().Services(ns).Create(ctx, o, metav1.CreateOptions{})
				case *corev1.ConfigMap:
					_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, o, metav1.CreateOptions{})
				default:
					t.Fatalf("unexpected object %T", o)
				}
				require.NoError(t, err, "%s/%s %T", ns, v.Name, o)
			}
		}
	}
}
