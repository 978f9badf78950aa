// Package regress names the reference control plane's regression switches. Each switch re-creates,
// on purpose, a historical control-plane bug (DESIGN.md, "The incidents") so that every experiment
// can be shown to fail against it and pass against the plain build.
package regress

import (
	"fmt"
	"slices"
	"strings"
)

// Switch is one regression switch, passed as `--regress NAME`.
type Switch string

const (
	// Ungated turns the sync gate off: xDS streams are served before the informers have synced,
	// so a proxy that reconnects to a restarted control plane gets an incomplete CDS/LDS and
	// answers 503 NR/NC (incident 1; the historical behaviour before istio PR 25733).
	Ungated Switch = "ungated"
	// GateBeforeEvents opens the sync gate when the informers have synced but before the events
	// they delivered are applied to the model: a restarted control plane serves a partly built
	// config for as long as applying its initial state takes (istio 1.7–1.8: the gate of PR
	// 25733 waited on HasSynced, before the handlers' queue drained; fixed in 1.9).
	GateBeforeEvents Switch = "gate-before-events"
	// FullPushOnEndpointReappear keeps, per service, the set of service accounts of its ready
	// endpoints (empty ones ignored), drops it when no endpoint is ready (an incremental push)
	// and forces a full push when an update brings a different set: every 0→N of a workload
	// with a service account, e.g. a single-replica Deployment whose pod flaps Ready (incident 2,
	// "Full push, service accounts changed"): istio 1.12.3–1.13.9, 1.14.2–1.14.6 and 1.15.0, as
	// istio's history shows (docs/experiments/endpoint-flap.md#affected-istio-versions).
	FullPushOnEndpointReappear Switch = "full-push-on-endpoint-reappear"
	// QuadraticScope builds, on every full push, one scope per service that lists every service
	// and depends on every service's 80-byte config key, as Istio 1.6's per-service default
	// SidecarScopes: O(n²) memory (incident 4: 5000 ServiceEntries × 10 endpoints → ~12 GB).
	QuadraticScope Switch = "quadratic-scope"
	// SEEndpointPort writes the ServiceEntry port instead of each endpoint's own port on every
	// incremental update of a STATIC ServiceEntry (endpoint added, changed or removed;
	// WorkloadEntry event), until a full push rebuilds the endpoints (Istio 1.6, istio #25309).
	SEEndpointPort Switch = "se-endpoint-port"
	// WEStaleLabel keeps a WorkloadEntry relabelled away from a ServiceEntry's workloadSelector
	// associated with it, through its own deletion, until a ServiceEntry change that needs a
	// full push (any ServiceEntry) rebuilds the index (Istio 1.6, istio #25678).
	WEStaleLabel Switch = "we-stale-label"
)

// All lists every switch, in documentation order.
var All = []Switch{Ungated, GateBeforeEvents, FullPushOnEndpointReappear, QuadraticScope, SEEndpointPort, WEStaleLabel}

// Set is a set of enabled switches; the zero value is the plain (correct) build.
type Set map[Switch]bool

// Parse turns switch names into a Set; an unknown name is an error that lists the known ones.
func Parse(names []string) (Set, error) {
	s := Set{}
	for _, n := range names {
		for _, part := range strings.Split(n, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if !slices.Contains(All, Switch(part)) {
				return nil, fmt.Errorf("unknown regression switch %q (known: %s)", part, strings.Join(Names(), ", "))
			}
			s[Switch(part)] = true
		}
	}
	return s, nil
}

// On reports whether sw is enabled; safe on a nil Set.
func (s Set) On(sw Switch) bool { return s[sw] }

// String lists the enabled switches, sorted, comma-separated ("" for the plain build).
func (s Set) String() string {
	var out []string
	for _, sw := range All {
		if s[sw] {
			out = append(out, string(sw))
		}
	}
	return strings.Join(out, ",")
}

// Names lists every switch name.
func Names() []string {
	out := make([]string, len(All))
	for i, sw := range All {
		out[i] = string(sw)
	}
	return out
}
