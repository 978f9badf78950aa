package controlplane_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/meshchaos/meshchaos/controlplane/model"
)

func get(t testing.TB, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// testKubeAndAdmin: a Kubernetes Service with an EndpointSlice and a Pod reaches a proxy; a
// readiness flip is an EDS push; the admin endpoints answer.
func testKubeAndAdmin(t *testing.T, c *testCluster) {
	ctx := context.Background()
	kc, err := kubernetes.NewForConfig(c.cfg)
	require.NoError(t, err)
	const ns = "kube"
	_, err = kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "echo-sa", Namespace: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "echo-1", Namespace: ns,
		Labels: map[string]string{"app": "echo"}}, Spec: corev1.PodSpec{ServiceAccountName: "echo-sa",
		Containers: []corev1.Container{{Name: "echo", Image: "meshchaos.local/echo:dev"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-x", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "echo-1"}}},
	}
	_, err = kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	require.NoError(t, err)

	cp := startCP(t, c.cfg, true)
	<-cp.Gate.Done()
	host := "echo.kube.svc.cluster.local"
	e := cp.Model.Entry(host)
	require.NotNil(t, e)
	require.Len(t, e.Endpoints[80], 1)
	require.Equal(t, "echo-sa", e.Endpoints[80][0].ServiceAccount, "pod's service account on the endpoint")
	require.Equal(t, "echo", e.Endpoints[80][0].Labels["app"])

	cn := model.ClusterName(host, 80)
	client := envoyLike(t, cp, "sidecar~10.0.0.1~client.kube~kube.svc.cluster.local")
	waitFor(t, 10*time.Second, "CDS", func() bool { _, ok := client.Resources(resourcev3.ClusterType)[cn]; return ok })
	require.NoError(t, client.SetNames(resourcev3.EndpointType, []string{cn}))
	waitFor(t, 10*time.Second, "EDS", func() bool { return len(claEndpoints(t, client, cn)) == 1 })
	require.Equal(t, uint32(8080), claEndpoints(t, client, cn)[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())

	// Readiness flips to false: EDS only, the endpoint leaves the CLA.
	full := testutil.ToFloat64(cp.Metrics.Pushes.WithLabelValues("full"))
	cur, err := kc.DiscoveryV1().EndpointSlices(ns).Get(ctx, "echo-x", metav1.GetOptions{})
	require.NoError(t, err)
	cur.Endpoints[0].Conditions.Ready = ptr.To(false)
	_, err = kc.DiscoveryV1().EndpointSlices(ns).Update(ctx, cur, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "unready endpoint removed", func() bool { return len(claEndpoints(t, client, cn)) == 0 })
	require.Equal(t, full, testutil.ToFloat64(cp.Metrics.Pushes.WithLabelValues("full")))

	// Admin: /ready, /metrics with istiod's names, connections, config dump, pprof.
	base := "http://" + cp.AdminAddr()
	code, body := get(t, base+"/ready")
	require.Equal(t, http.StatusOK, code, body)
	code, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, name := range []string{"pilot_xds_pushes", "pilot_proxy_convergence_time", "pilot_debounce_time", "pilot_xds_push_time",
		"pilot_xds ", "pilot_services", "meshchaos_controlplane_sync_gate_open 1", "meshchaos_controlplane_time_to_ready_seconds",
		"meshchaos_controlplane_pushes_total", `pilot_xds_push_time_bucket{type="eds"`, `pilot_xds_config_size_bytes_bucket{type="cds"`,
		`pilot_inbound_updates{type="eds"}`, `pilot_inbound_updates{type="svc"}`, `pilot_k8s_reg_events{event="add",type="Services"}`,
		`pilot_k8s_reg_events{event="update",type="EndpointSlice"}`, `pilot_push_triggers{type="endpoint"}`,
		"meshchaos_controlplane_push_cycle_seconds", "meshchaos_controlplane_scopes"} {
		require.Contains(t, body, name)
	}
	code, body = get(t, base+"/debug/syncz")
	require.Equal(t, http.StatusOK, code)
	var syncz []map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &syncz))
	require.NotEmpty(t, syncz)
	require.Equal(t, "sidecar~10.0.0.1~client.kube~kube.svc.cluster.local", syncz[len(syncz)-1]["proxy"])
	require.Equal(t, "kube", syncz[len(syncz)-1]["namespace"])
	require.NotEmpty(t, syncz[len(syncz)-1]["cluster_sent"])
	code, body = get(t, base+"/debug/push_status")
	require.Equal(t, http.StatusOK, code)
	var ps struct {
		Seq    uint64 `json:"seq"`
		Kind   string `json:"kind"`
		Scopes []struct {
			Namespace string `json:"namespace"`
		} `json:"scopes"`
		Proxies []struct {
			ID    string `json:"id"`
			Types map[string]struct {
				SentPush uint64 `json:"sentPush"`
			} `json:"types"`
		} `json:"proxies"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ps))
	require.Equal(t, "eds", ps.Kind, "the latest push was the readiness flip")
	require.NotEmpty(t, ps.Scopes)
	require.NotEmpty(t, ps.Proxies, "per connected proxy")
	require.NotEmpty(t, ps.Proxies[0].ID)
	require.Equal(t, ps.Seq, ps.Proxies[0].Types["eds"].SentPush, "the proxy was sent the latest push's EDS")
	code, body = get(t, base+"/debug/connections")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "client.kube")
	code, body = get(t, base+"/debug/config_dump?proxyID="+url.QueryEscape("sidecar~10.0.0.1~client.kube~kube.svc.cluster.local"))
	require.Equal(t, http.StatusOK, code, body)
	var dump struct {
		Resources map[string][]json.RawMessage `json:"resources"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &dump))
	require.NotEmpty(t, dump.Resources["cds"])
	require.Len(t, dump.Resources["eds"], 1, "only the subscribed CLA")
	require.True(t, strings.Contains(string(dump.Resources["eds"][0]), cn))
	code, _ = get(t, base+"/debug/config_dump?proxy=nobody")
	require.Equal(t, http.StatusNotFound, code)
	code, body = get(t, base+"/debug/pprof/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "heap")
}

// testMaxWait: informers that cannot sync (a LIST that takes longer than the max wait) open the
// gate anyway, loudly, with the metric set, when a max wait was asked for; without one (the
// default, as istiod) the gate waits for the sync.
func testMaxWait(t *testing.T, c *testCluster) {
	patient := startCPWith(t, slowListConfig(c.cfg, 3*time.Second), func(o *controlplaneOptions) { o.ReadyAddr = "127.0.0.1:0" })
	cp := startCPWith(t, slowListConfig(c.cfg, 3*time.Second), func(o *controlplaneOptions) { o.MaxWait = 500 * time.Millisecond })
	defer func() {
		select {
		case <-patient.Gate.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("without a max wait the gate did not open at sync")
		}
		_, forced, _, _ := patient.Gate.State()
		require.False(t, forced, "without a max wait the gate opens at sync only")
		code, _ := get(t, "http://"+patient.ReadyAddr()+"/ready")
		require.Equal(t, http.StatusOK, code, "/ready on its own port too, once open")
		require.Equal(t, 0.0, testutil.ToFloat64(patient.Metrics.SyncGateForced))
	}()
	select {
	case <-cp.Gate.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("max wait did not open the gate")
	}
	_, forced, _, _ := cp.Gate.State()
	require.True(t, forced)
	require.Equal(t, 1.0, testutil.ToFloat64(cp.Metrics.SyncGateForced))
	select {
	case <-cp.Synced():
		t.Fatal("the model cannot have synced before the delayed LIST returned")
	default:
	}
	select {
	case <-patient.Synced():
		t.Fatal("the model cannot have synced before the delayed LIST returned")
	default:
		require.False(t, patient.Gate.IsOpen(), "without a max wait the gate stays closed until sync")
		code, _ := get(t, "http://"+patient.ReadyAddr()+"/ready")
		require.Equal(t, http.StatusServiceUnavailable, code, "/ready on its own port (istiod's 8080) as on the admin port")
	}
}
