package adsload

import (
	"fmt"
	"sort"
)

// MergeStats adds up the Stats of several processes that share one fleet (a fleet spread over
// pods, each with clients of its own): counts, bytes, resources and RSS are summed, the clients
// at each version counted over all, each push's receipts merged (its clients summed, its first
// receipt the earliest, its last the latest), and First is the lowest.
func MergeStats(parts ...Stats) Stats {
	out := Stats{Responses: map[string]int64{}, Bytes: map[string]int64{}, Resources: map[string]int64{},
		ClientsAtVersion: map[string]map[string]int{}}
	type key struct{ typ, version string }
	pushes := map[key]*Push{}
	for i, p := range parts {
		if i == 0 || p.First < out.First {
			out.First = p.First
		}
		out.Clients += p.Clients
		out.Connected += p.Connected
		out.Configured += p.Configured
		out.Streams += p.Streams
		out.ACKs += p.ACKs
		out.NACKs += p.NACKs
		out.Endpoints += p.Endpoints
		out.RSSBytes += p.RSSBytes
		addCounts(out.Responses, p.Responses)
		addCounts(out.Bytes, p.Bytes)
		addCounts(out.Resources, p.Resources)
		for typ, versions := range p.ClientsAtVersion {
			if out.ClientsAtVersion[typ] == nil {
				out.ClientsAtVersion[typ] = map[string]int{}
			}
			for v, n := range versions {
				out.ClientsAtVersion[typ][v] += n
			}
		}
		for _, ps := range p.Pushes {
			k := key{ps.Type, ps.Version}
			m := pushes[k]
			if m == nil {
				c := ps
				pushes[k] = &c
				continue
			}
			m.Clients += ps.Clients
			if ps.FirstAt.Before(m.FirstAt) {
				m.FirstAt = ps.FirstAt
			}
			if ps.LastAt.After(m.LastAt) {
				m.LastAt = ps.LastAt
			}
			m.ConvergenceMs = float64(m.LastAt.Sub(m.FirstAt).Microseconds()) / 1000
		}
	}
	for _, p := range pushes {
		out.Pushes = append(out.Pushes, *p)
	}
	sort.SliceStable(out.Pushes, func(i, j int) bool { return out.Pushes[i].FirstAt.Before(out.Pushes[j].FirstAt) })
	return out
}

func addCounts(to, from map[string]int64) {
	for k, v := range from {
		to[k] += v
	}
}

// MergeTracked joins the receipts of several processes that share one fleet, in the order given
// (each process's clients after the previous one's): every client's receipts, once. The
// processes must track the same clusters.
func MergeTracked(parts ...Tracked) (Tracked, error) {
	var out Tracked
	for i, p := range parts {
		if i > 0 && p.Track != out.Track {
			return Tracked{}, fmt.Errorf("adsload processes track different clusters: %q and %q", out.Track, p.Track)
		}
		out.Track = p.Track
		out.Clients = append(out.Clients, p.Clients...)
	}
	return out, nil
}
