package suite

// PreUpgrade is the built-in suite `meshchaos upgrade-check` runs by default: the experiments
// whose measures move when an upgrade brings back an incident's bug, at scales a CI machine runs
// in a few minutes each. Entries name no control plane: upgrade-check runs each against the base
// and the candidate.
//
//   - cp-oom-restart (incident 1): a restart that serves before its informers synced shows as
//     errors, an error window and failed checks (reference:ungated).
//   - endpoint-flap (incident 2): endpoint-only changes that become full pushes show as full
//     pushes, push time and control-plane CPU (reference:full-push-on-endpoint-reappear).
//
// Three repeats a side are the fewest with which a one-sided Mann-Whitney test can reach
// α = 0.05; `--repeats 1` gives a quick look that rests on the minimum effects alone.
const PreUpgrade = "pre-upgrade"

func init() {
	Register(Suite{
		Name:    PreUpgrade,
		Summary: "pre-upgrade validation: incidents 1 and 2 at CI scale, each against base and candidate (upgrade-check)",
		Entries: []Entry{
			{Experiment: "cp-oom-restart", Repeats: 3,
				Set: []string{"rate=100", "duration=30s", "steady=5s", "throttleWindow=18s"}},
			{Experiment: "endpoint-flap", Repeats: 3,
				Set: []string{"rate=50", "duration=34s", "steady=4s", "flapFor=15s", "proxies=20", "serviceEntries=100"}},
		},
	})
}
