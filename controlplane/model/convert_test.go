package model

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"istio.io/api/networking/v1alpha3"
)

func httpPort(n uint32) *v1alpha3.ServicePort {
	return &v1alpha3.ServicePort{Number: n, Name: fmt.Sprintf("http-%d", n), Protocol: "HTTP"}
}

func TestConvertServiceEntrySkipsBadInput(t *testing.T) {
	huge := map[string]string{}
	for i := 0; i <= MaxLabels; i++ {
		huge[fmt.Sprintf("k%d", i)] = "v"
	}
	cases := []struct {
		name      string
		spec      *v1alpha3.ServiceEntry
		wantErr   string
		hosts     []string
		ports     []uint32
		endpoints []string
		skips     []string
	}{
		{name: "no hosts", spec: &v1alpha3.ServiceEntry{Ports: []*v1alpha3.ServicePort{httpPort(80)}}, wantErr: "no hosts"},
		{name: "nil spec", spec: nil, wantErr: "empty spec"},
		{name: "only bad ports", spec: &v1alpha3.ServiceEntry{Hosts: []string{"a.test"},
			Ports: []*v1alpha3.ServicePort{{Number: 0}, {Number: 70000}, nil}}, wantErr: "no valid ports"},
		{name: "only bad hosts", spec: &v1alpha3.ServiceEntry{Hosts: []string{"", "*.wild.test", "Bad Host!"},
			Ports: []*v1alpha3.ServicePort{httpPort(80)}}, wantErr: "no valid hosts"},
		{
			name: "mixed good and bad",
			spec: &v1alpha3.ServiceEntry{
				Hosts: []string{"A.test", "a.test", "b.test", "bad host"},
				Ports: []*v1alpha3.ServicePort{httpPort(80), httpPort(80), {Number: 81, Name: "x", TargetPort: 99999},
					{Number: 443, Name: "https", Protocol: "TLS"}},
				Endpoints: []*v1alpha3.WorkloadEntry{
					{Address: "10.0.0.1"},
					{Address: "not-an-ip"},
					{Address: "10.0.0.2", Ports: map[string]uint32{"http-80": 0}},
					{Address: "10.0.0.3", Labels: huge},
					{Address: "10.0.0.4", Labels: map[string]string{"bad key!": "v"}},
					{Address: "unix:///sock"},
					{Address: "fe80::1%eth0"},
					nil,
				},
			},
			hosts:     []string{"a.test", "b.test"},
			ports:     []uint32{80, 443},
			endpoints: []string{"10.0.0.1"},
			skips: []string{"duplicate host", "bad host name", "duplicate port", "bad target port", "bad address",
				"bad endpoint port", "too many labels", "bad label", "unix domain socket endpoints are not supported", "empty endpoint"},
		},
		{
			name: "dns endpoints may be host names",
			spec: &v1alpha3.ServiceEntry{Hosts: []string{"ext.test"}, Resolution: v1alpha3.ServiceEntry_DNS,
				Ports: []*v1alpha3.ServicePort{httpPort(80)}, Endpoints: []*v1alpha3.WorkloadEntry{{Address: "backend.example.com"}}},
			hosts: []string{"ext.test"}, ports: []uint32{80}, endpoints: []string{"backend.example.com"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, skips, err := ConvertServiceEntry("ns", "se", tc.spec)
			var reasons []string
			for _, s := range skips {
				reasons = append(reasons, s.Reason)
				require.Contains(t, s.Error(), "ServiceEntry/ns/se")
			}
			if tc.wantErr != "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.wantErr)
				require.Nil(t, out)
				return
			}
			require.NoError(t, err)
			var hosts []string
			for _, s := range out.Services {
				hosts = append(hosts, s.Hostname)
			}
			require.Equal(t, tc.hosts, hosts)
			var ports []uint32
			for _, p := range out.Services[0].Ports {
				ports = append(ports, p.Number)
			}
			require.Equal(t, tc.ports, ports)
			var eps []string
			for _, e := range out.Endpoints {
				eps = append(eps, e.Address)
			}
			require.Equal(t, tc.endpoints, eps)
			for _, want := range tc.skips {
				require.Contains(t, reasons, want)
			}
		})
	}
}

func TestEndpointPortPrecedence(t *testing.T) {
	p := Port{Name: "http", Number: 80, TargetPort: 8080}
	require.Equal(t, uint32(9000), endpointPort(SEEndpoint{Ports: map[string]uint32{"http": 9000}}, p))
	require.Equal(t, uint32(8080), endpointPort(SEEndpoint{Ports: map[string]uint32{"other": 9000}}, p))
	require.Equal(t, uint32(80), endpointPort(SEEndpoint{}, Port{Name: "http", Number: 80}))
}

// FuzzConvertServiceEntry: no input crashes the conversion or the model, and whatever the
// conversion accepts is well formed.
func FuzzConvertServiceEntry(f *testing.F) {
	f.Add("a.test,b.test", uint32(80), "http", "HTTP", uint32(8080), "10.0.0.1", "http", uint32(9000), "app", "x", int32(1))
	f.Add("", uint32(0), "", "", uint32(0), "", "", uint32(0), "", "", int32(0))
	f.Add("*.wild,a.test,a.test", uint32(70000), "x", "tcp", uint32(99999), "unix:///x", "", uint32(65536), "bad key", "v", int32(2))
	f.Add("x.test", uint32(443), "https", "TLS", uint32(0), "::1", "https", uint32(1), strings.Repeat("k", 70), "v", int32(3))
	f.Fuzz(func(t *testing.T, hosts string, port uint32, portName, proto string, target uint32, addr, epPortName string, epPort uint32, lk, lv string, res int32) {
		spec := &v1alpha3.ServiceEntry{
			Hosts:      strings.Split(hosts, ","),
			Ports:      []*v1alpha3.ServicePort{{Number: port, Name: portName, Protocol: proto, TargetPort: target}, {Number: port}},
			Resolution: v1alpha3.ServiceEntry_Resolution(res),
			Endpoints: []*v1alpha3.WorkloadEntry{
				{Address: addr, Ports: map[string]uint32{epPortName: epPort}, Labels: map[string]string{lk: lv}},
				{Address: addr},
			},
			WorkloadSelector: &v1alpha3.WorkloadSelector{Labels: map[string]string{lk: lv}},
		}
		out, skips, err := ConvertServiceEntry("ns", "fuzz", spec)
		for _, s := range skips {
			require.NotEmpty(t, s.Reason)
		}
		if err != nil {
			require.Nil(t, out)
			return
		}
		require.NotEmpty(t, out.Services)
		seen := map[string]bool{}
		for _, s := range out.Services {
			require.Empty(t, checkHost(s.Hostname), "accepted host %q", s.Hostname)
			require.False(t, seen[s.Hostname], "duplicate host %q accepted", s.Hostname)
			seen[s.Hostname] = true
			require.NotEmpty(t, s.Ports)
			for _, p := range s.Ports {
				require.True(t, p.Number > 0 && p.Number <= 65535)
				require.LessOrEqual(t, p.TargetPort, uint32(65535))
			}
		}
		for _, e := range out.Endpoints {
			require.LessOrEqual(t, len(e.Labels), MaxLabels)
			for _, n := range e.Ports {
				require.True(t, n > 0 && n <= 65535)
			}
		}
		// The model takes it without panicking and every endpoint port is valid.
		m := New(Options{})
		m.SetServiceEntry("ns", "fuzz", timeZero, out)
		for _, e := range m.Entries() {
			for _, eps := range e.Endpoints {
				for _, ep := range eps {
					require.True(t, ep.Port > 0 && ep.Port <= 65535, "endpoint port %d", ep.Port)
				}
			}
		}
	})
}

// Endpoints of one ServiceEntry with equal labels share one map; different labels stay apart.
func TestConvertServiceEntrySharesEqualLabels(t *testing.T) {
	spec := &v1alpha3.ServiceEntry{Hosts: []string{"a.test"}, Resolution: v1alpha3.ServiceEntry_STATIC,
		Ports: []*v1alpha3.ServicePort{httpPort(80)},
		Endpoints: []*v1alpha3.WorkloadEntry{
			{Address: "10.0.0.1", Labels: map[string]string{"app": "a"}},
			{Address: "10.0.0.2", Labels: map[string]string{"app": "a"}},
			{Address: "10.0.0.3", Labels: map[string]string{"app": "b"}},
			{Address: "10.0.0.4"},
		}}
	out, _, err := ConvertServiceEntry("ns", "a", spec)
	require.NoError(t, err)
	require.Len(t, out.Endpoints, 4)
	same := func(a, b map[string]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	require.True(t, same(out.Endpoints[0].Labels, out.Endpoints[1].Labels), "equal labels share a map")
	require.False(t, same(out.Endpoints[0].Labels, out.Endpoints[2].Labels))
	require.Equal(t, map[string]string{"app": "b"}, out.Endpoints[2].Labels)
	require.Empty(t, out.Endpoints[3].Labels)
}
