package xdsproxy

import (
	"encoding/json"
	"net/http"
	"sort"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	// Typed configs commonly found inside listeners, registered so /config_dump can render them.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// adminHandler serves Envoy's admin endpoints that the harness uses.
func (p *Proxy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if p.Ready() {
			w.Write([]byte("LIVE\n"))
			return
		}
		// Envoy answers 503 with its server state until initialization is done.
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("PRE_INITIALIZING\n"))
	})
	mux.HandleFunc("/config_dump", func(w http.ResponseWriter, r *http.Request) {
		b, err := p.ConfigDump()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("format") == "json" {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(p.Stats())
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		p.stats.writeText(w)
	})
	mux.HandleFunc("/stats/prometheus", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		p.stats.writePrometheus(w)
	})
	return mux
}

// Stats returns every counter and gauge by its Envoy-style name, and once ready
// server.initialization_time_ms: start → first configuration applied (Envoy's, a histogram
// there, one value here).
func (p *Proxy) Stats() map[string]int64 {
	v := p.stats.values()
	p.state.mu.Lock()
	if p.state.ready {
		v["server.initialization_time_ms"] = p.state.initMs
	}
	p.state.mu.Unlock()
	return v
}

// ConfigDump renders the current resources as Envoy's admin.v3.ConfigDump JSON: active and
// warming clusters and listeners, route configs, endpoint assignments, and the last rejection
// per type as error_state.
func (p *Proxy) ConfigDump() ([]byte, error) {
	s := p.state
	s.mu.Lock()
	cd := &adminv3.ClustersConfigDump{VersionInfo: s.versions[resourcev3.ClusterType]}
	ld := &adminv3.ListenersConfigDump{VersionInfo: s.versions[resourcev3.ListenerType]}
	rd := &adminv3.RoutesConfigDump{}
	ed := &adminv3.EndpointsConfigDump{}
	var err error
	pack := func(m proto.Message) *anypb.Any {
		a, e := anypb.New(m)
		if e != nil && err == nil {
			err = e
		}
		return a
	}
	for _, n := range sortedNames(s.clusters) {
		slot := s.clusters[n]
		if c := slot.active; c != nil {
			cd.DynamicActiveClusters = append(cd.DynamicActiveClusters, &adminv3.ClustersConfigDump_DynamicCluster{VersionInfo: c.version, Cluster: pack(c.raw), LastUpdated: timestamppb.New(c.updated)})
		}
		if c := slot.warming; c != nil {
			cd.DynamicWarmingClusters = append(cd.DynamicWarmingClusters, &adminv3.ClustersConfigDump_DynamicCluster{VersionInfo: c.version, Cluster: pack(c.raw), LastUpdated: timestamppb.New(c.updated)})
		}
	}
	for _, n := range sortedNames(s.listeners) {
		slot := s.listeners[n]
		dl := &adminv3.ListenersConfigDump_DynamicListener{Name: n}
		if l := slot.active; l != nil {
			dl.ActiveState = &adminv3.ListenersConfigDump_DynamicListenerState{VersionInfo: l.version, Listener: pack(l.raw), LastUpdated: timestamppb.New(l.updated)}
		}
		if l := slot.warming; l != nil {
			dl.WarmingState = &adminv3.ListenersConfigDump_DynamicListenerState{VersionInfo: l.version, Listener: pack(l.raw), LastUpdated: timestamppb.New(l.updated)}
		}
		ld.DynamicListeners = append(ld.DynamicListeners, dl)
	}
	for _, n := range sortedNames(s.routes) {
		r := s.routes[n]
		rd.DynamicRouteConfigs = append(rd.DynamicRouteConfigs, &adminv3.RoutesConfigDump_DynamicRouteConfig{VersionInfo: r.version, RouteConfig: pack(r.raw), LastUpdated: timestamppb.New(r.updated)})
	}
	for _, n := range sortedNames(s.clas) {
		c := s.clas[n]
		ed.DynamicEndpointConfigs = append(ed.DynamicEndpointConfigs, &adminv3.EndpointsConfigDump_DynamicEndpointConfig{VersionInfo: c.version, EndpointConfig: pack(c.raw), LastUpdated: timestamppb.New(c.updated)})
	}
	// Envoy reports rejected updates per resource; xdsproxy keeps the last rejection per type and
	// shows it on a pseudo-entry so /config_dump tells why an update did not take.
	if msg := s.lastErr[resourcev3.ClusterType]; msg != "" {
		cd.DynamicWarmingClusters = append(cd.DynamicWarmingClusters, &adminv3.ClustersConfigDump_DynamicCluster{ErrorState: &adminv3.UpdateFailureState{Details: msg}})
	}
	if msg := s.lastErr[resourcev3.ListenerType]; msg != "" {
		ld.DynamicListeners = append(ld.DynamicListeners, &adminv3.ListenersConfigDump_DynamicListener{ErrorState: &adminv3.UpdateFailureState{Details: msg}})
	}
	if msg := s.lastErr[resourcev3.RouteType]; msg != "" {
		rd.DynamicRouteConfigs = append(rd.DynamicRouteConfigs, &adminv3.RoutesConfigDump_DynamicRouteConfig{ErrorState: &adminv3.UpdateFailureState{Details: msg}})
	}
	if msg := s.lastErr[resourcev3.EndpointType]; msg != "" {
		ed.DynamicEndpointConfigs = append(ed.DynamicEndpointConfigs, &adminv3.EndpointsConfigDump_DynamicEndpointConfig{ErrorState: &adminv3.UpdateFailureState{Details: msg}})
	}
	s.mu.Unlock()
	dump := &adminv3.ConfigDump{Configs: []*anypb.Any{pack(cd), pack(ld), pack(rd), pack(ed)}}
	if err != nil {
		return nil, err
	}
	return protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}.Marshal(dump)
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
