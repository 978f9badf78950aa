package oracle

import (
	"net"
	"sort"
	"strconv"
	"strings"
)

// Want is the expected config: cluster name → endpoints ("IP:port"), and which other clusters
// are in the oracle's scope (a cluster in scope that Want does not list must not exist).
type Want struct {
	Clusters map[string][]string
	// InScope says whether a cluster the client holds belongs to the generated config; nil: only
	// the listed clusters are compared.
	InScope func(cluster string) bool
}

// IstioCluster is the outbound cluster name Istio (and the reference control plane) give a
// host's service port: "outbound|<port>||<host>".
func IstioCluster(host string, port uint32) string {
	return "outbound|" + strconv.FormatUint(uint64(port), 10) + "||" + host
}

// HostOf is the host of an Istio outbound cluster name ("" for other names).
func HostOf(cluster string) string {
	parts := strings.Split(cluster, "|")
	if len(parts) != 4 || parts[0] != "outbound" {
		return ""
	}
	return parts[3]
}

// FromHosts builds a Want from host → endpoints for one service port, with the listed hosts'
// domain (their clusters) in scope.
func FromHosts(hosts map[string][]string, port uint32, inScope func(host string) bool) Want {
	w := Want{Clusters: make(map[string][]string, len(hosts))}
	for h, eps := range hosts {
		w.Clusters[IstioCluster(h, port)] = eps
	}
	if inScope != nil {
		w.InScope = func(cluster string) bool { h := HostOf(cluster); return h != "" && inScope(h) }
	}
	return w
}

// Mismatch is one difference: a missing or unexpected cluster, a missing, unexpected or wrong
// endpoint. Want or Got is "absent" for what is missing on that side.
type Mismatch struct {
	Cluster string
	Want    string
	Got     string
}

// Absent stands for the missing side of a mismatch.
const Absent = "absent"

// Compare lists every difference between want and the state, sorted by cluster. An endpoint
// whose address is right but whose port is wrong is one mismatch (want and got side by side).
func Compare(want Want, st State) []Mismatch {
	var out []Mismatch
	for cluster, weps := range want.Clusters {
		if !st.Clusters[cluster] {
			out = append(out, Mismatch{Cluster: cluster, Want: "cluster", Got: Absent})
			continue
		}
		geps, ok := st.Endpoints[cluster]
		if !ok {
			out = append(out, Mismatch{Cluster: cluster, Want: "endpoints", Got: "no endpoints received"})
			continue
		}
		out = append(out, compareEndpoints(cluster, weps, geps)...)
	}
	if want.InScope != nil {
		for cluster := range st.Clusters {
			if _, ok := want.Clusters[cluster]; !ok && want.InScope(cluster) {
				out = append(out, Mismatch{Cluster: cluster, Want: Absent, Got: "cluster"})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Cluster != out[j].Cluster {
			return out[i].Cluster < out[j].Cluster
		}
		return out[i].Want+out[i].Got < out[j].Want+out[j].Got
	})
	return out
}

// compareEndpoints matches endpoints as multisets; leftovers on both sides with the same
// address pair up as a wrong port.
func compareEndpoints(cluster string, want, got []string) []Mismatch {
	left := map[string]int{}
	for _, g := range got {
		left[g]++
	}
	var missing []string
	for _, w := range want {
		if left[w] > 0 {
			left[w]--
			continue
		}
		missing = append(missing, w)
	}
	extraByIP := map[string][]string{}
	var extras []string
	for g, n := range left {
		for ; n > 0; n-- {
			extras = append(extras, g)
		}
	}
	sort.Strings(extras)
	for _, g := range extras {
		extraByIP[ip(g)] = append(extraByIP[ip(g)], g)
	}
	var out []Mismatch
	for _, w := range missing {
		if gs := extraByIP[ip(w)]; len(gs) > 0 {
			out = append(out, Mismatch{Cluster: cluster, Want: w, Got: gs[0]})
			extraByIP[ip(w)] = gs[1:]
			continue
		}
		out = append(out, Mismatch{Cluster: cluster, Want: w, Got: Absent})
	}
	for _, gs := range extraByIP {
		for _, g := range gs {
			out = append(out, Mismatch{Cluster: cluster, Want: Absent, Got: g})
		}
	}
	return out
}

func ip(hostport string) string {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	return h
}
