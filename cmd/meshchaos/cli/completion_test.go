package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/suite"
)

// complete runs cobra's hidden __complete command as the shell scripts do and returns the
// candidates (without descriptions) and the directive line.
func complete(t *testing.T, args ...string) (candidates []string, directive string) {
	t.Helper()
	code, out, errOut := runSplit(t, append([]string{"__complete"}, args...)...)
	require.Equal(t, 0, code, errOut)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, ":") {
			directive = line
			continue
		}
		name, _, _ := strings.Cut(line, "\t")
		candidates = append(candidates, name)
	}
	return candidates, directive
}

func TestCompleteExperiments(t *testing.T) {
	var names []string
	for _, d := range experiments.List() {
		names = append(names, d.Name)
	}
	for _, cmd := range []string{"run", "describe"} {
		got, dir := complete(t, cmd, "")
		assert.Equal(t, names, got, cmd)
		assert.Equal(t, ":4", dir, "%s: no file completion", cmd)
		got, _ = complete(t, cmd, "cp-")
		assert.Contains(t, got, "cp-oom-restart", cmd)
		got, _ = complete(t, cmd, "cp-oom-restart", "")
		assert.Empty(t, got, "%s takes one experiment", cmd)
	}
}

func TestCompleteSetNames(t *testing.T) {
	d, _ := experiments.Lookup("endpoint-flap")
	var want []string
	for _, p := range d.Params {
		want = append(want, p.Name+"=")
	}
	for _, cmd := range []string{"run", "describe"} {
		got, dir := complete(t, cmd, "endpoint-flap", "--set", "")
		assert.Equal(t, want, got, cmd)
		assert.Equal(t, ":6", dir, "%s: no space after name=, no files", cmd)
	}
	got, _ := complete(t, "run", "--set", "")
	assert.Empty(t, got, "no experiment yet: no parameter names")
}

func TestCompleteCP(t *testing.T) {
	got, _ := complete(t, "run", "cp-oom-restart", "--cp", "")
	assert.Contains(t, got, "reference")
	for _, sw := range regress.Names() {
		assert.Contains(t, got, "reference:"+sw)
	}
	assert.Contains(t, got, "istiod")
	assert.Contains(t, got, "istiod:installed")
	assert.Contains(t, got, "external:")
	for _, c := range got {
		if strings.HasPrefix(c, "istiod@") {
			assert.NotEqual(t, "istiod@default", c)
		}
	}
	for _, args := range [][]string{{"describe", "x", "--cp", ""}, {"suite", "nightly", "--cp", ""}, {"upgrade-check", "--base", ""}, {"upgrade-check", "--candidate", ""}} {
		other, _ := complete(t, args...)
		assert.Equal(t, got, other, "%v", args)
	}
}

func TestCompleteSuitesAndSubstrates(t *testing.T) {
	var names []string
	for _, s := range suite.Builtins() {
		names = append(names, s.Name)
	}
	got, dir := complete(t, "suite", "")
	assert.Equal(t, append([]string{"merge"}, names...), got, "suite's subcommand, then the suites")
	assert.Equal(t, ":0", dir, "a suite YAML file completes too")
	got, _ = complete(t, "upgrade-check", "--suite", "")
	assert.Equal(t, names, got)

	for _, args := range [][]string{{"run", "x", "--substrate", ""}, {"describe", "x", "--substrate", ""}, {"suite", "nightly", "--substrate", ""}, {"upgrade-check", "--substrate", ""}} {
		got, _ := complete(t, args...)
		assert.Equal(t, []string{"local", "kind", "existing"}, got, "%v", args)
	}
	for _, cmd := range []string{"list", "run", "describe", "compare", "suite", "version"} {
		got, _ := complete(t, cmd, "-o", "")
		assert.Equal(t, []string{"text", "json"}, got, cmd)
	}
}
