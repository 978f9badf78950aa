package model

import (
	"fmt"
	"sort"
	"strings"
	"time"

	apinet "istio.io/api/networking/v1"
)

// DefaultRootNamespace is istiod's default root namespace: a Sidecar there (without a
// workloadSelector) is the default of every namespace that has none of its own.
const DefaultRootNamespace = "istio-system"

// Sidecar is an Istio Sidecar (networking.istio.io/v1): the hosts the proxies of its namespace
// see — all of them, or, with a workloadSelector, those whose labels it selects. Sidecars are
// immutable; the model replaces them.
type Sidecar struct {
	Namespace, Name string
	Created         time.Time
	// Selector is the workloadSelector's labels (nil: namespace-wide).
	Selector map[string]string
	// Hosts are the egress hosts of every egress listener, "ns/dnsName" as istiod reads them:
	// ns is a namespace, "*" (any), "." (the proxy's own namespace) or "~" (none); dnsName is a
	// host, "*" or "*.suffix". No egress listener means "*/*".
	Hosts []string
}

// ConvertSidecar turns a Sidecar into the model's form. An egress host without "ns/" is refused.
func ConvertSidecar(ns, name string, created time.Time, spec *apinet.Sidecar) (*Sidecar, *Skip) {
	obj := "Sidecar/" + ns + "/" + name
	sc := &Sidecar{Namespace: ns, Name: name, Created: created}
	if sel := spec.GetWorkloadSelector().GetLabels(); len(sel) > 0 {
		sc.Selector = make(map[string]string, len(sel))
		for k, v := range sel {
			sc.Selector[k] = v
		}
	}
	for _, l := range spec.GetEgress() {
		for _, h := range l.GetHosts() {
			hns, host, ok := strings.Cut(h, "/")
			if !ok || hns == "" || host == "" {
				return nil, &Skip{Object: obj, What: fmt.Sprintf("egress host %q", truncate(h)), Reason: "not ns/host"}
			}
			sc.Hosts = append(sc.Hosts, h)
		}
	}
	if len(spec.GetEgress()) == 0 {
		sc.Hosts = []string{"*/*"}
	}
	return sc, nil
}

// Visible reports whether a proxy in namespace proxyNS under this Sidecar sees s (istiod's
// egress host matching; "." is the proxy's namespace, which for a namespace's own Sidecar is
// the Sidecar's). A nil Sidecar sees everything (istiod's default scope).
func (sc *Sidecar) Visible(s *Service, proxyNS string) bool {
	if sc == nil {
		return true
	}
	for _, h := range sc.Hosts {
		hns, host, _ := strings.Cut(h, "/")
		switch hns {
		case "~":
			continue
		case "*":
		case ".":
			if s.Namespace != proxyNS {
				continue
			}
		default:
			if s.Namespace != hns {
				continue
			}
		}
		if hostMatches(host, s.Hostname) {
			return true
		}
	}
	return false
}

func hostMatches(pattern, host string) bool {
	if pattern == "*" {
		return true
	}
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return strings.HasSuffix(host, suffix)
	}
	return pattern == host
}

// Selects reports whether the Sidecar's workloadSelector selects a proxy with labels (false for
// a namespace-wide Sidecar).
func (sc *Sidecar) Selects(labels map[string]string) bool {
	if len(sc.Selector) == 0 {
		return false
	}
	for k, v := range sc.Selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// SetSidecar adds or updates a Sidecar (sc nil: it was refused; treated as
// deleted). Any Sidecar change is a full push; only the scopes it changes are resent.
func (m *Model) SetSidecar(ns, name string, sc *Sidecar) Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sidecars[ns] == nil {
		m.sidecars[ns] = map[string]*Sidecar{}
	}
	if sc == nil {
		delete(m.sidecars[ns], name)
	} else {
		m.sidecars[ns][name] = sc
	}
	var ch Change
	ch.fullConfig("Sidecar/"+ns, "sidecar")
	return ch
}

// DeleteSidecar removes a Sidecar.
func (m *Model) DeleteSidecar(ns, name string) Change { return m.SetSidecar(ns, name, nil) }

// SidecarFor returns the Sidecar that scopes proxies of namespace ns that no workloadSelector
// selects: the oldest namespace-wide Sidecar of ns (then by name), else the oldest namespace-wide
// one of the root namespace, else nil (every host is visible).
func (m *Model) SidecarFor(ns string) *Sidecar { return m.SidecarForProxy(ns, nil) }

// SidecarForProxy returns the Sidecar that scopes a proxy of namespace ns with labels, as
// istiod's getSidecarScope: the oldest Sidecar of ns whose workloadSelector selects the labels,
// else SidecarFor(ns). A root-namespace Sidecar with a selector selects only in the root
// namespace.
func (m *Model) SidecarForProxy(ns string, labels map[string]string) *Sidecar {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(labels) > 0 {
		if sc := oldest(m.sidecars[ns], func(sc *Sidecar) bool { return sc.Selects(labels) }); sc != nil {
			return sc
		}
	}
	wide := func(sc *Sidecar) bool { return len(sc.Selector) == 0 }
	if sc := oldest(m.sidecars[ns], wide); sc != nil {
		return sc
	}
	return oldest(m.sidecars[m.opts.RootNamespace], wide)
}

// Sidecar returns the Sidecar ns/name (nil when absent).
func (m *Model) Sidecar(ns, name string) *Sidecar {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.sidecars[ns][name]
}

// hasSelectorSidecar reports whether ns has a Sidecar with a workloadSelector (m.mu held).
func (m *Model) hasSelectorSidecar(ns string) bool {
	for _, sc := range m.sidecars[ns] {
		if len(sc.Selector) > 0 {
			return true
		}
	}
	return false
}

// PodLabels returns the labels of Pod ns/name, and whether the Pod is known.
func (m *Model) PodLabels(ns, name string) (map[string]string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p := m.pods[ns+"/"+name]
	if p == nil {
		return nil, false
	}
	return p.labels, true
}

// oldest returns the oldest (then by name) of scs that keep accepts.
func oldest(scs map[string]*Sidecar, keep func(*Sidecar) bool) *Sidecar {
	all := make([]*Sidecar, 0, len(scs))
	for _, sc := range scs {
		if keep(sc) {
			all = append(all, sc)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].Created.Equal(all[j].Created) {
			return all[i].Created.Before(all[j].Created)
		}
		return all[i].Name < all[j].Name
	})
	if len(all) == 0 {
		return nil
	}
	return all[0]
}
