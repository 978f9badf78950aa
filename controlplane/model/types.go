// Package model is the reference control plane's service registry: Kubernetes Services,
// EndpointSlices and Pods and Istio ServiceEntries and WorkloadEntries, converted into one set of
// services (by host name) with their endpoints (by service port). Every mutation returns a Change
// that says whether the xDS config must be fully re-pushed or only the endpoints (EDS) of some hosts.
package model

import (
	"maps"
	"slices"
	"strconv"
)

// Resolution says how a service's endpoints are found; it decides the Envoy cluster type.
type Resolution int

const (
	// ResolutionStatic: endpoints are IP addresses the model holds; an EDS cluster.
	ResolutionStatic Resolution = iota
	// ResolutionDNS: endpoints are host names the proxy resolves; a STRICT_DNS cluster.
	ResolutionDNS
	// ResolutionNone: traffic goes to the address the caller asked for; an ORIGINAL_DST cluster.
	ResolutionNone
)

func (r Resolution) String() string {
	switch r {
	case ResolutionDNS:
		return "DNS"
	case ResolutionNone:
		return "NONE"
	}
	return "STATIC"
}

// Port is one service port.
type Port struct {
	Name       string
	Number     uint32
	Protocol   string // upper case: HTTP, HTTP2, GRPC, TCP, TLS, ...
	TargetPort uint32 // 0: same as Number (or the endpoint's own port)
}

// Service is one host name with its ports.
type Service struct {
	// Hostname is the fully qualified host (for Kubernetes: name.ns.svc.cluster.local).
	Hostname  string
	Namespace string
	// KubeName is the Kubernetes Service name; set only for Kubernetes Services, it enables the
	// short host forms (name, name.ns, name.ns.svc).
	KubeName   string
	ClusterIP  string
	Ports      []Port
	Resolution Resolution
	// Source names the object it came from: "Service/ns/name" or "ServiceEntry/ns/name".
	Source string
}

// Port returns the port with the given number.
func (s *Service) Port(number uint32) (Port, bool) {
	for _, p := range s.Ports {
		if p.Number == number {
			return p, true
		}
	}
	return Port{}, false
}

func (s *Service) equal(o *Service) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.Hostname == o.Hostname && s.Namespace == o.Namespace && s.KubeName == o.KubeName &&
		s.ClusterIP == o.ClusterIP && s.Resolution == o.Resolution && s.Source == o.Source &&
		slices.Equal(s.Ports, o.Ports)
}

// Endpoint is one workload instance behind a service port.
type Endpoint struct {
	Address        string
	Port           uint32
	Labels         map[string]string
	ServiceAccount string
	Healthy        bool
	Weight         uint32
}

func (e Endpoint) equal(o Endpoint) bool {
	return e.Address == o.Address && e.Port == o.Port && e.ServiceAccount == o.ServiceAccount &&
		e.Healthy == o.Healthy && e.Weight == o.Weight && maps.Equal(e.Labels, o.Labels)
}

func endpointsEqual(a, b []Endpoint) bool {
	return slices.EqualFunc(a, b, Endpoint.equal)
}

func sortEndpoints(eps []Endpoint) {
	slices.SortFunc(eps, func(a, b Endpoint) int {
		if a.Address != b.Address {
			if a.Address < b.Address {
				return -1
			}
			return 1
		}
		return int(a.Port) - int(b.Port)
	})
}

// ClusterName is the Envoy cluster (and ClusterLoadAssignment) name of a service port, Istio's
// outbound form: "outbound|PORT||HOST".
func ClusterName(host string, port uint32) string {
	return "outbound|" + strconv.FormatUint(uint64(port), 10) + "||" + host
}
