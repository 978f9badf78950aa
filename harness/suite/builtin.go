package suite

import "github.com/meshchaos/meshchaos/results"

// The built-in suites nightly, honesty and capacity (pre-upgrade lives with upgrade-check's
// suite in preupgrade.go). Each experiment's regression switches are the ones its both-ways test
// (experiments/*_test.go) catches.

// ciScale is each experiment at the scale its both-ways test runs: minutes per run on a 2-core
// CI machine, large enough that every switch is caught (the tests prove it).
var ciScale = map[string][]string{
	"cp-oom-restart":     {"rate=100", "duration=40s", "steady=8s", "throttleWindow=20s", "serviceEntries=3000"},
	"endpoint-flap":      {"rate=50", "duration=45s", "steady=5s", "flapFor=20s", "proxies=20", "serviceEntries=100"},
	"serviceentry-scale": {"steps=200,400,800", "convergeTimeout=60s", "maxBytesPerEndpoint=3072"},
	"sidecar-startup":    {"replicas=4", "serviceEntries=500", "nodes=1", "duration=5s", "steady=1s"},
	"cp-cpu-starvation":  {"duration=35s", "steady=5s", "window=15s", "baseline=2s", "recoveryWait=15s", "serviceEntries=100", "gateways=1"},
}

// mitigated are the parameters under which an experiment whose incident is a configuration,
// not a control-plane bug, must pass: a native sidecar; a Guaranteed control plane with two
// replicas on a node of its own.
var mitigated = map[string][]string{
	"sidecar-startup":   {"mode=native"},
	"cp-cpu-starvation": {"cpQoS=guaranteed", "cpReplicas=2", "isolate=true"},
}

// incident are the parameters that re-create a configuration incident (it must fail).
var incident = map[string][]string{
	"sidecar-startup":   {"mode=none"},
	"cp-cpu-starvation": {"cpQoS=besteffort", "cpReplicas=1", "isolate=false"},
}

// switches are each experiment's reference control-plane regression switches.
var switches = map[string][]string{
	"cp-oom-restart":     {"ungated"},
	"endpoint-flap":      {"full-push-on-endpoint-reappear"},
	"serviceentry-scale": {"quadratic-scope", "se-endpoint-port", "we-stale-label"},
}

// experimentOrder is the catalog in the order the suites run it: quick ones first, so a broken
// machine shows early.
var experimentOrder = []string{"serviceentry-scale", "sidecar-startup", "endpoint-flap", "cp-oom-restart", "cp-cpu-starvation"}

func with(base []string, more ...[]string) []string {
	out := append([]string{}, base...)
	for _, m := range more {
		out = append(out, m...)
	}
	return out
}

// honestyEntries is every experiment passing on the reference (or its mitigation) and failing
// on each of its switches (or its incident's configuration), at scale (nil: the defaults).
func honestyEntries(scale map[string][]string) []Entry {
	var es []Entry
	for _, x := range experimentOrder {
		es = append(es, Entry{Experiment: x, ControlPlane: "reference", Set: with(scale[x], mitigated[x]), Expect: results.VerdictPass})
		for _, sw := range switches[x] {
			es = append(es, Entry{Experiment: x, ControlPlane: "reference:" + sw, Set: with(scale[x]), Expect: results.VerdictFail})
		}
		if inc, ok := incident[x]; ok {
			es = append(es, Entry{Experiment: x, ControlPlane: "reference", Set: with(scale[x], inc), Expect: results.VerdictFail})
		}
	}
	return es
}

func init() {
	var nightly []Entry
	for _, x := range experimentOrder {
		nightly = append(nightly, Entry{Experiment: x, ControlPlane: "reference", Set: with(ciScale[x], mitigated[x]), Expect: results.VerdictPass})
	}
	Register(Suite{Name: "nightly",
		Summary: "every experiment at a CI-sized scale against the reference control plane (mitigated configurations): each must pass",
		Entries: nightly})
	Register(Suite{Name: "honesty",
		Summary: "every experiment at its default scale on the reference (must pass) and on each regression switch or incident configuration (must fail): a harness that passes a known bug is broken",
		Entries: honestyEntries(nil)})
	Register(Suite{Name: "capacity",
		Summary: "serviceentry-scale steps with a 1 GiB memory budget: the projected capacity verified by a step at that size, three times for the spread",
		Entries: []Entry{{Experiment: "serviceentry-scale", ControlPlane: "reference",
			Set: []string{"steps=500,1000,2500,5000", "memoryBudget=1Gi"}, Repeats: 3, Expect: results.VerdictPass}}})
}
