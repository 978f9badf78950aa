package model

import (
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

type kubeState struct {
	key       string
	created   time.Time
	svc       *Service
	endpoints map[uint32][]Endpoint
}

type sliceState struct {
	svcKey string
	slice  *discoveryv1.EndpointSlice
}

// podState is what endpoints take from their Pod: labels and service account. Not its
// readiness: as istiod, an endpoint's health is its EndpointSlice condition alone
// (endpointHealthStatus, pilot/pkg/serviceregistry/kube/controller/endpointslice.go:264-283 at
// istio 2026-08), and a Pod's Ready change pushes no endpoint: istiod's pod handler only keeps
// its index of ready pods by IP, tells the workload handlers (ServiceEntries selecting pods) and
// recomputes the pod's own proxy (pod.go:147-191, 267-325), while building endpoints it reads
// the Pod from the informer whatever its readiness (getPodByKey, pod.go:359). Reacting to the
// Pod's condition gave the reference a head start of the EndpointSlice controller's delay.
type podState struct {
	labels map[string]string
	sa     string
}

// SetKubeService adds or updates a Kubernetes Service.
func (m *Model) SetKubeService(s *corev1.Service) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := s.Namespace + "/" + s.Name
	host := s.Name + "." + s.Namespace + ".svc." + m.opts.DomainSuffix
	svc := &Service{Hostname: host, Namespace: s.Namespace, KubeName: s.Name, Source: "Service/" + key}
	if s.Spec.ClusterIP != corev1.ClusterIPNone {
		svc.ClusterIP = s.Spec.ClusterIP
	}
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		svc.Resolution = ResolutionDNS
	}
	seen := map[uint32]bool{}
	for _, p := range s.Spec.Ports {
		if p.Port <= 0 || p.Port > 65535 || seen[uint32(p.Port)] || (p.Protocol != "" && p.Protocol != corev1.ProtocolTCP) {
			continue
		}
		seen[uint32(p.Port)] = true
		port := Port{Name: p.Name, Number: uint32(p.Port), Protocol: kubeProtocol(p)}
		if p.TargetPort.IntVal > 0 {
			port.TargetPort = uint32(p.TargetPort.IntVal)
		}
		svc.Ports = append(svc.Ports, port)
	}
	sort.Slice(svc.Ports, func(i, j int) bool { return svc.Ports[i].Number < svc.Ports[j].Number })
	var ch Change
	if len(svc.Ports) == 0 {
		m.skip(Skip{Object: "Service/" + key, Reason: "no TCP ports"})
		return m.deleteKubeLocked(key)
	}
	ks := &kubeState{key: key, created: s.CreationTimestamp.Time, svc: svc}
	if old := m.kube[key]; old != nil {
		ks.created = old.created
		if old.svc.Hostname != host {
			delete(m.claims[old.svc.Hostname], "svc/"+key)
			m.recomputeHost(old.svc.Hostname, &ch, "service")
		}
	}
	m.kube[key] = ks
	m.computeKubeEndpoints(ks)
	prev, _ := m.owner(host)
	m.claim(host, claim{created: ks.created, key: "svc/" + key})
	m.reportDuplicate(host, "svc/"+key, prev.key)
	m.recomputeHost(host, &ch, "service")
	return ch
}

// DeleteKubeService removes a Kubernetes Service.
func (m *Model) DeleteKubeService(ns, name string) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleteKubeLocked(ns + "/" + name)
}

func (m *Model) deleteKubeLocked(key string) Change {
	var ch Change
	ks := m.kube[key]
	if ks == nil {
		return ch
	}
	delete(m.kube, key)
	delete(m.claims[ks.svc.Hostname], "svc/"+key)
	m.recomputeHost(ks.svc.Hostname, &ch, "service")
	return ch
}

// SetEndpointSlice adds or updates an EndpointSlice.
func (m *Model) SetEndpointSlice(s *discoveryv1.EndpointSlice) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := s.Namespace + "/" + s.Name
	var ch Change
	old := m.slices[key]
	svcName := s.Labels[discoveryv1.LabelServiceName]
	if svcName == "" {
		if old != nil {
			return m.deleteSliceLocked(key)
		}
		return ch
	}
	st := &sliceState{svcKey: s.Namespace + "/" + svcName, slice: s}
	m.slices[key] = st
	index(m.slicesBySvc, st.svcKey, key, st)
	if old != nil && old.svcKey != st.svcKey {
		unindex(m.slicesBySvc, old.svcKey, key)
		m.refreshKube(old.svcKey, &ch)
	}
	for _, e := range s.Endpoints {
		if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
			pk := s.Namespace + "/" + e.TargetRef.Name
			if m.podRefs[pk] == nil {
				m.podRefs[pk] = map[string]struct{}{}
			}
			m.podRefs[pk][st.svcKey] = struct{}{}
		}
	}
	m.refreshKube(st.svcKey, &ch)
	return ch
}

// DeleteEndpointSlice removes an EndpointSlice.
func (m *Model) DeleteEndpointSlice(ns, name string) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleteSliceLocked(ns + "/" + name)
}

func (m *Model) deleteSliceLocked(key string) Change {
	var ch Change
	old := m.slices[key]
	if old == nil {
		return ch
	}
	delete(m.slices, key)
	unindex(m.slicesBySvc, old.svcKey, key)
	m.refreshKube(old.svcKey, &ch)
	return ch
}

// SetPod records a Pod's labels and service account (endpoints carry them).
func (m *Model) SetPod(p *corev1.Pod) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	var ch Change
	if len(p.Labels) > MaxLabels {
		m.skip(Skip{Object: "Pod/" + key, What: "labels", Reason: "too many labels"})
	}
	next := &podState{labels: p.Labels, sa: p.Spec.ServiceAccountName}
	if len(p.Labels) > MaxLabels {
		next.labels = nil
	}
	old := m.pods[key]
	if old != nil && old.sa == next.sa && mapsEqual(old.labels, next.labels) {
		return ch
	}
	m.pods[key] = next
	if old != nil && !mapsEqual(old.labels, next.labels) && m.hasSelectorSidecar(p.Namespace) {
		// The pod's proxy may now be selected by another Sidecar: a push for the proxies' scopes
		// (istiod pushes a proxy whose labels changed).
		ch.fullConfig("Pod/"+key, "pod labels")
	}
	for svcKey := range m.podRefs[key] {
		m.refreshKube(svcKey, &ch)
	}
	return ch
}

// DeletePod forgets a Pod.
func (m *Model) DeletePod(ns, name string) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := ns + "/" + name
	var ch Change
	if _, ok := m.pods[key]; !ok {
		return ch
	}
	delete(m.pods, key)
	for svcKey := range m.podRefs[key] {
		m.refreshKube(svcKey, &ch)
	}
	delete(m.podRefs, key)
	return ch
}

func (m *Model) refreshKube(svcKey string, ch *Change) {
	ks := m.kube[svcKey]
	if ks == nil {
		return
	}
	next := &kubeState{key: ks.key, created: ks.created, svc: ks.svc}
	m.computeKubeEndpoints(next)
	m.kube[svcKey] = next
	m.recomputeHost(ks.svc.Hostname, ch, "endpointslice")
}

func (m *Model) computeKubeEndpoints(ks *kubeState) {
	ks.endpoints = make(map[uint32][]Endpoint, len(ks.svc.Ports))
	var slices []*discoveryv1.EndpointSlice
	for _, st := range m.slicesBySvc[ks.key] {
		slices = append(slices, st.slice)
	}
	// Map order is random; sorting the endpoints below makes the result deterministic.
	for _, p := range ks.svc.Ports {
		var eps []Endpoint
		for _, s := range slices {
			var port uint32
			for _, sp := range s.Ports {
				name := ""
				if sp.Name != nil {
					name = *sp.Name
				}
				if name == p.Name && sp.Port != nil && *sp.Port > 0 && *sp.Port <= 65535 {
					port = uint32(*sp.Port)
				}
			}
			if port == 0 {
				continue
			}
			for _, e := range s.Endpoints {
				ready := e.Conditions.Ready == nil || *e.Conditions.Ready
				var labels map[string]string
				sa := ""
				if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
					if ps := m.pods[s.Namespace+"/"+e.TargetRef.Name]; ps != nil {
						labels, sa = ps.labels, ps.sa
					}
				}
				for _, a := range e.Addresses {
					ip, err := netip.ParseAddr(a)
					if err != nil {
						continue
					}
					eps = append(eps, Endpoint{Address: ip.String(), Port: port, Labels: labels,
						ServiceAccount: sa, Healthy: ready, Weight: 1})
				}
			}
		}
		sortEndpoints(eps)
		ks.endpoints[p.Number] = eps
	}
}

// kubeProtocol is istiod's kube.ConvertProtocol: appProtocol first, else the port name's
// prefix before the first "-" ("http-web" → HTTP, "grpc-web" → GRPC as in istiod); unknown or
// unnamed → TCP (istiod would sniff: see normalizeProtocol).
func kubeProtocol(p corev1.ServicePort) string {
	if p.AppProtocol != nil && *p.AppProtocol != "" {
		switch ap := strings.ToUpper(*p.AppProtocol); ap {
		case "KUBERNETES.IO/H2C":
			return "HTTP2"
		case "KUBERNETES.IO/WS", "KUBERNETES.IO/WSS":
			return "HTTP"
		default:
			return normalizeProtocol(ap)
		}
	}
	name, _, _ := strings.Cut(p.Name, "-")
	return normalizeProtocol(name)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
