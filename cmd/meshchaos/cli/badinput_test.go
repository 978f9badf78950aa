package cli

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/params"
)

// badValues are values of a parameter of kind p.Kind that no run may accept: not a value of the
// kind at all, not finite, or outside the parameter's bounds.
func badValues(p params.Param) []string {
	out := []string{"not-a-value"}
	switch p.Kind {
	case params.Int:
		out = append(out, "NaN", "1.5")
		if p.Min > math.MinInt32 {
			out = append(out, strconv.FormatInt(int64(p.Min)-1, 10))
		}
		if p.Max < math.MaxInt32 {
			out = append(out, strconv.FormatInt(int64(p.Max)+1, 10))
		}
	case params.Float:
		out = append(out, "NaN", "Inf", "-Inf", strconv.FormatFloat(p.Max*2+1, 'f', -1, 64))
	case params.Duration:
		out = append(out, "NaN", "-1s")
		if p.Max < float64(1000*time.Hour) {
			out = append(out, (time.Duration(p.Max) + time.Second).String())
		}
	case params.Quantity:
		out = append(out, "NaN", "-1")
		if p.Max < 1<<50 {
			out = append(out, strconv.FormatFloat(p.Max*4, 'f', 0, 64))
		}
	case params.Enum:
		out = []string{"no-such-choice"}
	case params.IntList:
		out = append(out, "3,2,1", "1,,2")
	}
	return out
}

// runnable lists every command of the tree that does something (not a group), by its path.
func runnable(c *cobra.Command) [][]string {
	var out [][]string
	if c.Runnable() && c.Name() != "help" && c.Name() != "completion" {
		out = append(out, strings.Fields(c.CommandPath())[1:])
	}
	for _, sub := range c.Commands() {
		out = append(out, runnable(sub)...)
	}
	return out
}

// TestBadInputMatrix feeds the CLI every bad parameter value of every experiment (each kind's
// garbage, non-finite numbers, values past the bounds), an unknown flag to every command and a
// set of bad flag values, and demands of each: exit code 2, an answer in under a second, a
// message that names what was wrong, and nothing created (no file in the working directory or
// meshchaos's home, no network namespace).
func TestBadInputMatrix(t *testing.T) {
	home, cwd := t.TempDir(), t.TempDir()
	t.Setenv("MESHCHAOS_HOME", home)
	t.Setenv("KUBECONFIG", filepath.Join(cwd, "absent-kubeconfig"))
	t.Chdir(cwd)
	netnsBefore := netnsNames(t)

	type input struct {
		args []string
		want string // in the message
	}
	var inputs []input
	for _, d := range experiments.List() {
		for _, p := range d.Params {
			for _, v := range badValues(p) {
				inputs = append(inputs, input{[]string{"run", d.Name, "--set", p.Name + "=" + v}, p.Name})
			}
		}
		inputs = append(inputs,
			input{[]string{"run", d.Name, "--set", "noSuchParameter=1"}, "noSuchParameter"},
			input{[]string{"run", d.Name, "--set", "rate"}, "rate"},
			input{[]string{"run", d.Name, "--cp", "reference:no-such-switch"}, "no-such-switch"},
			input{[]string{"run", d.Name, "--cp", "no-such-control-plane"}, "no-such-control-plane"},
			input{[]string{"run", d.Name, "--substrate", "no-such-substrate"}, "no-such-substrate"},
			input{[]string{"run", d.Name, "--kubeconfig", "kc"}, "--kubeconfig is for --substrate existing"},
		)
	}
	for _, path := range runnable(NewRoot()) {
		inputs = append(inputs, input{append(append([]string{}, path...), "--no-such-flag"), "unknown flag"})
	}
	inputs = append(inputs,
		input{[]string{"run"}, "experiment"},
		input{[]string{"run", "no-such-experiment"}, "no-such-experiment"},
		input{[]string{"run", "cp-oom-restart", "endpoint-flap"}, "experiment"},
		input{[]string{"suite"}, "suite"},
		input{[]string{"suite", "no-such-suite"}, "no-such-suite"},
		input{[]string{"suite", "nightly", "--context", "staging"}, "--context is for --substrate existing"},
		input{[]string{"suite", "nightly", "--shard", "0/2"}, "--shard"},
		input{[]string{"suite", "nightly", "--shard", "3/2"}, "--shard"},
		input{[]string{"suite", "nightly", "--shard", "1/0"}, "--shard"},
		input{[]string{"suite", "nightly", "--shard", "half"}, "--shard"},
		input{[]string{"suite", "nightly", "--shard", "1/2", "--history", "h"}, "--history with --shard"},
		input{[]string{"suite", "merge"}, "give the shards' output directories"},
		input{[]string{"suite", "merge", "absent-shard", "--out", "merged"}, "absent-shard"},
		input{[]string{"suite", "merge", "absent-shard", "--nights", "1"}, "--nights"},
		input{[]string{"fidelity", "--istiod", "reference"}, "--istiod"},
		input{[]string{"fidelity", "--reference", "istiod"}, "--reference"},
		input{[]string{"fidelity", "--istiod", "istiod@no-such-pin"}, "no-such-pin"},
		input{[]string{"fidelity", "--repeats", "101"}, "repeats"},
		input{[]string{"fidelity", "--experiment", "sidecar-startup"}, "suite fidelity has cp-oom-restart, endpoint-flap"},
		input{[]string{"fidelity", "--set", "bogus=1"}, "bogus"},
		input{[]string{"fidelity", "--alpha", "NaN"}, "alpha"},
		input{[]string{"fidelity", "--kubeconfig", "/nonexistent"}, "--substrate existing"},
		input{[]string{"upgrade-check"}, "--base"},
		input{[]string{"upgrade-check", "--base", "reference"}, "--candidate"},
		input{[]string{"upgrade-check", "--base", "reference", "--candidate", "reference:no-such-switch"}, "no-such-switch"},
		input{[]string{"upgrade-check", "--base", "reference", "--candidate", "reference:ungated", "--repeats", "-1"}, "repeats"},
		input{[]string{"upgrade-check", "--base", "reference", "--candidate", "reference:ungated", "--alpha", "NaN"}, "alpha"},
		input{[]string{"upgrade-check", "--base", "reference", "--candidate", "reference:ungated", "--max-regression", "Inf"}, "max-regression"},
		input{[]string{"version", "-o", "yaml"}, "yaml"},
		input{[]string{"compare"}, "accepts 2 arg"},
		input{[]string{"compare", filepath.Join(cwd, "absent-a"), filepath.Join(cwd, "absent-b")}, "absent-a"},
		input{[]string{"compare", "a", "b", "--max-regression", "NaN"}, "max-regression"},
		input{[]string{"compare", "a", "b", "--alpha", "2"}, "alpha"},
		input{[]string{"cluster", "up", "--nodes", "0"}, "nodes"},
		input{[]string{"cluster", "up", "--name", "Bad_Name"}, "name"},
		input{[]string{"cluster", "down"}, "--name"},
		input{[]string{"cluster", "down", "--stale", "--all"}, "--stale"},
		input{[]string{"cluster", "down", "run-a", "--name", "run-a"}, "give the name once"},
		input{[]string{"cluster", "down", "--substrate", "existing", "run-a"}, "the existing substrate needs the cluster's kubeconfig"},
		input{[]string{"cluster", "down", "--substrate", "existing", "--kubeconfig", filepath.Join(cwd, "absent"), "run-a"}, "--kubeconfig: kubeconfig " + filepath.Join(cwd, "absent")},
		input{[]string{"cluster", "down", "--substrate", "existing", "--all"}, "the existing substrate needs the cluster's kubeconfig"},
		input{[]string{"cluster", "down", "--substrate", "existing", "run-a", "--all"}, "exactly one of"},
		input{[]string{"cluster", "down", "--substrate", "existing", "--stale"}, "--stale covers local clusters only"},
		input{[]string{"cluster", "down", "--substrate", "existing", "--prefix", "ci-", "run-a"}, "--prefix narrows --all"},
		input{[]string{"cluster", "down", "--substrate", "existing", "--timeout", "0s", "run-a"}, "--timeout 0s"},
		input{[]string{"cluster", "down", "--substrate", "existing", "Bad_Name!"}, "run name"},
		input{[]string{"cluster", "down", "--substrate", "nowhere", "run-a"}, "--substrate nowhere"},
		input{[]string{"cluster", "down", "--kubeconfig", "kc", "run-a"}, "--kubeconfig is for --substrate existing"},
		input{[]string{"cluster", "list", "--substrate", "existing"}, "the existing substrate needs the cluster's kubeconfig"},
		input{[]string{"cluster", "list", "--context", "staging"}, "--context is for --substrate existing"},
		input{[]string{"cluster", "list", "--substrate", "nowhere"}, "--substrate nowhere"},
		input{[]string{"controlplane", "--inject-default-mode", "bogus"}, "inject-default-mode"},
		input{[]string{"workload", "xdsproxy", "--xds", "127.0.0.1:15012", "--node-id", "n", "--xds-token", "t"}, "--xds-token needs --xds-root-cert"},
		input{[]string{"workload", "adsload", "--xds", "127.0.0.1:15012", "--xds-server-name", "cp.ns.svc"}, "--xds-server-name needs --xds-root-cert"},
	)

	for _, in := range inputs {
		start := time.Now()
		code, out := run(t, in.args...)
		took := time.Since(start)
		what := strings.Join(in.args, " ")
		if !assert.Equal(t, 2, code, "%s: exit code (output: %s)", what, firstLine(out)) {
			continue
		}
		assert.Less(t, took, time.Second, "%s: answered in %s", what, took)
		assert.Contains(t, out, in.want, "%s: the message names what was wrong", what)
	}
	for _, dir := range []string{cwd, home} {
		left, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, left, "bad input created nothing in %s", dir)
	}
	assert.Equal(t, netnsBefore, netnsNames(t), "bad input created no network namespace")
	t.Logf("%d bad inputs across %d experiments and every command: each exit 2 in under a second, nothing created", len(inputs), len(experiments.List()))
}

// netnsNames lists the host's named network namespaces (ip netns).
func netnsNames(t *testing.T) string {
	entries, err := os.ReadDir("/var/run/netns")
	if os.IsNotExist(err) {
		return ""
	}
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return fmt.Sprint(names)
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
