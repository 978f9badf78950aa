package xdsproxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/metrics"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// stats are the proxy's counters and gauges, named like Envoy's where one exists so the same
// scrapers read both.
type stats struct {
	requests       atomic.Int64 // http.downstream_rq_total
	cxTotal        atomic.Int64 // http.downstream_cx_total
	cxActive       atomic.Int64 // http.downstream_cx_active
	byClass        [6]atomic.Int64
	flagsMu        sync.Mutex
	flags          map[string]*atomic.Int64
	upstreamCxFail atomic.Int64

	connected        atomic.Int64 // control_plane.connected_state
	streams          atomic.Int64 // streams opened
	activeClusters   atomic.Int64
	warmingClusters  atomic.Int64
	activeListeners  atomic.Int64
	warmingListeners atomic.Int64

	xdsMu sync.Mutex
	xds   map[string]*xdsCounters

	// unsupported counts, by feature, the resources accepted with a part xdsproxy cannot
	// honour (an upstream TLS transport socket: it speaks plaintext), as Envoy would accept
	// them; xdsproxy.unsupported.<feature> in /stats.
	unsupportedMu sync.Mutex
	unsupported   map[string]int64
}

type xdsCounters struct {
	attempt, success, rejected int64
}

func newStats() *stats {
	return &stats{flags: map[string]*atomic.Int64{}, xds: map[string]*xdsCounters{}, unsupported: map[string]int64{}}
}

func (s *stats) flag(f string) {
	s.flagsMu.Lock()
	c := s.flags[f]
	if c == nil {
		c = &atomic.Int64{}
		s.flags[f] = c
	}
	s.flagsMu.Unlock()
	c.Add(1)
}

// downstreamConn counts listener connections (an http.Server ConnState hook).
func (s *stats) downstreamConn(_ net.Conn, st http.ConnState) {
	if st == http.StateNew {
		s.cxTotal.Add(1)
	}
	s.cxActive.Add(connDelta(st))
}

// connDelta is how a connection state change moves the count of open connections.
func connDelta(st http.ConnState) int64 {
	switch st {
	case http.StateNew:
		return 1
	case http.StateClosed, http.StateHijacked:
		return -1
	}
	return 0
}

// notHonoured counts one resource with feature xdsproxy cannot honour; it reports whether this
// is the first time (to log it once).
func (s *stats) notHonoured(feature string) bool {
	s.unsupportedMu.Lock()
	defer s.unsupportedMu.Unlock()
	s.unsupported[feature]++
	return s.unsupported[feature] == 1
}

func (s *stats) response(code int) {
	if c := code / 100; c >= 1 && c <= 5 {
		s.byClass[c].Add(1)
	}
}

func (s *stats) xdsUpdate(typeURL string, err error) {
	s.xdsMu.Lock()
	defer s.xdsMu.Unlock()
	c := s.xds[typeURL]
	if c == nil {
		c = &xdsCounters{}
		s.xds[typeURL] = c
	}
	c.attempt++
	if err != nil {
		c.rejected++
	} else {
		c.success++
	}
}

// xdsStatPrefix maps a type to Envoy's stat scope.
var xdsStatPrefix = map[string]string{
	resourcev3.ClusterType:  "cluster_manager.cds",
	resourcev3.ListenerType: "listener_manager.lds",
	resourcev3.EndpointType: "cluster_manager.eds",
	resourcev3.RouteType:    "http.rds",
}

// values returns every stat by name.
func (s *stats) values() map[string]int64 {
	v := map[string]int64{
		"http.downstream_rq_total":                 s.requests.Load(),
		"http.downstream_cx_total":                 s.cxTotal.Load(),
		"http.downstream_cx_active":                s.cxActive.Load(),
		"cluster_manager.upstream_cx_connect_fail": s.upstreamCxFail.Load(),
		"control_plane.connected_state":            s.connected.Load(),
		"control_plane.streams_total":              s.streams.Load(),
		"cluster_manager.active_clusters":          s.activeClusters.Load(),
		"cluster_manager.warming_clusters":         s.warmingClusters.Load(),
		"listener_manager.total_listeners_active":  s.activeListeners.Load(),
		"listener_manager.total_listeners_warming": s.warmingListeners.Load(),
	}
	// Envoy's server.memory_* gauges, from the Go runtime.
	mem := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"}}
	metrics.Read(mem)
	v["server.memory_allocated"] = int64(mem[0].Value.Uint64())
	v["server.memory_heap_size"] = int64(mem[1].Value.Uint64())
	for c := 1; c <= 5; c++ {
		v[fmt.Sprintf("http.downstream_rq_%dxx", c)] = s.byClass[c].Load()
	}
	s.flagsMu.Lock()
	for f, c := range s.flags {
		v["http.response_flags."+f] = c.Load()
	}
	s.flagsMu.Unlock()
	s.unsupportedMu.Lock()
	for f, n := range s.unsupported {
		v["xdsproxy.unsupported."+f] = n
	}
	s.unsupportedMu.Unlock()
	s.xdsMu.Lock()
	for t, c := range s.xds {
		p := xdsStatPrefix[t]
		v[p+".update_attempt"] = c.attempt
		v[p+".update_success"] = c.success
		v[p+".update_rejected"] = c.rejected
	}
	s.xdsMu.Unlock()
	return v
}

// writeText writes "name: value" lines sorted by name, Envoy's /stats format.
func (s *stats) writeText(w io.Writer) {
	v := s.values()
	names := make([]string, 0, len(v))
	for n := range v {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "%s: %d\n", n, v[n])
	}
}

// writePrometheus writes the stats in Prometheus text format, names prefixed "xdsproxy_".
func (s *stats) writePrometheus(w io.Writer) {
	v := s.values()
	names := make([]string, 0, len(v))
	for n := range v {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "xdsproxy_%s %d\n", strings.NewReplacer(".", "_", "-", "_").Replace(n), v[n])
	}
}
