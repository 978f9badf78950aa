package results

import "time"

// sample builds a valid finished summary with traffic, control-plane stats, events and checks.
func sample() *Summary {
	start := time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	end := start.Add(30 * time.Second)
	series := []Second{
		{T: 0, Requests: 100, ByCode: map[string]int64{"200": 100}, LatencyMs: Latency{P50: 1, P90: 2, P99: 3, Max: 4}},
		{T: 1, Requests: 100, Errors: 10, ByCode: map[string]int64{"200": 90, "503": 10}, ByFlag: map[string]int64{"NC": 10}, LatencyMs: Latency{P50: 1, P90: 2, P99: 5, Max: 9}},
		{T: 2, Requests: 100, Errors: 5, ByCode: map[string]int64{"200": 95, "503": 5}, ByFlag: map[string]int64{"NC": 5}, LatencyMs: Latency{P50: 1, P90: 2, P99: 3, Max: 4}},
		{T: 3, Requests: 100, ByCode: map[string]int64{"200": 100}, LatencyMs: Latency{P50: 1, P90: 2, P99: 3, Max: 4}},
	}
	return &Summary{
		Schema: SchemaVersion, Experiment: "cp-oom", Substrate: "local", ControlPlane: "reference",
		Params:         map[string]string{"rate": "100"},
		HarnessVersion: "v0.4.0-3-g248835d-dirty", HarnessCommit: "248835d732d4b01647831fd771466f9d133049c4",
		StartedAt: start, FinishedAt: &end,
		Phases: []Phase{{Name: "load", StartedAt: start, FinishedAt: &end}},
		Traffic: &Traffic{
			StartedAt: start.Add(time.Second), Rate: 100, Requests: 400, Errors: 15, ErrorRate: 15.0 / 400,
			ByCode: map[string]int64{"200": 385, "503": 15}, ByFlag: map[string]int64{"NC": 15},
			LatencyMs: Latency{P50: 1, P90: 2, P99: 4, Max: 9}, ErrorWindowSeconds: 2,
			ErrorWindow: &ErrorWindow{FirstSecond: 1, LastSecond: 2, LongestRunSeconds: 2, LongestRunStart: 1,
				RelativeTo: map[string]RelativeWindow{"chaos.injected": {StartAfterSeconds: 0.1, EndAfterSeconds: 1.9}}},
			Series: series,
		},
		ControlPlaneStats: &ControlPlaneStats{Restarts: 1, OOMKills: 1, Pushes: &Pushes{Full: 3, EDS: 10}, PeakHeapBytes: 100 << 20,
			MemoryLimit: 128 << 20,
			Memory:      []Sample{{At: start, Value: 50 << 20}, {At: start.Add(2 * time.Second), Value: 110 << 20}, {At: start.Add(3 * time.Second), Value: 10 << 20}},
			Profiles:    []Profile{{File: "pprof/001-heap-before-oom.pb.gz", Kind: "heap", Reason: "before-oom", At: start.Add(2 * time.Second), InUseBytes: 100 << 20, Top: []AllocSite{{Function: "main.grow", InUseBytes: 90 << 20, Flat: true}}}},
		},
		Events: []Event{
			{At: start.Add(2 * time.Second), Kind: "chaos.injected", Object: "cp", Detail: "memory hog"},
			{At: start.Add(3 * time.Second), Kind: "pod.oomkilled", Object: "ns/cp-0/discovery", Detail: "a | b"},
		},
		Checks: []Check{
			NewCheck("error rate", 3.75, LE, 0, "%"),
			NewCheck("control-plane OOM kills", 1, GE, 1, ""),
		},
		Verdict: VerdictFail,
	}
}
