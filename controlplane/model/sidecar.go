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

// Sidecar is a namespace-wide Istio Sidecar (networking.istio.io/v1, no workloadSelector): the
// hosts the proxies of its namespace see. Sidecars are immutable; the model replaces them.
type Sidecar struct {
	Namespace, Name string
	Created         time.Time
	// Hosts are the egress hosts of every egress listener, "ns/dnsName" as istiod reads them:
	// ns is a namespace, "*" (any), "." (the proxy's own namespace) or "~" (none); dnsName is a
	// host, "*" or "*.suffix". No egress listener means "*/*".
	Hosts []string
}

// ConvertSidecar turns a Sidecar into the model's form. A Sidecar with a workloadSelector is
// refused (the reference control plane scopes by namespace only: it does not know proxies'
// labels), as is an egress host without "ns/".
func ConvertSidecar(ns, name string, created time.Time, spec *apinet.Sidecar) (*Sidecar, *Skip) {
	obj := "Sidecar/" + ns + "/" + name
	if len(spec.GetWorkloadSelector().GetLabels()) > 0 {
		return nil, &Skip{Object: obj, What: "sidecar", Reason: "workloadSelector not supported"}
	}
	sc := &Sidecar{Namespace: ns, Name: name, Created: created}
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

// SetSidecar adds or updates a namespace-wide Sidecar (sc nil: it was refused; treated as
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

// SidecarFor returns the Sidecar that scopes proxies of namespace ns: the oldest Sidecar of ns
// (then by name), else the oldest of the root namespace, else nil (every host is visible).
func (m *Model) SidecarFor(ns string) *Sidecar {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if sc := oldest(m.sidecars[ns]); sc != nil {
		return sc
	}
	return oldest(m.sidecars[m.opts.RootNamespace])
}

func oldest(scs map[string]*Sidecar) *Sidecar {
	all := make([]*Sidecar, 0, len(scs))
	for _, sc := range scs {
		all = append(all, sc)
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
