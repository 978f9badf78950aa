package model

import (
	"fmt"
	"maps"
	"net/netip"
	"sort"
	"strings"

	"istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Limits on input the conversion accepts; anything beyond is skipped with a reason.
const (
	// MaxLabels is the largest label set an endpoint may carry.
	MaxLabels = 64
	// MaxLabelBytes bounds the total size of an endpoint's labels.
	MaxLabelBytes = 8 << 10
)

// Skip is one piece of input the conversion refused, with the reason (logged and counted).
type Skip struct {
	Object string // "ServiceEntry/ns/name"
	What   string // "host \"x\"", "port 0", "endpoint 1.2.3.4", or "" for the whole object
	Reason string // short, stable: used as the metric label
}

func (s Skip) Error() string {
	if s.What == "" {
		return fmt.Sprintf("%s skipped: %s", s.Object, s.Reason)
	}
	return fmt.Sprintf("%s: %s skipped: %s", s.Object, s.What, s.Reason)
}

// SEEndpoint is a ServiceEntry inline endpoint or a selected WorkloadEntry, after validation.
type SEEndpoint struct {
	Address        string
	Ports          map[string]uint32 // port name → endpoint port
	Labels         map[string]string
	ServiceAccount string
	Weight         uint32
}

func (e SEEndpoint) equal(o SEEndpoint) bool {
	return e.Address == o.Address && e.ServiceAccount == o.ServiceAccount && e.Weight == o.Weight &&
		maps.Equal(e.Ports, o.Ports) && maps.Equal(e.Labels, o.Labels)
}

// ConvertedServiceEntry is a validated ServiceEntry.
type ConvertedServiceEntry struct {
	Services  []*Service // one per valid host, all with the same ports
	Endpoints []SEEndpoint
	// Selector is the workloadSelector; nil when the ServiceEntry has none.
	Selector map[string]string
}

// ConvertServiceEntry validates a ServiceEntry spec and converts it. Invalid hosts, ports and
// endpoints are skipped one by one (reported in skips); if nothing usable remains the whole
// entry is skipped and err is set. It never panics on any input.
func ConvertServiceEntry(namespace, name string, spec *v1alpha3.ServiceEntry) (out *ConvertedServiceEntry, skips []Skip, err error) {
	obj := "ServiceEntry/" + namespace + "/" + name
	fail := func(reason string) (*ConvertedServiceEntry, []Skip, error) {
		s := Skip{Object: obj, Reason: reason}
		return nil, append(skips, s), s
	}
	if spec == nil {
		return fail("empty spec")
	}
	if len(spec.GetHosts()) == 0 {
		return fail("no hosts")
	}
	res := ResolutionStatic
	switch spec.GetResolution() {
	case v1alpha3.ServiceEntry_STATIC:
	case v1alpha3.ServiceEntry_DNS, v1alpha3.ServiceEntry_DNS_ROUND_ROBIN, v1alpha3.ServiceEntry_DYNAMIC_DNS:
		res = ResolutionDNS
	case v1alpha3.ServiceEntry_NONE:
		res = ResolutionNone
	default:
		// The number goes into What, not the reason: a reason is a metric label, and a label
		// value taken from input would let one object mint any number of series.
		s := Skip{Object: obj, What: fmt.Sprintf("resolution %d", spec.GetResolution()), Reason: "unknown resolution"}
		return nil, append(skips, s), s
	}

	var ports []Port
	seenPort := map[uint32]bool{}
	seenName := map[string]bool{}
	for _, p := range spec.GetPorts() {
		if p == nil {
			continue
		}
		what := fmt.Sprintf("port %d", p.GetNumber())
		switch {
		case p.GetNumber() == 0 || p.GetNumber() > 65535:
			skips = append(skips, Skip{obj, what, "bad port number"})
		case p.GetTargetPort() > 65535:
			skips = append(skips, Skip{obj, what, "bad target port"})
		case seenPort[p.GetNumber()]:
			skips = append(skips, Skip{obj, what, "duplicate port"})
		case p.GetName() != "" && seenName[p.GetName()]:
			skips = append(skips, Skip{obj, what, "duplicate port name"})
		case len(p.GetName()) > 253:
			skips = append(skips, Skip{obj, what, "bad port name"})
		default:
			seenPort[p.GetNumber()] = true
			seenName[p.GetName()] = true
			ports = append(ports, Port{Name: p.GetName(), Number: p.GetNumber(),
				Protocol: normalizeProtocol(p.GetProtocol()), TargetPort: p.GetTargetPort()})
		}
	}
	if len(ports) == 0 {
		return fail("no valid ports")
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i].Number < ports[j].Number })

	seenHost := map[string]bool{}
	var services []*Service
	for _, h := range spec.GetHosts() {
		h = strings.ToLower(h)
		what := fmt.Sprintf("host %q", truncate(h))
		if seenHost[h] {
			skips = append(skips, Skip{obj, what, "duplicate host"})
			continue
		}
		if reason := checkHost(h); reason != "" {
			skips = append(skips, Skip{obj, what, reason})
			continue
		}
		seenHost[h] = true
		services = append(services, &Service{Hostname: h, Namespace: namespace, Ports: ports,
			Resolution: res, Source: obj})
	}
	if len(services) == 0 {
		return fail("no valid hosts")
	}
	out = &ConvertedServiceEntry{Services: services}
	var labelSets []map[string]string
	for _, e := range spec.GetEndpoints() {
		ep, reason := convertWorkload(e, res)
		if reason != "" {
			skips = append(skips, Skip{obj, "endpoint " + truncate(e.GetAddress()), reason})
			continue
		}
		ep.Labels = shareLabels(&labelSets, ep.Labels)
		out.Endpoints = append(out.Endpoints, ep)
	}
	if sel := spec.GetWorkloadSelector(); sel != nil {
		out.Selector = map[string]string{}
		for k, v := range sel.GetLabels() {
			out.Selector[k] = v
		}
	}
	return out, skips, nil
}

// ConvertWorkloadEntry validates a WorkloadEntry spec.
func ConvertWorkloadEntry(namespace, name string, spec *v1alpha3.WorkloadEntry) (SEEndpoint, *Skip) {
	ep, reason := convertWorkload(spec, ResolutionStatic)
	if reason != "" {
		return SEEndpoint{}, &Skip{Object: "WorkloadEntry/" + namespace + "/" + name, Reason: reason}
	}
	return ep, nil
}

func convertWorkload(e *v1alpha3.WorkloadEntry, res Resolution) (SEEndpoint, string) {
	if e == nil {
		return SEEndpoint{}, "empty endpoint"
	}
	addr := e.GetAddress()
	switch {
	case addr == "" && res != ResolutionNone:
		return SEEndpoint{}, "no address"
	case strings.HasPrefix(addr, "unix://"):
		return SEEndpoint{}, "unix domain socket endpoints are not supported"
	case addr != "":
		if ip, err := netip.ParseAddr(addr); err == nil {
			if ip.Zone() != "" {
				return SEEndpoint{}, "bad address"
			}
			if canon := ip.String(); canon != addr {
				addr = canon
			}
		} else if res == ResolutionDNS {
			if checkHost(strings.ToLower(addr)) != "" {
				return SEEndpoint{}, "bad address"
			}
		} else {
			return SEEndpoint{}, "bad address"
		}
	}
	for _, p := range e.GetPorts() {
		if p == 0 || p > 65535 {
			return SEEndpoint{}, "bad endpoint port"
		}
	}
	if reason := checkLabels(e.GetLabels()); reason != "" {
		return SEEndpoint{}, reason
	}
	// The ports and labels maps are shared with the informer's object, not copied: informer
	// objects are never mutated, and copying them was ~15 % of the heap at 50k endpoints.
	return SEEndpoint{Address: addr, Ports: e.GetPorts(), Labels: e.GetLabels(),
		ServiceAccount: e.GetServiceAccount(), Weight: e.GetWeight()}, ""
}

// shareLabels returns a map equal to l from sets (the label sets of a ServiceEntry's earlier
// endpoints, up to 4 remembered), or l, remembered. The endpoints of one ServiceEntry usually carry
// the same labels; one map each was ~15 % of the control plane's heap at 50 000 endpoints (heap
// profile of BenchmarkHeapPerEndpoint). Label maps are never mutated, so sharing is safe.
func shareLabels(sets *[]map[string]string, l map[string]string) map[string]string {
	if len(l) == 0 {
		return l
	}
	for _, s := range *sets {
		if maps.Equal(s, l) {
			return s
		}
	}
	if len(*sets) < 4 {
		*sets = append(*sets, l)
	}
	return l
}

// checkHost returns why h is not a usable host name ("" if it is). Wildcards are refused: the
// reference control plane makes one cluster per concrete host.
func checkHost(h string) string {
	if h == "" {
		return "empty host"
	}
	if strings.Contains(h, "*") {
		return "wildcard hosts are not supported"
	}
	if len(validation.IsDNS1123Subdomain(h)) > 0 {
		return "bad host name"
	}
	return ""
}

func checkLabels(l map[string]string) string {
	if len(l) > MaxLabels {
		return "too many labels"
	}
	size := 0
	for k, v := range l {
		size += len(k) + len(v)
		if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			return "bad label"
		}
	}
	if size > MaxLabelBytes {
		return "label set too large"
	}
	return ""
}

// protocols are istiod's protocol names (protocol.Parse), upper case.
var protocols = map[string]string{
	"TCP": "TCP", "UDP": "UDP", "GRPC": "GRPC", "GRPC-WEB": "GRPC-WEB", "HTTP": "HTTP",
	"HTTP_PROXY": "HTTP_PROXY", "HTTP2": "HTTP2", "HTTPS": "HTTPS", "TLS": "TLS", "MONGO": "MONGO",
	"REDIS": "REDIS", "MYSQL": "MYSQL", "THRIFT": "THRIFT",
}

// normalizeProtocol parses a protocol name as istiod does (case-insensitive). An empty or
// unknown one is "auto" for istiod, which then sniffs the first bytes of each connection; the
// reference control plane has no sniffing and treats it as TCP (no HTTP connection manager).
func normalizeProtocol(p string) string {
	if known, ok := protocols[strings.ToUpper(p)]; ok {
		return known
	}
	return "TCP"
}

// HTTPLike reports whether a port's protocol gets an HTTP connection manager (istiod's
// IsHTTP: HTTP, HTTP2, gRPC, gRPC-Web, HTTP_PROXY). HTTPS and TLS are TLS passthrough, the rest
// opaque TCP.
func HTTPLike(protocol string) bool {
	switch protocol {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB", "HTTP_PROXY":
		return true
	}
	return false
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// endpointPort is the port an SE endpoint serves service port p on: the endpoint's own port for
// p's name, else p's targetPort, else p's number.
func endpointPort(ep SEEndpoint, p Port) uint32 {
	if n, ok := ep.Ports[p.Name]; ok && p.Name != "" {
		return n
	}
	if p.TargetPort != 0 {
		return p.TargetPort
	}
	return p.Number
}

// selects reports whether selector (non-nil) matches labels.
func selects(selector, labels map[string]string) bool {
	if selector == nil {
		return false
	}
	for k, v := range selector {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}
