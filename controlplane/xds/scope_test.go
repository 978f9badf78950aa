package xds

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/metrics"
	"github.com/meshchaos/meshchaos/controlplane/model"
)

// applyIn applies a STATIC ServiceEntry "name" in namespace ns with host name.test.
func (r *rig) applyIn(t testing.TB, ns, name string, addrs ...string) {
	t.Helper()
	spec := &v1alpha3.ServiceEntry{Hosts: []string{name + ".test"}, Resolution: v1alpha3.ServiceEntry_STATIC,
		Ports: []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}}
	for _, a := range addrs {
		spec.Endpoints = append(spec.Endpoints, &v1alpha3.WorkloadEntry{Address: a})
	}
	conv, _, err := model.ConvertServiceEntry(ns, name, spec)
	require.NoError(t, err)
	r.pusher.Enqueue(r.m.SetServiceEntry(ns, name, time.Unix(0, 0), conv))
}

// sidecarRig is a started rig with a1.test in namespace a, b1.test in b, and a Sidecar "./*"
// in a.
func sidecarRig(t *testing.T) *rig {
	r := newRig(t, 10*time.Millisecond, time.Second)
	r.applyIn(t, "a", "a1", "10.0.0.1")
	r.applyIn(t, "b", "b1", "10.0.0.2")
	r.pusher.Enqueue(r.m.SetSidecar("a", "default", &model.Sidecar{Namespace: "a", Name: "default", Hosts: []string{"./*"}}))
	r.start(t)
	return r
}

func clusterNames(c *adsclient.Client) []string {
	var out []string
	for n := range c.Resources(resourcev3.ClusterType) {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestSidecarScopesWhatEachProxyGets: a Sidecar in namespace a ("./*") limits a's proxies to
// a's services; b's proxies (no Sidecar) see everything. b's two proxies share one generation;
// a ServiceEntry change outside a's scope sends a's proxy nothing.
func TestSidecarScopesWhatEachProxyGets(t *testing.T) {
	r := sidecarRig(t)

	pa := r.client(t, "sidecar~10.1.0.1~pa.a~a.svc.cluster.local")
	pb := r.client(t, "sidecar~10.1.0.2~pb.b~b.svc.cluster.local")
	pb2 := r.client(t, "sidecar~10.1.0.3~pb2.b~b.svc.cluster.local")
	all := []string{"outbound|80||a1.test", "outbound|80||b1.test"}
	eventually(t, "every proxy's CDS", func() bool {
		return len(clusterNames(pa)) == 1 && len(clusterNames(pb)) == 2 && len(clusterNames(pb2)) == 2
	})
	assert.Equal(t, []string{"outbound|80||a1.test"}, clusterNames(pa), "a's Sidecar: a's services only")
	assert.Equal(t, all, clusterNames(pb))
	assert.Equal(t, all, clusterNames(pb2))

	var sa, sb *ScopeCaches
	for _, sc := range r.caches.Scopes() {
		switch sc.Namespace {
		case "a":
			sa = sc
		case "b":
			sb = sc
		}
	}
	require.NotNil(t, sa)
	require.NotNil(t, sb)
	assert.Equal(t, 1, sb.Pushes(), "b's two proxies share one generation")

	// A change outside a's scope: b's proxies get it, a's proxy gets nothing. The barrier is a
	// later change a does see: its stream is ordered, so a CDS for b2 would have come first.
	cdsA := count(pa, resourcev3.ClusterType)
	r.applyIn(t, "b", "b2", "10.0.0.3")
	eventually(t, "b2 at b's proxies", func() bool { return len(clusterNames(pb)) == 3 && len(clusterNames(pb2)) == 3 })
	r.applyIn(t, "a", "a2", "10.0.0.4")
	eventually(t, "a2 at a's proxy", func() bool { return len(clusterNames(pa)) == 2 })
	assert.Equal(t, cdsA+1, count(pa, resourcev3.ClusterType), "a's proxy got one CDS (a2), none for b2")
	assert.Equal(t, []string{"outbound|80||a1.test", "outbound|80||a2.test"}, clusterNames(pa))
	assert.Equal(t, 3, sb.Pushes(), "b's scope regenerated once per push it sees, not once per proxy")

	// Deleting a's Sidecar widens its scope (a full push for a's proxies).
	r.pusher.Enqueue(r.m.DeleteSidecar("a", "default"))
	eventually(t, "a sees everything", func() bool { return len(clusterNames(pa)) == 4 })
}

func TestProxyNamespace(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": "meta"})
	require.NoError(t, err)
	for _, c := range []struct {
		node *core.Node
		want string
	}{
		{&core.Node{Id: "sidecar~10.0.0.1~pod-1.app~app.svc.cluster.local"}, "app"},
		{&core.Node{Id: "router~10.0.0.1~gateway-0.mesh~mesh.svc.cluster.local"}, "mesh"},
		{&core.Node{Id: "sidecar~10.0.0.1~pod.x~x.svc.cluster.local", Metadata: md}, "meta"},
		{&core.Node{Id: "sidecar~a"}, ""},
		{&core.Node{Id: "gateway-0"}, ""},
		{nil, ""},
	} {
		assert.Equal(t, c.want, ProxyNamespace(c.node), "%v", c.node)
	}
}

// TestEDSPushStaysOutOfOtherScopes: an endpoint change reaches only the proxies watching the
// cluster, pilot_xds_pushes counting one EDS response per proxy that got it.
func TestEDSPushStaysOutOfOtherScopes(t *testing.T) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	r.applyIn(t, "a", "a1", "10.0.0.1")
	r.applyIn(t, "b", "b1", "10.0.0.2")
	r.start(t)
	pa := r.client(t, "sidecar~10.1.0.1~pa.a~a.svc.cluster.local", "outbound|80||a1.test")
	pb := r.client(t, "sidecar~10.1.0.2~pb.b~b.svc.cluster.local", "outbound|80||b1.test")
	eventually(t, "initial EDS", func() bool {
		return endpointsOf(t, pa, "outbound|80||a1.test") == 1 && endpointsOf(t, pb, "outbound|80||b1.test") == 1
	})
	before := testutil.ToFloat64(r.met.XDSPushes.WithLabelValues("eds"))
	edsA := count(pa, resourcev3.EndpointType)
	r.applyIn(t, "b", "b1", "10.0.0.2", "10.0.0.3")
	eventually(t, "b1's new endpoint", func() bool { return endpointsOf(t, pb, "outbound|80||b1.test") == 2 })
	r.applyIn(t, "a", "a1", "10.0.0.1", "10.0.0.5")
	eventually(t, "a1's new endpoint", func() bool { return endpointsOf(t, pa, "outbound|80||a1.test") == 2 })
	assert.Equal(t, edsA+1, count(pa, resourcev3.EndpointType), "a's proxy got only a1's EDS")
	assert.Equal(t, before+2, testutil.ToFloat64(r.met.XDSPushes.WithLabelValues("eds")), "one EDS response per proxy per change")
}

// TestConvergenceIsPerProxyFromThePushStart: pilot_proxy_convergence_time has istiod's
// meaning: one sample per proxy that the push concerns, from the push's start (after the
// debounce) to the last type sent; the push delivery time one per proxy and type the push sent.
func TestConvergenceIsPerProxyFromThePushStart(t *testing.T) {
	const quiet = 150 * time.Millisecond
	r := newRig(t, quiet, 10*time.Second)
	r.applyIn(t, "a", "a1", "10.0.0.1")
	r.applyIn(t, "b", "b1", "10.0.0.2")
	r.pusher.Enqueue(r.m.SetSidecar("b", "default", &model.Sidecar{Namespace: "b", Name: "default", Hosts: []string{"./*"}}))
	r.start(t)
	p1 := r.client(t, "sidecar~10.1.0.1~p1.a~a.svc.cluster.local", "outbound|80||a1.test")
	p2 := r.client(t, "sidecar~10.1.0.2~p2.a~a.svc.cluster.local", "outbound|80||a1.test")
	other := r.client(t, "sidecar~10.1.0.3~p3.b~b.svc.cluster.local", "outbound|80||b1.test")
	eventually(t, "initial EDS", func() bool {
		return endpointsOf(t, p1, "outbound|80||a1.test") == 1 && endpointsOf(t, p2, "outbound|80||a1.test") == 1 &&
			endpointsOf(t, other, "outbound|80||b1.test") == 1
	})
	require.Zero(t, histCount(t, r.met), "initial fetches are not pushes")

	start := time.Now()
	r.applyIn(t, "a", "a1", "10.0.0.1", "10.0.0.7")
	eventually(t, "the EDS push at a's proxies", func() bool {
		return endpointsOf(t, p1, "outbound|80||a1.test") == 2 && endpointsOf(t, p2, "outbound|80||a1.test") == 2
	})
	elapsed := time.Since(start)
	eventually(t, "two convergence samples", func() bool { return histCount(t, r.met) == 2 })
	h := histogram(t, r.met, "pilot_proxy_convergence_time")
	// From the push's start, after the debounce (istiod's PushRequest.Start): the push began at
	// least quiet after the event, and the proxies had it within elapsed of the event.
	assert.LessOrEqual(t, h.GetSampleSum()/2, (elapsed - quiet).Seconds(), "the debounce is not included")
	assert.Positive(t, h.GetSampleSum())
	assert.Equal(t, uint64(2), histogram(t, r.met, "meshchaos_controlplane_push_delivery_seconds", "eds").GetSampleCount(), "one per proxy sent")

	// A full push that adds a service to a's scope: each of a's proxies converges once, b's
	// proxy (its Sidecar hides a) not at all: the barrier is a change b's proxy does see.
	r.applyIn(t, "a", "a2", "10.0.0.8")
	eventually(t, "a2 at a's proxies", func() bool { return len(clusterNames(p1)) == 2 && len(clusterNames(p2)) == 2 })
	r.applyIn(t, "b", "b1", "10.0.0.2", "10.0.0.9")
	eventually(t, "b1's new endpoint", func() bool { return endpointsOf(t, other, "outbound|80||b1.test") == 2 })
	eventually(t, "five convergence samples", func() bool { return histCount(t, r.met) >= 5 })
	assert.Equal(t, uint64(5), histCount(t, r.met), "2 (EDS) + 2 (a's full push) + 1 (b's EDS)")
}

func histogram(t testing.TB, m *metrics.Metrics, name string, labels ...string) *dto.Histogram {
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.GetMetric() {
			if len(labels) == 0 || (len(mm.GetLabel()) > 0 && mm.GetLabel()[0].GetValue() == labels[0]) {
				return mm.GetHistogram()
			}
		}
	}
	return &dto.Histogram{}
}

// TestPushThrottleBoundsConcurrentSends: with a throttle of 1, a full push to 8 proxies sends
// one response at a time; every response waited its turn in pilot_proxy_queue_time.
func TestPushThrottleBoundsConcurrentSends(t *testing.T) {
	r := newRigWith(t, 1, 10*time.Millisecond, time.Second)
	for i := 0; i < 50; i++ {
		r.applyIn(t, "a", fmt.Sprintf("s%d", i), "10.0.0.1")
	}
	r.start(t)
	var clients []*adsclient.Client
	for i := 0; i < 8; i++ {
		clients = append(clients, r.client(t, fmt.Sprintf("sidecar~10.1.0.%d~p%d.a~a.svc.cluster.local", i, i)))
	}
	eventually(t, "initial CDS everywhere", func() bool {
		for _, c := range clients {
			if len(clusterNames(c)) != 50 {
				return false
			}
		}
		return true
	})
	r.pusher.Push(model.Change{Full: true, Reasons: []string{"test"}})
	r.applyIn(t, "a", "s50", "10.0.0.1")
	eventually(t, "the push everywhere", func() bool {
		for _, c := range clients {
			if len(clusterNames(c)) != 51 {
				return false
			}
		}
		return true
	})
	assert.Equal(t, 1, r.server.MaxConcurrentSends())
	assert.GreaterOrEqual(t, histogramCount(t, r.met, "pilot_proxy_queue_time"), uint64(16), "every response queued for a slot")
}

func histogramCount(t testing.TB, m *metrics.Metrics, name string) uint64 {
	return histogram(t, m, name).GetSampleCount()
}

// TestGatewaysIgnoreSidecars: as istiod (getSidecarScope returns the default scope for a
// Router), a gateway in a namespace whose Sidecar narrows its sidecars still sees every host.
func TestGatewaysIgnoreSidecars(t *testing.T) {
	r := sidecarRig(t)
	side := r.client(t, "sidecar~10.1.0.1~app.a~a.svc.cluster.local")
	gw := r.client(t, "router~10.1.0.2~gateway-0.a~a.svc.cluster.local")
	eventually(t, "both CDS", func() bool { return len(clusterNames(side)) == 1 && len(clusterNames(gw)) == 2 })
	assert.Equal(t, []string{"outbound|80||a1.test", "outbound|80||b1.test"}, clusterNames(gw))
	assert.Equal(t, "router~a", r.caches.ScopeKey(&core.Node{Id: "router~10.1.0.2~gateway-0.a~a.svc.cluster.local"}))
}

// TestWorkloadSelectorSidecar: a Sidecar with a workloadSelector narrows only the proxies whose
// pod labels it selects (the others in the namespace keep seeing everything), and a proxy moves
// between scopes on its open stream when its pod's labels or the Sidecar change.
func TestWorkloadSelectorSidecar(t *testing.T) {
	r := sidecarRig(t)
	pod := func(name, app string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: name, Labels: map[string]string{"app": app}}}
	}
	r.pusher.Enqueue(r.m.SetPod(pod("px", "x")))
	r.pusher.Enqueue(r.m.SetPod(pod("py", "y")))
	narrow := &model.Sidecar{Namespace: "b", Name: "narrow", Hosts: []string{"./*"}, Selector: map[string]string{"app": "x"}}
	r.pusher.Enqueue(r.m.SetSidecar("b", "narrow", narrow))
	onlyB := []string{"outbound|80||b1.test"}
	all := []string{"outbound|80||a1.test", "outbound|80||b1.test"}
	// The Sidecar is in the model once a's proxy sees a3 (one ordered queue of changes).
	r.applyIn(t, "a", "a3", "10.0.0.9")
	pa := r.client(t, "sidecar~10.1.0.1~pa.a~a.svc.cluster.local")
	eventually(t, "a3 pushed", func() bool { return len(clusterNames(pa)) == 2 })

	px := r.client(t, "sidecar~10.1.0.5~px.b~b.svc.cluster.local")
	py := r.client(t, "sidecar~10.1.0.6~py.b~b.svc.cluster.local")
	all = append(all[:1], "outbound|80||a3.test", all[1])
	eventually(t, "both proxies' CDS", func() bool { return len(clusterNames(px)) == 1 && len(clusterNames(py)) == 3 })
	assert.Equal(t, onlyB, clusterNames(px), "selected by app=x: the Sidecar's ./* only")
	assert.Equal(t, all, clusterNames(py), "not selected: b has no namespace-wide Sidecar, so everything")
	assert.Equal(t, "b~narrow", r.caches.ScopeKey(&core.Node{Id: "sidecar~10.1.0.5~px.b~b.svc.cluster.local"}))
	assert.Equal(t, "b", r.caches.ScopeKey(&core.Node{Id: "sidecar~10.1.0.6~py.b~b.svc.cluster.local"}))

	// py's pod is relabelled into the selector: py moves on its open stream.
	r.pusher.Enqueue(r.m.SetPod(pod("py", "x")))
	eventually(t, "py narrowed", func() bool { return len(clusterNames(py)) == 1 })
	assert.Equal(t, onlyB, clusterNames(py))
	// The Sidecar goes: both move back to the namespace's scope.
	r.pusher.Enqueue(r.m.DeleteSidecar("b", "narrow"))
	eventually(t, "both widened", func() bool { return len(clusterNames(px)) == 3 && len(clusterNames(py)) == 3 })
}

// TestProxyLabels: istio's LABELS node metadata first, else the proxy's pod named by its node id.
func TestProxyLabels(t *testing.T) {
	m := model.New(model.Options{})
	m.SetPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "pod-1", Labels: map[string]string{"app": "fromPod"}}})
	md, err := structpb.NewStruct(map[string]any{"LABELS": map[string]any{"app": "fromMeta"}})
	require.NoError(t, err)
	id := "sidecar~10.0.0.1~pod-1.app~app.svc.cluster.local"
	assert.Equal(t, map[string]string{"app": "fromMeta"}, ProxyLabels(&core.Node{Id: id, Metadata: md}, m))
	assert.Equal(t, map[string]string{"app": "fromPod"}, ProxyLabels(&core.Node{Id: id}, m))
	assert.Nil(t, ProxyLabels(&core.Node{Id: "sidecar~10.0.0.1~other.app~app.svc.cluster.local"}, m))
	assert.Nil(t, ProxyLabels(&core.Node{Id: "gateway-0"}, m))
}

func scopeKeys(c *Caches) []string {
	var out []string
	for _, sc := range c.Scopes() {
		out = append(out, sc.Key)
	}
	return out
}

// TestScopesLiveWhileTheirProxiesAreConnected: a namespace's scopes, the one a workloadSelector
// Sidecar narrows too, are dropped when its last proxy disconnects (proxies choose their scope
// by what they claim, so what they claim must cost memory only while they are connected), and
// MaxScopes refuses a new scope once reached.
func TestScopesLiveWhileTheirProxiesAreConnected(t *testing.T) {
	r := sidecarRig(t)
	r.pusher.Enqueue(r.m.SetPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "px", Labels: map[string]string{"app": "x"}}}))
	r.pusher.Enqueue(r.m.SetPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "py", Labels: map[string]string{"app": "y"}}}))
	r.pusher.Enqueue(r.m.SetSidecar("b", "narrow", &model.Sidecar{Namespace: "b", Name: "narrow", Hosts: []string{"./*"}, Selector: map[string]string{"app": "x"}}))
	r.applyIn(t, "a", "a3", "10.0.0.9") // a barrier: the Sidecar is in the model once pa sees a3
	pa := r.client(t, "sidecar~10.1.0.1~pa.a~a.svc.cluster.local")
	eventually(t, "a3 pushed", func() bool { return len(clusterNames(pa)) == 2 })

	px := r.client(t, "sidecar~10.1.0.5~px.b~b.svc.cluster.local")
	py := r.client(t, "sidecar~10.1.0.6~py.b~b.svc.cluster.local")
	eventually(t, "b's proxies served", func() bool { return len(clusterNames(px)) == 1 && len(clusterNames(py)) == 3 })
	assert.Equal(t, []string{"a", "b", "b~narrow"}, scopeKeys(r.caches))

	// py's pod is relabelled into the selector: py moves to b~narrow on its open stream. When
	// px goes, py is b~narrow's only proxy, and b~narrow must stay (and keep being pushed).
	r.pusher.Enqueue(r.m.SetPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "py", Labels: map[string]string{"app": "x"}}}))
	eventually(t, "py narrowed", func() bool { return len(clusterNames(py)) == 1 })
	px.Close()
	eventually(t, "px's stream closed", func() bool { return testutil.ToFloat64(r.met.ConnectedProxies) == 2 })
	assert.Contains(t, scopeKeys(r.caches), "b~narrow", "py (namespace b) still connected: b's scopes stay")
	r.applyIn(t, "b", "b2", "10.0.0.10")
	eventually(t, "b2 pushed to py", func() bool { return len(clusterNames(py)) == 2 })
	py.Close()
	eventually(t, "b's scopes dropped", func() bool { return len(scopeKeys(r.caches)) == 1 })
	assert.Equal(t, []string{"a"}, scopeKeys(r.caches), "a's proxy is still connected")

	// The cap: with one scope allowed (a's), a proxy of another namespace is refused with
	// ResourceExhausted and counted; a's proxies are still served.
	r.caches.MaxScopes = 1
	before := testutil.ToFloat64(r.met.XDSLimited.WithLabelValues("scopes"))
	c, err := adsclient.Dial(context.Background(), r.addr, "sidecar~10.1.0.7~pc.c~c.svc.cluster.local")
	require.NoError(t, err)
	require.NoError(t, c.SetNames(resourcev3.ClusterType, nil))
	err = c.Run()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	c.Close()
	assert.Equal(t, before+1, testutil.ToFloat64(r.met.XDSLimited.WithLabelValues("scopes")))
	pa2 := r.client(t, "sidecar~10.1.0.8~pa2.a~a.svc.cluster.local")
	eventually(t, "a's new proxy served", func() bool { return len(clusterNames(pa2)) == 2 })
}

// TestPushTriggersCountEveryConnectedProxy: pilot_push_triggers counts a push's events once per
// connected proxy, as istiod records each proxy's push reasons as it leaves the push queue, not
// once per event; events pushed before any proxy connected count nothing.
func TestPushTriggersCountEveryConnectedProxy(t *testing.T) {
	r := newRig(t, 10*time.Millisecond, time.Second)
	r.applyIn(t, "a", "a1", "10.0.0.1")
	r.start(t)
	triggers := func() float64 {
		mfs, err := r.met.Registry.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "pilot_push_triggers" {
				continue
			}
			for _, mm := range mf.GetMetric() {
				if mm.GetLabel()[0].GetValue() == "endpoint" {
					return mm.GetCounter().GetValue()
				}
			}
		}
		return -1
	}
	require.Zero(t, triggers(), "the initial push reached no proxy")
	var clients []*adsclient.Client
	for i := range 3 {
		clients = append(clients, r.client(t, fmt.Sprintf("sidecar~10.1.0.%d~p%d.a~a.svc.cluster.local", i+1, i), "outbound|80||a1.test"))
	}
	eventually(t, "initial EDS", func() bool {
		for _, c := range clients {
			if endpointsOf(t, c, "outbound|80||a1.test") != 1 {
				return false
			}
		}
		return true
	})
	r.applyIn(t, "a", "a1", "10.0.0.1", "10.0.0.2") // one endpoint event, three proxies connected
	eventually(t, "the push", func() bool { return endpointsOf(t, clients[2], "outbound|80||a1.test") == 2 })
	eventually(t, "the push's triggers", func() bool { return triggers() == 3 })
}
