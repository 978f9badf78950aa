package suite

import (
	"slices"
	"strings"

	"github.com/meshchaos/meshchaos/results"
)

// The built-in suites nightly, honesty and capacity (pre-upgrade lives with upgrade-check's
// suite in preupgrade.go). Each experiment's regression switches are the ones its both-ways test
// (experiments/*_test.go) catches.

// testScale is each experiment at the scale its both-ways cases run in the tests: minutes per
// run on a 2-core CI machine, large enough that every switch is caught (the tests prove it).
var testScale = map[string][]string{
	"cp-oom-restart":     {"rate=100", "duration=40s", "steady=8s", "throttleWindow=20s", "serviceEntries=3000"},
	"endpoint-flap":      {"rate=50", "duration=45s", "steady=5s", "flapFor=20s", "proxies=20", "serviceEntries=100"},
	"serviceentry-scale": {"steps=200,400,800", "convergeTimeout=60s", "maxBytesPerEndpoint=3072"},
	"sidecar-startup":    {"replicas=4", "serviceEntries=500", "nodes=1", "duration=5s", "steady=1s"},
	"cp-cpu-starvation":  {"duration=38s", "steady=5s", "window=15s", "baseline=5s", "recoveryWait=15s", "serviceEntries=100", "gateways=1"},
	// Four faults 100 s apart (a clean minute before each), the last the control plane's OOM
	// kill (under a kube-proxy throttle, as incident 1's), 55 s before the end: the minute
	// before the end holds its aftermath. The control plane at 100m CPU, as cp-oom-restart's,
	// so that an ungated restart takes seconds to load 3000 ServiceEntries. Its control plane's
	// heap trend is judged against what six minutes can resolve: four or five settled samples of
	// a control plane at 100m CPU fitted 7.4 ± 8.5 MiB/h (2026-11-26), too coarse for the hour's
	// 4 MiB/h, so the check was an error on the pass side; 32 MiB/h (3.3 MiB over the run) is a
	// leak a six-minute soak shows. The hour-long soak keeps its 4.
	"soak": {"duration=375s", "steady=20s", "faultEvery=100s", "faultFor=15s", "serviceEntries=3000", "cpCPULimit=100m", "maxCPHeapGrowth=32Mi"},
}

// TestScale is experiment's test scale (nil for an unknown experiment).
func TestScale(experiment string) []string { return slices.Clone(testScale[experiment]) }

// Case is one side of an experiment's both-ways proof: a control plane, the parameters that
// make the side (a mode, an incident's configuration, its mitigation), and what the run must
// give: pass, or fail on the checks that name the bug. Nightly cases are slower variants that
// `make test-nightly` runs; the others run in every `make test`.
type Case struct {
	Experiment   string
	ControlPlane string
	Variant      []string
	Expect       results.Expect
	Nightly      bool
	// Alone: its checks judge timings (convergence, availability under starvation) that
	// another run on the same machine would move, so it never runs beside one; the other cases
	// may run two at a time.
	Alone bool
}

// Name names the case: experiment, control plane and variant.
func (c Case) Name() string {
	n := c.Experiment + " " + c.ControlPlane
	if len(c.Variant) > 0 {
		n += " " + strings.Join(c.Variant, " ")
	}
	return n
}

// Entry is the case as a suite entry: at test scale, or at the experiment's defaults.
func (c Case) Entry(atTestScale bool) Entry {
	var set []string
	if atTestScale {
		set = TestScale(c.Experiment)
	}
	return Entry{Experiment: c.Experiment, ControlPlane: c.ControlPlane, Set: append(set, c.Variant...),
		Expect: c.Expect.Verdict, Failing: c.Expect.Failing}
}

func passes(x string, variant ...string) Case {
	return Case{Experiment: x, ControlPlane: "reference", Variant: variant, Expect: results.Expect{Verdict: results.VerdictPass}}
}

func fails(x, cp string, failing []string, variant ...string) Case {
	return Case{Experiment: x, ControlPlane: cp, Variant: variant, Expect: results.Expect{Verdict: results.VerdictFail, Failing: failing}}
}

func nightly(c Case) Case { c.Nightly = true; return c }

func alone(c Case) Case { c.Alone = true; return c }

// on is c against another control plane than the reference.
func on(cp string, c Case) Case { c.ControlPlane = cp; return c }

// The checks that name each incident's bug (see experiments/).
var (
	// Incident 3's configuration (a BestEffort control plane, one replica, beside the noisy
	// neighbour) and what it costs on the reference and on istiod alike: xDS on the starved node
	// (the webhooks, staleness and recovery vary from run to run and between the two).
	starvedConfig = []string{"cpQoS=besteffort", "cpReplicas=1", "isolate=false"}
	starvedNode   = []string{"xDS availability in the window, of the baseline's", "pod creations admitted by the injection webhook in the window, of the baseline's?",
		"invalid config accepted in the window (validation failed open)?", "config staleness P99?", "recovery after the window?"}
	// Incident 1: a restarted control plane that serves before it synced.
	unsyncedRestart = []string{"5xx rate", "error rate", "error window"}
	// The same, seen by proxyless gRPC clients: failed RPCs, and a channel without a usable
	// config.
	unsyncedGRPCRestart = []string{"gRPC failed RPCs", "gRPC time without a usable config"}
	// Incident 2: a full push per 0→1 of an endpoint.
	fullPushPerFlap = []string{"full pushes during the chaos"}
)

// bothWays is every experiment passing on the reference (or its mitigated configuration) and
// failing on each of its regression switches, incident configurations and modes, on the checks
// that name them. experiments' tests run every case and fail when a switch, an experiment or a
// mode has none.
var bothWays = []Case{
	passes("serviceentry-scale"),
	fails("serviceentry-scale", "reference:quadratic-scope", []string{"heap growth exponent", "heap bytes per endpoint"}),
	// The wrong port shows wherever endpoints change incrementally: in the WorkloadEntry
	// scenario's too.
	fails("serviceentry-scale", "reference:se-endpoint-port", []string{"endpoint-port oracle mismatches", "workload-entry oracle mismatches"}),
	fails("serviceentry-scale", "reference:we-stale-label", []string{"workload-entry oracle mismatches"}),

	passes("sidecar-startup", "mode=native"),
	// One run of every mode: the incident's (none) fails on its checks alone, hold, native and
	// resilient pass theirs.
	fails("sidecar-startup", "reference", []string{"app restarts [none]", "failed first calls [none]"}, "mode=all"),

	// Convergence P99 measured 0.10-0.18 s against its 1 s bound (0.17-0.18 s in two runs after
	// the reference stopped reacting to Pod readiness ahead of the EndpointSlice, as istiod
	// does not): a run beside it leaves room.
	passes("endpoint-flap"),
	fails("endpoint-flap", "reference:full-push-on-endpoint-reappear", fullPushPerFlap),
	nightly(passes("endpoint-flap", "flap=crash")),
	nightly(fails("endpoint-flap", "reference:full-push-on-endpoint-reappear", fullPushPerFlap, "flap=crash")),
	nightly(passes("endpoint-flap", "flap=evict")),
	nightly(fails("endpoint-flap", "reference:full-push-on-endpoint-reappear", fullPushPerFlap, "flap=evict")),

	passes("cp-oom-restart"),
	fails("cp-oom-restart", "reference:ungated", unsyncedRestart),
	// grpc-go as the data plane: proxyless clients (xds:/// with grpc-go's own resolver and
	// balancers) in place of the gateways, each reconnecting on grpc-go's own backoff (1 s,
	// 1.6 s, 2.6 s… after a failed attempt), which reaches an ungated restart's ~2 s of loading
	// 3000 ServiceEntries at 100m only now and then (failed RPCs in 1 of 3 runs, 2026-11-26);
	// 6000 make the window longer than grpc-go's retries.
	nightly(passes("cp-oom-restart", "dataPlane=grpc", "serviceEntries=6000")),
	nightly(fails("cp-oom-restart", "reference:ungated", unsyncedGRPCRestart, "dataPlane=grpc", "serviceEntries=6000")),
	// istio 1.7–1.8's gate, open before the initial events were applied: it serves a partial
	// config for the half second to second applying 3000 ServiceEntries takes at 100m CPU, to
	// the proxies that reconnect in it. Three gateways on Envoy's jittered backoff missed it
	// (3 of 3 runs passed); of twelve, 6, 8 and 1 landed in it (2026-11-26): nightly until the
	// margin of the last is known to hold.
	nightly(fails("cp-oom-restart", "reference:gate-before-events", unsyncedRestart, "gateways=12")),
	// The same fleet through the gated reference's restart: not one error.
	nightly(passes("cp-oom-restart", "gateways=12")),

	alone(passes("cp-cpu-starvation", "cpQoS=guaranteed", "cpReplicas=2", "isolate=true")),
	// Injection failed closed when the reference's readiness probe (1 s period, 1 failure) took
	// the starved pod out of its Service; with istiod's probe (3 s period, 3 failures) the pod
	// stays Ready through the window and its webhook answers within the apiserver's 10 s (100 %
	// admitted at P99 4.6 s and 5.9 s, 2026-11-26, on 22 mCPU), as istiod's does: xDS is what
	// the starved node reliably takes away. assertCPUStarvation holds the webhook to failing or
	// slowing down.
	alone(fails("cp-cpu-starvation", "reference", starvedNode, starvedConfig...)),

	// istiod, built from istio's source at each pin (make istiod): what the reference passes, so
	// does istiod (it has its own sync gate and incremental endpoint pushes). make test runs a
	// smoke run on each pin: incident 2 (gateways, traffic, incremental EDS through istiod) on
	// one, serviceentry-scale (istiod's xDS against the oracle, its heap) on the other, 38 s
	// where cp-oom-restart took 101-128 s; make test-nightly the rest, incident 1 on both pins.
	nightly(on("istiod@2026-08", passes("cp-oom-restart", "serviceEntries=1000"))),
	on("istiod@2026-04", passes("endpoint-flap")),
	nightly(on("istiod@2026-04", passes("cp-oom-restart", "serviceEntries=1000"))),
	nightly(on("istiod@2026-08", passes("cp-oom-restart", "dataPlane=grpc", "serviceEntries=1000"))),
	nightly(on("istiod@2026-08", passes("endpoint-flap"))),
	// istiod holds more per endpoint than the reference's 3072 B test budget: 3120-3260 B at
	// 8000 endpoints at both pins (2026-11-25), falling with scale; its exponent is 0.93
	// (3300 B and 0.97 at 2026-08 on 2026-11-26).
	on("istiod@2026-08", passes("serviceentry-scale", "maxBytesPerEndpoint=4096")),
	nightly(on("istiod@2026-04", passes("serviceentry-scale", "maxBytesPerEndpoint=4096"))),

	// istiod's real paths (its injector with the "meshchaos" template, its secure port, its
	// webhooks' failure policies): the start modes through istiod's own settings, and the
	// CPU-starved node both ways.
	nightly(fails("sidecar-startup", "istiod@2026-08", []string{"app restarts [none]", "failed first calls [none]"}, "mode=all")),
	nightly(alone(on("istiod@2026-08", passes("cp-cpu-starvation", "cpQoS=guaranteed", "cpReplicas=2", "isolate=true")))),
	// istiod's injection held up better than the reference's in the 2026-11-25 table (97 % at
	// 2026-08): its xDS on 15012 is what the starved node takes away.
	nightly(alone(fails("cp-cpu-starvation", "istiod@2026-08", starvedNode, starvedConfig...))),

	nightly(alone(passes("soak"))),
	// The ungated restart's errors fall in the minute before the end, which follows the OOM
	// kill under a kube-proxy throttle (incident 1's conditions). A heap trend fitted over
	// 375 s is too short to judge on the switch's side (4.7 MiB/h against 4 once): the pass
	// side holds it.
	nightly(alone(fails("soak", "reference:ungated", []string{"traffic errors in the minute before each fault and the end", "control-plane live heap growth?"}))),
}

// BothWays lists every experiment's both-ways cases.
func BothWays() []Case { return slices.Clone(bothWays) }

// experimentOrder is the catalog in the order the suites run it: quick ones first, so a broken
// machine shows early.
var experimentOrder = []string{"serviceentry-scale", "sidecar-startup", "endpoint-flap", "cp-oom-restart", "cp-cpu-starvation"}

// honestyEntries is every case of the reference control plane for the experiments in
// experimentOrder, at test scale or at the experiments' defaults.
func honestyEntries(atTestScale bool) []Entry {
	var es []Entry
	for _, x := range experimentOrder {
		for _, c := range bothWays {
			if c.Experiment == x && !c.Nightly && strings.HasPrefix(c.ControlPlane, "reference") {
				es = append(es, c.Entry(atTestScale))
			}
		}
	}
	return es
}

func init() {
	var night []Entry
	for _, x := range experimentOrder {
		for _, c := range bothWays {
			if c.Experiment == x && c.Expect.Verdict == results.VerdictPass && !c.Nightly && c.ControlPlane == "reference" { // the plain pass
				night = append(night, c.Entry(true))
				break
			}
		}
	}
	Register(Suite{Name: "nightly",
		Summary: "every experiment at a CI-sized scale against the reference control plane (mitigated configurations): each must pass",
		Entries: night})
	Register(Suite{Name: "honesty",
		Summary: "every experiment at its default scale on the reference (must pass) and on each regression switch or incident configuration (must fail): a harness that passes a known bug is broken",
		Entries: honestyEntries(false)})
	Register(Suite{Name: "capacity",
		Summary: "serviceentry-scale steps with a 1 GiB memory budget: the projected capacity verified by a step at that size, three times for the spread",
		Entries: []Entry{{Experiment: "serviceentry-scale", ControlPlane: "reference",
			Set: []string{"steps=500,1000,2500,5000", "memoryBudget=1Gi"}, Repeats: 3, Expect: results.VerdictPass}}})
}
