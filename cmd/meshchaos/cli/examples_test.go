package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/subject"
)

// noExamples are the commands without examples of their own, and why.
var noExamples = map[string]string{
	"help":       "cobra's",
	"completion": "cobra's, with examples in its own long help",
	"workload":   "the workload images' entrypoint, not a command to type",
}

// Every command a user types has examples, and every example is a command line that meshchaos
// takes: the command exists, its flags are the command's, its arguments are as many as it takes,
// and for run and describe the experiment, its --set and its --cp resolve. An example that goes
// stale (a flag renamed, an experiment gone) fails here.
func TestEveryCommandHasExamples(t *testing.T) {
	root := NewRoot()
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.TrimPrefix(strings.TrimPrefix(c.CommandPath(), "meshchaos"), " ")
		top, _, _ := strings.Cut(path, " ")
		if _, skip := noExamples[top]; skip || c.Hidden {
			return
		}
		if path != "" {
			seen[path] = true
			assert.NotEmpty(t, c.Example, "meshchaos %s has no examples (cmd/meshchaos/cli/examples.go)", path)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for path, lines := range examples {
		assert.True(t, seen[path], "examples for %q, which is no command", path)
		for _, line := range lines {
			if strings.HasPrefix(line, "#") {
				continue
			}
			t.Run(line, func(t *testing.T) { checkExample(t, path, line) })
		}
	}
}

func checkExample(t *testing.T, path, line string) {
	words := strings.Fields(strings.TrimPrefix(line, "sudo "))
	require.Equal(t, "meshchaos", words[0])
	root := NewRoot()
	c, rest, err := root.Find(words[1:])
	require.NoError(t, err)
	// A group's examples may show its subcommands.
	require.True(t, c.CommandPath() == "meshchaos "+path || strings.HasPrefix(c.CommandPath(), "meshchaos "+path+" "),
		"the example runs %s, not meshchaos %s or one of its subcommands", c.CommandPath(), path)
	require.NoError(t, c.ParseFlags(rest), "its flags")
	args := c.Flags().Args()
	require.NoError(t, c.ValidateArgs(args), "its arguments")
	if name := c.Name(); name != "run" && name != "describe" {
		return
	}
	require.NotEmpty(t, args)
	def, ok := experiments.Lookup(args[0])
	require.True(t, ok, "experiment %s", args[0])
	sets, err := c.Flags().GetStringArray("set")
	require.NoError(t, err)
	_, err = def.Resolve(sets)
	require.NoError(t, err, "its --set")
	cp, err := c.Flags().GetString("cp")
	require.NoError(t, err)
	_, err = subject.Parse(cp)
	require.NoError(t, err, "its --cp")
}
