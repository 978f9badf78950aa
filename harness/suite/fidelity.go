package suite

import "github.com/meshchaos/meshchaos/results"

// Fidelity is the built-in suite `meshchaos fidelity` runs on the reference and on istiod: each
// experiment whose figures the fidelity table holds, at its test scale, three runs a side.
//
//   - cp-oom-restart: push time, the time from the kill to ready, the error window;
//   - endpoint-flap: convergence at the proxies, full and EDS pushes per flap;
//   - cp-cpu-starvation in the incident's configuration: xDS availability on a starved node
//     (both fail; how far is the figure);
//   - serviceentry-scale: bytes per endpoint (istiod holds more than the reference's 3072 B
//     test budget, so the bound is 4096 here: the figure matters, not the check).
const Fidelity = "fidelity"

func init() {
	Register(Suite{
		Name:    Fidelity,
		Summary: "the reference against istiod (meshchaos fidelity): incidents 1-3 and serviceentry-scale at test scale, each on both, for the ratio table",
		Entries: []Entry{
			{Experiment: "cp-oom-restart", Repeats: 3, Set: TestScale("cp-oom-restart")},
			{Experiment: "endpoint-flap", Repeats: 3, Set: TestScale("endpoint-flap")},
			{Experiment: "cp-cpu-starvation", Repeats: 3, Set: append(TestScale("cp-cpu-starvation"), starvedConfig...),
				Expect: results.VerdictFail, Failing: starvedNode},
			{Experiment: "serviceentry-scale", Repeats: 3, Set: append(TestScale("serviceentry-scale"), "maxBytesPerEndpoint=4096")},
		},
	})
}
