package experiments

import (
	"fmt"

	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/results"
)

// cpMetricFamilies are the reference control plane's metrics an experiment keeps: pushes, the
// sync gate, refused streams, connected proxies and heap.
var cpMetricFamilies = map[string]bool{
	"meshchaos_controlplane_pushes_total":              true,
	"meshchaos_controlplane_xds_streams_refused_total": true,
	"meshchaos_controlplane_sync_gate_open":            true,
	"meshchaos_controlplane_time_to_ready_seconds":     true,
	"pilot_xds":                    true,
	"go_memstats_heap_inuse_bytes": true,
}

func keepCPMetric(name string) bool { return cpMetricFamilies[name] }

// counterIncrease is how much a counter grew over its samples. A drop means the process
// restarted and the counter began again from zero, so the new value is all increase.
func counterIncrease(samples []results.Sample) float64 {
	var total float64
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1].Value, samples[i].Value
		if cur >= prev {
			total += cur - prev
		} else {
			total += cur
		}
	}
	return total
}

// recordCPCounters fills the pushes by kind from the scraped counters and puts the refused
// xDS streams (the sync gate at work) on the timeline.
func recordCPCounters(r *runner.Run) {
	s := r.Summary()
	if s.ControlPlaneStats == nil {
		return
	}
	var full, eds, refused float64
	ready := -1.0
	for _, m := range s.ControlPlaneStats.Metrics {
		switch {
		case m.Name == "meshchaos_controlplane_time_to_ready_seconds" && len(m.Samples) > 0:
			ready = m.Samples[len(m.Samples)-1].Value
		case m.Name == "meshchaos_controlplane_pushes_total" && m.Labels["kind"] == "full":
			full += counterIncrease(m.Samples)
		case m.Name == "meshchaos_controlplane_pushes_total" && m.Labels["kind"] == "eds":
			eds += counterIncrease(m.Samples)
		case m.Name == "meshchaos_controlplane_xds_streams_refused_total":
			refused += counterIncrease(m.Samples)
		}
	}
	r.ControlPlane(func(cp *results.ControlPlaneStats) {
		cp.Pushes = results.Pushes{Full: int64(full), EDS: int64(eds)}
	})
	r.Event("cp.streams-refused", "meshchaos-controlplane", fmt.Sprintf("%.0f xDS streams refused while the sync gate was closed", refused))
	if ready >= 0 {
		r.Event("cp.time-to-ready", "meshchaos-controlplane", fmt.Sprintf("%.2f s from the last start of the process to its sync gate opening (its own metric)", ready))
	}
}
