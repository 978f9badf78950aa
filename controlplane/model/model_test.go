package model

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apinet "istio.io/api/networking/v1"
	"istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/meshchaos/meshchaos/controlplane/regress"
)

var timeZero time.Time

func quiet(sw ...regress.Switch) Options {
	set := regress.Set{}
	for _, s := range sw {
		set[s] = true
	}
	return Options{Regress: set, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func mustConvert(t *testing.T, name string, spec *v1alpha3.ServiceEntry) *ConvertedServiceEntry {
	t.Helper()
	out, _, err := ConvertServiceEntry("ns", name, spec)
	require.NoError(t, err)
	return out
}

func se(host string, addrs ...string) *v1alpha3.ServiceEntry {
	s := &v1alpha3.ServiceEntry{Hosts: []string{host}, Resolution: v1alpha3.ServiceEntry_STATIC,
		Ports: []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, &v1alpha3.WorkloadEntry{Address: a, Ports: map[string]uint32{"http": 9000}})
	}
	return s
}

func ports(e *Entry, port uint32) []uint32 {
	var out []uint32
	for _, ep := range e.Endpoints[port] {
		out = append(out, ep.Port)
	}
	return out
}

func TestChangesAreFullOrEDS(t *testing.T) {
	m := New(quiet())
	ch := m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test", "10.0.0.1")))
	require.True(t, ch.Full, "a new service is a full push")

	ch = m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test", "10.0.0.1", "10.0.0.2")))
	require.False(t, ch.Full)
	require.Equal(t, map[string]struct{}{"a.test": {}}, ch.Hosts, "an endpoint change is EDS for its host only")

	ch = m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test", "10.0.0.1", "10.0.0.2")))
	require.True(t, ch.Empty(), "no change, no push")

	ch = m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test")))
	require.False(t, ch.Full, "N→0 is EDS")
	ch = m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test", "10.0.0.1")))
	require.False(t, ch.Full, "0→N is EDS in the plain build")

	spec := se("a.test", "10.0.0.1")
	spec.Ports[0].Number = 81
	ch = m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", spec))
	require.True(t, ch.Full, "a port change is a full push")

	ch = m.DeleteServiceEntry("ns", "a")
	require.True(t, ch.Full)
	require.Nil(t, m.Entry("a.test"))
}

// flapSlice is the EndpointSlice of a single-replica Service whose Pod is Ready or not (what
// the EndpointSlice controller writes after kubelet reports it).
func flapSlice(ready bool) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-x", Namespace: "app", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		Ports:      []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-1"}}},
	}
}

// TestRegressFullPushOnEndpointReappear: incident 2. A single-pod Deployment whose pod flaps
// Ready: 1→0 is an EDS push in both builds; 0→1 is a full push ("service accounts changed") with
// the switch, an EDS push without it. The flap reaches the model through the EndpointSlice.
func TestRegressFullPushOnEndpointReappear(t *testing.T) {
	const host = "web.app.svc.cluster.local"
	for _, regressed := range []bool{false, true} {
		opts := quiet()
		if regressed {
			opts = quiet(regress.FullPushOnEndpointReappear)
		}
		m := New(opts)
		m.SetKubeService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "app"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}})
		m.SetPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "app"},
			Spec: corev1.PodSpec{ServiceAccountName: "web-sa"}})
		m.SetEndpointSlice(flapSlice(true))
		require.True(t, m.Entry(host).Endpoints[80][0].Healthy)
		for flap := 0; flap < 3; flap++ {
			ch := m.SetEndpointSlice(flapSlice(false))
			require.False(t, ch.Full, "1→0 is incremental (regressed=%v)", regressed)
			require.Contains(t, ch.Hosts, host)
			ch = m.SetEndpointSlice(flapSlice(true))
			if regressed {
				require.True(t, ch.Full, "0→1 drops and re-adds the service-account set: full push")
				require.Equal(t, []string{"service accounts changed"}, ch.Reasons)
			} else {
				require.False(t, ch.Full, "0→1 is incremental in the plain build")
				require.Contains(t, ch.Hosts, host)
			}
		}
	}
}

// TestFullPushOnEndpointReappearCountsServiceAccountsOnly: the set holds non-empty service
// accounts, so endpoints without one (a ServiceEntry without serviceAccount) never force a full
// push; with one, only a changed set does.
func TestFullPushOnEndpointReappearCountsServiceAccountsOnly(t *testing.T) {
	withSA := func(sa string, addrs ...string) *v1alpha3.ServiceEntry {
		spec := se("a.test", addrs...)
		for _, e := range spec.Endpoints {
			e.ServiceAccount = sa
		}
		return spec
	}
	m := New(quiet(regress.FullPushOnEndpointReappear))
	set := func(spec *v1alpha3.ServiceEntry) Change {
		return m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", spec))
	}
	set(se("a.test", "10.0.0.1"))
	require.False(t, set(se("a.test")).Full, "N→0 is incremental")
	require.False(t, set(se("a.test", "10.0.0.1")).Full, "0→N without a service account: the set stays empty")

	require.True(t, set(withSA("sa-1", "10.0.0.1")).Full, "a service account appears")
	require.False(t, set(withSA("sa-1")).Full, "N→0 drops the set, incrementally")
	ch := set(withSA("sa-1", "10.0.0.1"))
	require.True(t, ch.Full, "0→N brings the account back")
	require.Contains(t, ch.Reasons, "service accounts changed")
	require.False(t, set(withSA("sa-1", "10.0.0.1", "10.0.0.2")).Full, "same accounts: EDS")
}

func TestDuplicateHostOldestWins(t *testing.T) {
	var skips []Skip
	opts := quiet()
	opts.OnSkip = func(s Skip) { skips = append(skips, s) }
	m := New(opts)
	t0 := time.Unix(1000, 0)
	m.SetServiceEntry("ns", "new", t0.Add(time.Hour), mustConvert(t, "new", se("dup.test", "10.0.0.2")))
	m.SetServiceEntry("ns", "old", t0, mustConvert(t, "old", se("dup.test", "10.0.0.1")))
	e := m.Entry("dup.test")
	require.Equal(t, "ServiceEntry/ns/old", e.Service.Source)
	require.Len(t, skips, 1, "the losing definition is reported once")
	require.Equal(t, "duplicate host", skips[0].Reason)
	require.Equal(t, "ServiceEntry/ns/new", skips[0].Object)
	m.DeleteServiceEntry("ns", "old")
	require.Equal(t, "ServiceEntry/ns/new", m.Entry("dup.test").Service.Source, "the other definition takes over")
}

// workloadSetup: ServiceEntry wl.test selecting app=wl, WorkloadEntries a, b, c with their own
// ports 9001-9003, then a full push (which se-endpoint-port needs to get the ports right).
func workloadSetup(t *testing.T, m *Model) {
	spec := se("wl.test")
	spec.WorkloadSelector = &v1alpha3.WorkloadSelector{Labels: map[string]string{"app": "wl"}}
	m.SetServiceEntry("ns", "wl", timeZero, mustConvert(t, "wl", spec))
	for i, name := range []string{"a", "b", "c"} {
		setWE(t, m, name, i, "wl")
	}
	m.RefreshForFullPush()
	require.ElementsMatch(t, []uint32{9001, 9002, 9003}, ports(m.Entry("wl.test"), 80))
}

// setWE applies WorkloadEntry name at 10.1.0.(i+1):(9001+i) labelled app=app.
func setWE(t *testing.T, m *Model, name string, i int, app string) Change {
	ep, sk := ConvertWorkloadEntry("ns", name, &v1alpha3.WorkloadEntry{Address: fmt.Sprintf("10.1.0.%d", i+1),
		Ports: map[string]uint32{"http": uint32(9001 + i)}, Labels: map[string]string{"app": app}})
	require.Nil(t, sk)
	return m.SetWorkloadEntry("ns", name, ep, true)
}

// TestRegressSEEndpointPort: #25309. With the switch every incremental update of a STATIC
// ServiceEntry (inline endpoint added, changed or removed; WorkloadEntry added, changed or
// deleted) writes the ServiceEntry port on all its endpoints; a full push heals them.
func TestRegressSEEndpointPort(t *testing.T) {
	inline := func(m *Model, addrs ...string) Change {
		return m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test", addrs...)))
	}
	steps := []struct {
		name string
		host string
		do   func(m *Model) Change
	}{
		{"inline endpoint added", "a.test", func(m *Model) Change { return inline(m, "10.0.0.1", "10.0.0.2", "10.0.0.3") }},
		{"inline endpoint changed", "a.test", func(m *Model) Change { return inline(m, "10.0.0.1", "10.0.0.3") }},
		{"inline endpoint removed", "a.test", func(m *Model) Change { return inline(m, "10.0.0.1") }},
		{"WorkloadEntry added", "wl.test", func(m *Model) Change { return setWE(t, m, "d", 3, "wl") }},
		{"WorkloadEntry changed", "wl.test", func(m *Model) Change { return setWE(t, m, "c", 4, "wl") }},
		{"WorkloadEntry deleted", "wl.test", func(m *Model) Change { return m.DeleteWorkloadEntry("ns", "c") }},
	}
	for _, regressed := range []bool{false, true} {
		for _, step := range steps {
			opts := quiet()
			if regressed {
				opts = quiet(regress.SEEndpointPort)
			}
			m := New(opts)
			workloadSetup(t, m)
			inline(m, "10.0.0.1", "10.0.0.2")
			m.RefreshForFullPush()
			require.Equal(t, []uint32{9000, 9000}, ports(m.Entry("a.test"), 80))

			ch := step.do(m)
			require.False(t, ch.Full, step.name)
			require.Contains(t, ch.Hosts, step.host, "%s: an EDS push", step.name)
			got := ports(m.Entry(step.host), 80)
			require.NotEmpty(t, got)
			for _, p := range got {
				if regressed {
					require.Equal(t, uint32(80), p, "%s: se-endpoint-port writes the ServiceEntry port", step.name)
				} else {
					require.NotEqual(t, uint32(80), p, "%s: each endpoint keeps its own port", step.name)
				}
			}
			ch = m.RefreshForFullPush()
			if regressed {
				require.Contains(t, ch.Hosts, step.host, "%s: the full push rebuilds the endpoints", step.name)
			} else {
				require.True(t, ch.Empty(), "%s: nothing to heal in the plain build", step.name)
			}
			for _, p := range ports(m.Entry(step.host), 80) {
				require.NotEqual(t, uint32(80), p, "%s: each endpoint has its own port after a full push", step.name)
			}
		}
	}
}

// TestRegressWEStaleLabel: #25678. A WorkloadEntry relabelled away from a ServiceEntry's
// selector stays behind it with the switch, survives its own deletion, and goes only when an
// unrelated ServiceEntry change rebuilds the index. The plain build drops it on the relabel.
func TestRegressWEStaleLabel(t *testing.T) {
	for _, regressed := range []bool{false, true} {
		opts := quiet()
		if regressed {
			opts = quiet(regress.WEStaleLabel)
		}
		m := New(opts)
		workloadSetup(t, m)
		ch := setWE(t, m, "b", 1, "other")
		if !regressed {
			require.Contains(t, ch.Hosts, "wl.test")
			require.ElementsMatch(t, []uint32{9001, 9003}, ports(m.Entry("wl.test"), 80))
			continue
		}
		require.True(t, ch.Empty(), "we-stale-label: the relabel changes nothing")
		require.ElementsMatch(t, []uint32{9001, 9002, 9003}, ports(m.Entry("wl.test"), 80))

		require.True(t, m.DeleteWorkloadEntry("ns", "b").Empty(), "the delete misses the stale association")
		require.ElementsMatch(t, []uint32{9001, 9002, 9003}, ports(m.Entry("wl.test"), 80), "it survives its deletion")
		setWE(t, m, "d", 3, "wl")
		require.ElementsMatch(t, []uint32{9001, 9002, 9003, 9004}, ports(m.Entry("wl.test"), 80), "and later updates")

		ch = m.SetServiceEntry("other", "unrelated", timeZero, mustConvert(t, "unrelated", se("unrelated.test", "10.2.0.1")))
		require.Contains(t, ch.Hosts, "wl.test", "an unrelated ServiceEntry rebuilds the index")
		require.ElementsMatch(t, []uint32{9001, 9003, 9004}, ports(m.Entry("wl.test"), 80))
	}
}

func TestKubeServiceEndpointSlicesAndPods(t *testing.T) {
	m := New(quiet())
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "app"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "grpc-api", Port: 7070},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		}}}
	ch := m.SetKubeService(svc)
	require.True(t, ch.Full)
	e := m.Entry("echo.app.svc.cluster.local")
	require.NotNil(t, e)
	require.Equal(t, "echo", e.Service.KubeName)
	require.Len(t, e.Service.Ports, 2, "UDP ports are not served")
	require.Equal(t, "GRPC", e.Service.Ports[1].Protocol)

	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "echo-abc", Namespace: "app", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		Ports:      []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "echo-1"}},
			{Addresses: []string{"10.244.0.6"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		},
	}
	ch = m.SetEndpointSlice(slice)
	require.True(t, ch.Full, "a service's first endpoints: a full push, as istiod's new endpoint shard")
	require.Contains(t, ch.Reasons, "new service")
	require.Contains(t, ch.Configs, "echo.app.svc.cluster.local", "for the proxies that see it")
	eps := m.Entry("echo.app.svc.cluster.local").Endpoints[80]
	require.Len(t, eps, 2)
	require.True(t, eps[0].Healthy)
	require.False(t, eps[1].Healthy)
	require.Equal(t, uint32(8080), eps[0].Port)
	require.Empty(t, m.Entry("echo.app.svc.cluster.local").Endpoints[7070], "the slice has no grpc-api port")

	ch = m.SetPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "echo-1", Namespace: "app", Labels: map[string]string{"app": "echo"}},
		Spec: corev1.PodSpec{ServiceAccountName: "echo-sa"}})
	require.False(t, ch.Full)
	eps = m.Entry("echo.app.svc.cluster.local").Endpoints[80]
	require.Equal(t, "echo-sa", eps[0].ServiceAccount)
	require.Equal(t, "echo", eps[0].Labels["app"])
	require.True(t, eps[0].Healthy)

	// The Pod goes unready before the EndpointSlice controller notices: nothing changes until
	// the EndpointSlice says so, as in istiod (no head start on the EndpointSlice controller).
	ch = m.SetPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "echo-1", Namespace: "app", Labels: map[string]string{"app": "echo"}},
		Spec:   corev1.PodSpec{ServiceAccountName: "echo-sa"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}})
	require.False(t, ch.Full)
	require.Empty(t, ch.Hosts, "a Pod's readiness alone pushes nothing")
	require.True(t, m.Entry("echo.app.svc.cluster.local").Endpoints[80][0].Healthy, "healthy until its EndpointSlice says otherwise")
	slice.Endpoints[0].Conditions.Ready = ptr.To(false)
	ch = m.SetEndpointSlice(slice)
	require.False(t, ch.Full)
	require.Contains(t, ch.Hosts, "echo.app.svc.cluster.local")
	require.False(t, m.Entry("echo.app.svc.cluster.local").Endpoints[80][0].Healthy)

	ch = m.DeleteEndpointSlice("app", "echo-abc")
	require.False(t, ch.Full)
	require.Empty(t, m.Entry("echo.app.svc.cluster.local").Endpoints[80])
	ch = m.DeleteKubeService("app", "echo")
	require.True(t, ch.Full)
	require.Nil(t, m.Entry("echo.app.svc.cluster.local"))
}

func TestSkipsAreReported(t *testing.T) {
	var got []Skip
	opts := quiet()
	opts.OnSkip = func(s Skip) { got = append(got, s) }
	m := New(opts)
	m.SetKubeService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "udp", Namespace: "x"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}}}})
	require.Len(t, got, 1)
	require.Equal(t, "no TCP ports", got[0].Reason)
}

func TestSidecarVisibility(t *testing.T) {
	svc := func(ns, host string) *Service { return &Service{Namespace: ns, Hostname: host} }
	inA, inB := svc("a", "web.a.svc.cluster.local"), svc("b", "ext.example.com")
	for _, c := range []struct {
		hosts      []string
		proxyNS    string
		seeA, seeB bool
	}{
		{[]string{"*/*"}, "a", true, true},
		{[]string{"./*"}, "a", true, false},
		{[]string{"./*"}, "b", false, true},
		{[]string{"~/*"}, "a", false, false},
		{[]string{"b/*"}, "a", false, true},
		{[]string{"*/*.example.com"}, "a", false, true},
		{[]string{"*/web.a.svc.cluster.local"}, "c", true, false},
		{[]string{"a/ext.example.com"}, "a", false, false},
	} {
		sc := &Sidecar{Namespace: "x", Hosts: c.hosts}
		assert.Equal(t, c.seeA, sc.Visible(inA, c.proxyNS), "%v from %s sees %s", c.hosts, c.proxyNS, inA.Hostname)
		assert.Equal(t, c.seeB, sc.Visible(inB, c.proxyNS), "%v from %s sees %s", c.hosts, c.proxyNS, inB.Hostname)
	}
	var none *Sidecar
	assert.True(t, none.Visible(inA, "z"), "no Sidecar: everything")
}

func TestSidecarForPrefersOwnNamespaceThenRoot(t *testing.T) {
	m := New(Options{})
	require.Nil(t, m.SidecarFor("a"))
	root := &Sidecar{Namespace: DefaultRootNamespace, Name: "default", Hosts: []string{"./*"}}
	ch := m.SetSidecar(DefaultRootNamespace, "default", root)
	require.True(t, ch.Full)
	assert.Same(t, root, m.SidecarFor("a"))
	own := &Sidecar{Namespace: "a", Name: "z", Hosts: []string{"*/*"}, Created: time.Unix(10, 0)}
	older := &Sidecar{Namespace: "a", Name: "y", Hosts: []string{"~/*"}, Created: time.Unix(5, 0)}
	m.SetSidecar("a", "z", own)
	m.SetSidecar("a", "y", older)
	assert.Same(t, older, m.SidecarFor("a"), "the oldest Sidecar of the namespace")
	assert.Same(t, root, m.SidecarFor("b"))
	m.DeleteSidecar("a", "y")
	assert.Same(t, own, m.SidecarFor("a"))

	sc, skip := ConvertSidecar("a", "def", time.Time{}, &apinet.Sidecar{})
	require.Nil(t, skip)
	assert.Equal(t, []string{"*/*"}, sc.Hosts, "no egress: everything")
}

// A workloadSelector Sidecar scopes the proxies whose labels it selects (the oldest selecting one
// wins); the others keep the namespace-wide Sidecar; a root-namespace selector selects only there.
func TestSidecarForProxyBySelector(t *testing.T) {
	m := New(Options{})
	sel, skip := ConvertSidecar("a", "sel", time.Unix(20, 0), &apinet.Sidecar{
		WorkloadSelector: &apinet.WorkloadSelector{Labels: map[string]string{"app": "x"}},
		Egress:           []*apinet.IstioEgressListener{{Hosts: []string{"./*"}}}})
	require.Nil(t, skip)
	assert.Equal(t, map[string]string{"app": "x"}, sel.Selector)
	wide := &Sidecar{Namespace: "a", Name: "wide", Hosts: []string{"*/*"}, Created: time.Unix(30, 0)}
	m.SetSidecar("a", "wide", wide)
	m.SetSidecar("a", "sel", sel)
	assert.Same(t, sel, m.SidecarForProxy("a", map[string]string{"app": "x", "v": "1"}))
	assert.Same(t, wide, m.SidecarForProxy("a", map[string]string{"app": "y"}))
	assert.Same(t, wide, m.SidecarFor("a"), "a selector Sidecar is never the namespace's default")
	older := &Sidecar{Namespace: "a", Name: "z-older", Hosts: []string{"~/*"}, Created: time.Unix(1, 0), Selector: map[string]string{"v": "1"}}
	m.SetSidecar("a", "z-older", older)
	assert.Same(t, older, m.SidecarForProxy("a", map[string]string{"app": "x", "v": "1"}), "the oldest selecting Sidecar")
	rootSel := &Sidecar{Namespace: DefaultRootNamespace, Name: "r", Hosts: []string{"~/*"}, Selector: map[string]string{"app": "q"}}
	m.SetSidecar(DefaultRootNamespace, "r", rootSel)
	assert.Nil(t, m.SidecarForProxy("b", map[string]string{"app": "q"}), "a root selector selects only in the root namespace")

	// A pod's label change is a push when a selector Sidecar could now select it, not otherwise.
	pod := func(labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", Labels: labels}}
	}
	m.SetPod(pod(map[string]string{"app": "y"}))
	ch := m.SetPod(pod(map[string]string{"app": "x"}))
	assert.True(t, ch.Full)
	assert.Contains(t, ch.Configs, "Pod/a/p")
	l, ok := m.PodLabels("a", "p")
	require.True(t, ok)
	assert.Equal(t, "x", l["app"])
	m.DeleteSidecar("a", "sel")
	m.DeleteSidecar("a", "z-older")
	assert.True(t, m.SetPod(pod(map[string]string{"app": "z"})).Empty(), "no selector Sidecar in a: nothing to push")
}

// TestFullPushForAServicesFirstEndpoints: as istiod's EndpointIndex, a service's first
// endpoints are a full push ("new service": the shard is created), while 1→0→1 is incremental
// (the shard is kept, its keys preserved) until the service itself is deleted.
func TestFullPushForAServicesFirstEndpoints(t *testing.T) {
	m := New(quiet())
	const host = "web.app.svc.cluster.local"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "app"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.11", Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	slice := func(addrs ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "app", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		return s
	}
	require.True(t, m.SetKubeService(svc).Full)
	ch := m.SetEndpointSlice(slice("10.244.0.5"))
	require.True(t, ch.Full)
	require.Equal(t, []string{"new service"}, ch.Reasons)
	for i, addrs := range [][]string{{"10.244.0.5", "10.244.0.6"}, {}, {"10.244.0.7"}} {
		ch = m.SetEndpointSlice(slice(addrs...))
		require.False(t, ch.Full, "change %d: the service has had endpoints", i)
		require.Contains(t, ch.Hosts, host)
	}
	m.DeleteEndpointSlice("app", "web-1")
	require.True(t, m.DeleteKubeService("app", "web").Full)
	require.True(t, m.SetKubeService(svc).Full)
	require.False(t, hasEndpoints(m.Entry(host)))
	ch = m.SetEndpointSlice(slice("10.244.0.8"))
	require.Contains(t, ch.Reasons, "new service", "a service defined again is new again")
}

// TestHeadlessEndpointsFullPushOnlyWithTCPPorts: an endpoint change of a headless Service is a
// full push when a port is not HTTP (proxies get a listener per endpoint IP), an EDS push when
// every port is HTTP, as istiod's EndpointSlice handler.
func TestHeadlessEndpointsFullPushOnlyWithTCPPorts(t *testing.T) {
	for _, tc := range []struct {
		port string
		full bool
	}{{"tcp-db", true}, {"http-web", false}} {
		m := New(quiet())
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "app"},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: tc.port, Port: 5432}}}}
		slice := func(addrs ...string) *discoveryv1.EndpointSlice {
			s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "db-1", Namespace: "app", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
				Ports: []discoveryv1.EndpointPort{{Name: ptr.To(tc.port), Port: ptr.To[int32](5432)}}}
			for _, a := range addrs {
				s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
			}
			return s
		}
		m.SetKubeService(svc)
		require.Contains(t, m.SetEndpointSlice(slice("10.244.0.5")).Reasons, "new service", tc.port)
		ch := m.SetEndpointSlice(slice("10.244.0.5", "10.244.0.6"))
		require.Equal(t, tc.full, ch.Full, tc.port)
		if tc.full {
			require.Equal(t, []string{"headless endpoints"}, ch.Reasons)
		}
	}
}
