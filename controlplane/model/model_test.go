package model

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

func TestRegressFullPushOnEndpointReappear(t *testing.T) {
	m := New(quiet(regress.FullPushOnEndpointReappear))
	m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test", "10.0.0.1")))
	ch := m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test")))
	require.True(t, ch.Full, "N→0 changes the service-account set")
	ch = m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test", "10.0.0.1")))
	require.True(t, ch.Full, "0→N forces a full push with the switch")
	require.Contains(t, ch.Reasons, "service accounts changed")
	ch = m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test", "10.0.0.1", "10.0.0.2")))
	require.False(t, ch.Full, "same accounts: still EDS")
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

func workloadSetup(t *testing.T, m *Model) {
	spec := se("wl.test")
	spec.WorkloadSelector = &v1alpha3.WorkloadSelector{Labels: map[string]string{"app": "wl"}}
	m.SetServiceEntry("ns", "wl", timeZero, mustConvert(t, "wl", spec))
	for i, p := range []uint32{9001, 9002, 9003} {
		ep, sk := ConvertWorkloadEntry("ns", "we", &v1alpha3.WorkloadEntry{Address: "10.1.0." + string(rune('1'+i)),
			Ports: map[string]uint32{"http": p}, Labels: map[string]string{"app": "wl"}})
		require.Nil(t, sk)
		m.SetWorkloadEntry("ns", []string{"a", "b", "c"}[i], ep, true)
	}
	require.ElementsMatch(t, []uint32{9001, 9002, 9003}, ports(m.Entry("wl.test"), 80))
}

func TestWorkloadEntryDeleteKeepsEndpointPorts(t *testing.T) {
	for _, regressed := range []bool{false, true} {
		var opts Options
		if regressed {
			opts = quiet(regress.SEEndpointPort)
		} else {
			opts = quiet()
		}
		m := New(opts)
		workloadSetup(t, m)
		ch := m.DeleteWorkloadEntry("ns", "c")
		require.False(t, ch.Full)
		if regressed {
			require.Equal(t, []uint32{80, 80}, ports(m.Entry("wl.test"), 80), "se-endpoint-port: the SE port")
		} else {
			require.ElementsMatch(t, []uint32{9001, 9002}, ports(m.Entry("wl.test"), 80))
		}
	}
}

func TestInlineEndpointDeleteKeepsEndpointPorts(t *testing.T) {
	for _, regressed := range []bool{false, true} {
		opts := quiet()
		if regressed {
			opts = quiet(regress.SEEndpointPort)
		}
		m := New(opts)
		m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test", "10.0.0.1", "10.0.0.2")))
		m.SetServiceEntry("ns", "a", timeZero, mustConvert(t, "a", se("a.test", "10.0.0.1")))
		want := []uint32{9000}
		if regressed {
			want = []uint32{80}
		}
		require.Equal(t, want, ports(m.Entry("a.test"), 80))
	}
}

func TestWorkloadEntryRelabel(t *testing.T) {
	for _, regressed := range []bool{false, true} {
		opts := quiet()
		if regressed {
			opts = quiet(regress.WEStaleLabel)
		}
		m := New(opts)
		workloadSetup(t, m)
		ep, _ := ConvertWorkloadEntry("ns", "b", &v1alpha3.WorkloadEntry{Address: "10.1.0.2",
			Ports: map[string]uint32{"http": 9002}, Labels: map[string]string{"app": "other"}})
		m.SetWorkloadEntry("ns", "b", ep, true)
		if regressed {
			require.Len(t, m.Entry("wl.test").Endpoints[80], 3, "we-stale-label: the relabelled entry stays")
		} else {
			require.ElementsMatch(t, []uint32{9001, 9003}, ports(m.Entry("wl.test"), 80))
		}
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
	require.False(t, ch.Full)
	require.Contains(t, ch.Hosts, "echo.app.svc.cluster.local")
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

	// The Pod goes unready before the EndpointSlice controller notices: EDS, unhealthy at once.
	ch = m.SetPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "echo-1", Namespace: "app", Labels: map[string]string{"app": "echo"}},
		Spec:   corev1.PodSpec{ServiceAccountName: "echo-sa"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}})
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
