package controlplane_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apinet "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/meshchaos/meshchaos/controlplane"
	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
)

// cluster is a real etcd + kube-apiserver with the Istio CRDs installed.
type testCluster struct {
	cfg    *rest.Config
	istio  istioclient.Interface
	server *apiserver.Server
}

func startCluster(t testing.TB) *testCluster {
	t.Helper()
	s := apiserver.StartForTest(t)
	cfg := s.RESTConfig()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := kube.InstallCRDs(ctx, cfg, crds.Istio)
	require.NoError(t, err)
	ic, err := istioclient.NewForConfig(cfg)
	require.NoError(t, err)
	kc, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	for _, ns := range []string{"bulk", "flap-plain", "flap-regress", "wle", "grpc", "kube", "scope-a", "scope-b"} {
		_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	return &testCluster{cfg: cfg, istio: ic, server: s}
}

// seSpec is a STATIC ServiceEntry with one HTTP port 80 and n endpoints 10.x.y.z:8080.
func seSpec(host string, index, n int) *apinet.ServiceEntry {
	spec := &apinet.ServiceEntry{Hosts: []string{host}, Resolution: apinet.ServiceEntry_STATIC,
		Location: apinet.ServiceEntry_MESH_INTERNAL,
		Ports:    []*apinet.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080}}}
	for i := 0; i < n; i++ {
		spec.Endpoints = append(spec.Endpoints, &apinet.WorkloadEntry{
			Address: fmt.Sprintf("10.%d.%d.%d", 1+i, index/256%256, index%256),
			Labels:  map[string]string{"app": fmt.Sprintf("svc-%d", index), "replica": fmt.Sprint(i)},
		})
	}
	return spec
}

// createSEs creates n ServiceEntries "se-i.bulk.test" in ns with eps endpoints each, concurrently.
func (c *testCluster) createSEs(t testing.TB, ns string, from, to, eps int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Value
	next := int64(from - 1)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(atomic.AddInt64(&next, 1))
				if i >= to {
					return
				}
				se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("se-%d", i), Namespace: ns},
					Spec: *seSpec(fmt.Sprintf("se-%d.bulk.test", i), i, eps)}
				if _, err := c.istio.NetworkingV1().ServiceEntries(ns).Create(ctx, se, metav1.CreateOptions{}); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatalf("create ServiceEntries: %v", err)
	}
}

// slowListConfig delays every LIST of ServiceEntries by d: the window in which a restarted
// control plane has not synced yet, made wide and deterministic.
func slowListConfig(cfg *rest.Config, d time.Duration) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			q := r.URL.Query()
			// The initial state comes from a LIST, or (client-go's WatchList) from a watch
			// with sendInitialEvents=true: delay both.
			initial := q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true"
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/serviceentries") && initial {
				time.Sleep(d)
			}
			return rt.RoundTrip(r)
		})
	}
	return cfg
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type controlplaneOptions = controlplane.Options

func startCP(t testing.TB, cfg *rest.Config, gated bool, sw ...regress.Switch) *controlplane.ControlPlane {
	t.Helper()
	return startCPWith(t, cfg, func(o *controlplane.Options) {
		o.SyncGate = gated
		for _, s := range sw {
			o.Regress[s] = true
		}
	})
}

// startCPWith starts a gated control plane on loopback with free ports; edit adjusts options.
func startCPWith(t testing.TB, cfg *rest.Config, edit func(*controlplane.Options)) *controlplane.ControlPlane {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("MESHCHAOS_CP_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	opts := controlplane.Options{Kube: cfg, XDSAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", SyncGate: true,
		Regress: regress.Set{}, Logger: log}
	edit(&opts)
	cp, err := controlplane.Start(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(cp.Stop)
	return cp
}

func readyStatus(t testing.TB, cp *controlplane.ControlPlane) int {
	resp, err := http.Get("http://" + cp.AdminAddr() + "/ready")
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// envoyLike connects as an Envoy sidecar: wildcard CDS and LDS, then EDS for every EDS cluster.
func envoyLike(t testing.TB, cp *controlplane.ControlPlane, id string) *adsclient.Client {
	t.Helper()
	c, err := adsclient.Dial(context.Background(), cp.XDSAddr(), id)
	require.NoError(t, err)
	require.NoError(t, c.SetNames(resourcev3.ClusterType, nil))
	go c.Run()
	t.Cleanup(c.Close)
	return c
}

// firstResponse is the next response client receives; a stream that is refused or never
// answered fails the test in 60 s instead of hanging until the package's timeout.
func firstResponse(t testing.TB, client *adsclient.Client) adsclient.Response {
	t.Helper()
	select {
	case r := <-client.Notify():
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("no xDS response within 60 s")
		return adsclient.Response{}
	}
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func clusterNames(c *adsclient.Client) []string {
	var out []string
	for n := range c.Resources(resourcev3.ClusterType) {
		out = append(out, n)
	}
	return out
}

func claEndpoints(t testing.TB, c *adsclient.Client, name string) []*endpoint.LbEndpoint {
	a, ok := c.Resources(resourcev3.EndpointType)[name]
	if !ok {
		return nil
	}
	var cla endpoint.ClusterLoadAssignment
	require.NoError(t, a.UnmarshalTo(&cla))
	var out []*endpoint.LbEndpoint
	for _, l := range cla.GetEndpoints() {
		out = append(out, l.GetLbEndpoints()...)
	}
	return out
}

func TestIntegration(t *testing.T) {
	c := startCluster(t)

	t.Run("EndpointFlapIsEDSOnly", func(t *testing.T) { testFlap(t, c, "flap-plain", false) })
	t.Run("RegressFullPushOnEndpointReappear", func(t *testing.T) { testFlap(t, c, "flap-regress", true) })
	t.Run("ServiceEntryEndpointPort", func(t *testing.T) { testSEEndpointPort(t, c) })
	t.Run("GRPCProxyless", func(t *testing.T) { testGRPC(t, c) })
	t.Run("KubernetesServicesAndAdmin", func(t *testing.T) { testKubeAndAdmin(t, c) })
	t.Run("SidecarScopes", func(t *testing.T) { testSidecarScopes(t, c) })
	t.Run("MaxWaitOpensTheGate", func(t *testing.T) { testMaxWait(t, c) })
	t.Run("ManifestsApply", func(t *testing.T) {
		data, err := manifests.ControlPlane(manifests.Params{SyncGate: true})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = kube.Apply(ctx, c.cfg, data)
		require.NoError(t, err)
		_, err = kube.Apply(ctx, c.cfg, data)
		require.NoError(t, err, "apply is idempotent")
	})

	t.Run("Bulk", func(t *testing.T) { testBulk(t, c) })
}

// testBulk: 5000 ServiceEntries × 10 endpoints, created before any control plane starts.
func testBulk(t *testing.T, c *testCluster) {
	ctx := context.Background()
	const n, eps = 5000, 10
	start := time.Now()
	c.createSEs(t, "bulk", 0, n, eps)
	t.Logf("created %d ServiceEntries × %d endpoints in %s", n, eps, time.Since(start))

	t.Run("GateHoldsUntilAllServiceEntriesAreInTheModel", func(t *testing.T) {
		cp := startCP(t, slowListConfig(c.cfg, 500*time.Millisecond), true)
		// Closed: /ready is 503 and xDS streams are refused with Unavailable.
		require.Equal(t, http.StatusServiceUnavailable, readyStatus(t, cp))
		early, err := adsclient.Dial(ctx, cp.XDSAddr(), "sidecar~early")
		require.NoError(t, err)
		_ = early.Subscribe(resourcev3.ClusterType) // may fail with EOF: the stream was refused
		err = early.Run()
		require.Equal(t, codes.Unavailable, status.Code(err), "stream before sync: %v", err)
		early.CloseNoRun()
		require.GreaterOrEqual(t, testutil.ToFloat64(cp.Metrics.StreamsRefused), 1.0)

		select {
		case <-cp.Gate.Done():
		case <-time.After(60 * time.Second):
			t.Fatal("sync gate did not open within 60 s")
		}
		// The gate opened only once every ServiceEntry was in the model (and pushed).
		hosts, endpoints := cp.Model.Stats()
		require.GreaterOrEqual(t, hosts, n)
		require.GreaterOrEqual(t, endpoints, n*eps)
		_, forced, _, openedAt := cp.Gate.State()
		require.False(t, forced)
		t.Logf("gated start-to-serve with %d SEs × %d endpoints (incl. 500 ms injected LIST delay): %s",
			n, eps, openedAt.Sub(cp.StartedAt()))
		require.Equal(t, http.StatusOK, readyStatus(t, cp))

		// The first config a proxy gets is complete.
		client := envoyLike(t, cp, "sidecar~after")
		r := firstResponse(t, client)
		require.Equal(t, resourcev3.ClusterType, r.TypeURL)
		require.GreaterOrEqual(t, len(r.Resources), n, "first CDS must hold every cluster")
		var names []string
		for _, a := range r.Resources {
			var cl cluster.Cluster
			require.NoError(t, a.UnmarshalTo(&cl))
			if cl.GetType() == cluster.Cluster_EDS {
				names = append(names, cl.GetName())
			}
		}
		require.NoError(t, client.SetNames(resourcev3.EndpointType, names))
		waitFor(t, 30*time.Second, "every CLA", func() bool {
			return len(client.Resources(resourcev3.EndpointType)) >= n
		})
		require.Len(t, claEndpoints(t, client, model.ClusterName("se-4999.bulk.test", 80)), eps)
	})

	t.Run("UngatedServesIncompleteConfig", func(t *testing.T) {
		// The historical behaviour (incident 1): a proxy that connects before sync gets an
		// incomplete CDS (and would remove its clusters: 503 NC).
		cp := startCP(t, slowListConfig(c.cfg, 2*time.Second), false)
		require.Equal(t, http.StatusOK, readyStatus(t, cp), "ungated is ready at once")
		client := envoyLike(t, cp, "sidecar~early")
		r := firstResponse(t, client)
		require.Equal(t, resourcev3.ClusterType, r.TypeURL)
		require.Less(t, len(r.Resources), n, "an early client gets an incomplete CDS without the gate")
		t.Logf("ungated: first CDS had %d of %d clusters", len(r.Resources), n)
		// It converges later.
		waitFor(t, 60*time.Second, "complete CDS", func() bool { return len(clusterNames(client)) >= n })
	})

	t.Run("RegressUngatedSwitch", func(t *testing.T) {
		cp := startCP(t, slowListConfig(c.cfg, 2*time.Second), true, regress.Ungated)
		client := envoyLike(t, cp, "sidecar~early")
		r := firstResponse(t, client)
		require.Less(t, len(r.Resources), n, "--regress ungated serves before sync")
	})
}

// testFlap is incident 2: a single-pod Deployment whose pod flaps Ready. There is no
// controller-manager here, so the test writes what kubelet and the EndpointSlice controller
// would: a Ready Pod with a service account, and an EndpointSlice whose endpoint's ready
// condition flips. 1→0 must be an incremental push in both builds; 0→1 a full push with
// full-push-on-endpoint-reappear (one per flap), an EDS push without it.
func testFlap(t *testing.T, c *testCluster, ns string, regressed bool) {
	ctx := context.Background()
	kc, err := kubernetes.NewForConfig(c.cfg)
	require.NoError(t, err)
	_, err = kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod, err := kc.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns,
		Labels: map[string]string{"app": "web"}}, Spec: corev1.PodSpec{ServiceAccountName: "web",
		Containers: []corev1.Container{{Name: "web", Image: "meshchaos.local/echo:dev"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	_, err = kc.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-x", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-1"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	var sw []regress.Switch
	if regressed {
		sw = append(sw, regress.FullPushOnEndpointReappear)
	}
	cp := startCP(t, c.cfg, true, sw...)
	<-cp.Gate.Done()
	host := "web." + ns + ".svc.cluster.local"
	require.Equal(t, "web", cp.Model.Entry(host).Endpoints[80][0].ServiceAccount)
	client := envoyLike(t, cp, "sidecar~"+ns)
	cn := model.ClusterName(host, 80)
	waitFor(t, 10*time.Second, "CDS", func() bool { _, ok := client.Resources(resourcev3.ClusterType)[cn]; return ok })
	require.NoError(t, client.SetNames(resourcev3.EndpointType, []string{cn}))
	waitFor(t, 10*time.Second, "EDS", func() bool { return len(claEndpoints(t, client, cn)) == 1 })

	pushes := func() (full, eds float64) {
		return testutil.ToFloat64(cp.Metrics.Pushes.WithLabelValues("full")), testutil.ToFloat64(cp.Metrics.Pushes.WithLabelValues("eds"))
	}
	// flip sets the endpoint's ready condition and waits for the push that carries it to the
	// proxy; it returns how many full pushes that took.
	flip := func(ready bool) float64 {
		full0, eds0 := pushes()
		cur, err := kc.DiscoveryV1().EndpointSlices(ns).Get(ctx, "web-x", metav1.GetOptions{})
		require.NoError(t, err)
		cur.Endpoints[0].Conditions.Ready = ptr.To(ready)
		_, err = kc.DiscoveryV1().EndpointSlices(ns).Update(ctx, cur, metav1.UpdateOptions{})
		require.NoError(t, err)
		want := 0
		if ready {
			want = 1
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("ready=%v pushed", ready), func() bool {
			full, eds := pushes()
			return full+eds > full0+eds0 && len(claEndpoints(t, client, cn)) == want
		})
		full, _ := pushes()
		return full - full0
	}
	cdsBefore := countType(client, resourcev3.ClusterType)
	const flaps = 3
	for i := 0; i < flaps; i++ {
		require.Zero(t, flip(false), "1→0 is an incremental push (flap %d)", i)
		if regressed {
			require.Equal(t, 1.0, flip(true), "full-push-on-endpoint-reappear: 0→1 is one full push (flap %d)", i)
		} else {
			require.Zero(t, flip(true), "0→1 is an incremental push (flap %d)", i)
		}
	}
	if regressed {
		waitFor(t, 10*time.Second, "CDS resent by every full push", func() bool {
			return countType(client, resourcev3.ClusterType) >= cdsBefore+flaps
		})
		return
	}
	require.Equal(t, cdsBefore, countType(client, resourcev3.ClusterType), "a readiness flap must not resend CDS")
}

func countType(c *adsclient.Client, typeURL string) int {
	n := 0
	for _, r := range c.Received() {
		if r.TypeURL == typeURL {
			n++
		}
	}
	return n
}
