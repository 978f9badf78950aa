package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// examples are the commands' help examples, by command path below meshchaos. In one place so
// that TestEveryCommandHasExamples can hold each against the command tree: every command has
// some, and every example line parses as that command with flags it has.
var examples = map[string][]string{
	"run": {
		"# the headline experiment on a local cluster, against the reference control plane",
		"sudo meshchaos run cp-oom-restart",
		"# the same against a regression switch that re-creates the incident (exit 1: caught)",
		"sudo meshchaos run cp-oom-restart --cp reference:ungated",
		"# istiod built from source, a parameter changed, the cluster kept when the run fails",
		"sudo meshchaos run endpoint-flap --cp istiod@2026-08 --set flap=evict --set proxies=500 --keep-cluster=on-failure",
		"# check the inputs and print the plan, creating nothing",
		"meshchaos run serviceentry-scale --set memoryBudget=1Gi --dry-run -o json",
	},
	"describe": {
		"meshchaos describe cp-cpu-starvation",
		"meshchaos describe endpoint-flap --set flap=evict --cp istiod -o json",
	},
	"list": {
		"meshchaos list",
		"meshchaos list -o json",
	},
	"report": {
		"meshchaos report runs/cp-oom-restart-reference-20261126-101500",
	},
	"compare": {
		"# five runs of each control plane, measure by measure (exit 1 on a regression)",
		"meshchaos compare runs/base runs/candidate --out runs/comparison",
		"meshchaos compare runs/base runs/candidate --max-regression 10 -o json",
	},
	"suite": {
		"sudo meshchaos suite nightly --history runs/history",
		"# a third of the nightly suite, on one of three CI machines (merge them with 'suite merge')",
		"sudo meshchaos suite nightly --shard 2/3 --out runs/shard-2",
		"sudo meshchaos suite my-suite.yaml --set rate=20",
	},
	"suite merge": {
		"meshchaos suite merge runs/shard-1 runs/shard-2 runs/shard-3 --out runs/nightly --history runs/history",
	},
	"upgrade-check": {
		"# does istiod at the new pin survive what the old one survived? (exit 1 on a regression)",
		"sudo meshchaos upgrade-check --base istiod@2026-04 --candidate istiod@2026-08 --repeats 3",
		"sudo meshchaos upgrade-check --base reference --candidate reference:ungated --out runs/upgrade",
	},
	"fidelity": {
		"# is the reference still a fair stand-in for istiod? (the ratio table; exit 1 beyond 2x)",
		"sudo meshchaos fidelity --istiod istiod@2026-08 --out runs/fidelity",
		"sudo meshchaos fidelity --repeats 1 --set cp-oom-restart.serviceEntries=1000",
		"sudo meshchaos fidelity --experiment endpoint-flap --experiment cp-oom-restart --repeats 2",
	},
	"capacity": {
		"# istiod's capacity curve at both pins, the reference's beside it",
		"sudo meshchaos capacity --cp reference --cp istiod@2026-04 --cp istiod@2026-08 --proxies 100,1000 --steps 500,1000,2500 --out runs/capacity",
		"sudo meshchaos capacity --cp istiod@2026-08 --proxies 100,1000,5000 --memory-budget 8Gi --set cpMemoryLimit=8Gi",
	},
	"capacity report": {
		"# rebuild the report from the run directories (e.g. another budget)",
		"meshchaos capacity report runs/capacity --memory-budget 2Gi --proxies 1000,10000",
	},
	"version": {
		"meshchaos version",
		"meshchaos version -o json",
	},
	"cluster": {
		"sudo meshchaos cluster up --nodes 2 --name dev",
		"sudo meshchaos cluster down dev",
	},
	"cluster up": {
		"# two nodes, stays in the foreground; Ctrl-C tears it down",
		"sudo meshchaos cluster up --nodes 2 --name dev --show",
	},
	"cluster down": {
		"sudo meshchaos cluster down dev",
		"# every local cluster whose owner process is gone (after a kill -9)",
		"sudo meshchaos cluster down --stale",
		"# what a run left on a cluster you already have",
		"meshchaos cluster down --substrate existing --kubeconfig ~/.kube/staging run-1234",
	},
	"cluster list": {
		"sudo meshchaos cluster list",
		"meshchaos cluster list --substrate existing --kubeconfig ~/.kube/staging",
	},
	"cluster connect": {
		"# serve a kept cluster's API again (run --keep-cluster does it for you)",
		"sudo meshchaos cluster connect dev",
	},
	"cluster exec": {
		"sudo meshchaos cluster exec --name dev --node 1 -- iptables-save -t nat",
	},
	"cluster load": {
		"sudo meshchaos cluster load --name dev bin/images/echo.tar",
	},
	"controlplane": {
		"# the reference control plane against the cluster of $KUBECONFIG (as its image runs it)",
		"meshchaos controlplane --admin-addr 127.0.0.1:15014",
	},
	"controlplane manifests": {
		"meshchaos controlplane manifests --out examples/controlplanes/reference",
		"meshchaos controlplane manifests --out /tmp/ungated --regress ungated",
	},
	"images": {
		"meshchaos images build --out bin/images",
	},
	"images build": {
		"meshchaos images build --out bin/images",
		"meshchaos images build echo xdsproxy --out bin/images",
	},
	"images binary": {
		"meshchaos images binary --ref meshchaos.local/istio/pilot:2026-08 --binary bin/istiod/2026-08/pilot-discovery --at /usr/local/bin/pilot-discovery --out bin/istiod/2026-08/pilot.tar -- discovery",
	},
	"images kind-node": {
		"# what 'make kind-node-image' runs",
		"meshchaos images kind-node --rootfs bin/kind-node/rootfs.tar --bin-dir bin --out bin/kind-node/image.tar",
	},
}

// addExamples sets each command's Example from examples, indented as cobra prints it.
func addExamples(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.TrimPrefix(strings.TrimPrefix(c.CommandPath(), root.Name()), " ")
		if ex, ok := examples[path]; ok {
			c.Example = "  " + strings.Join(ex, "\n  ")
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
