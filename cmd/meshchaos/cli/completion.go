package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/suite"
)

// Shell completion (`meshchaos completion bash|zsh|fish`): the names the CLI accepts, taken from
// the code that accepts them, so completion never offers what a run would refuse.

// completeExperiment completes the one EXPERIMENT argument of run and describe.
func completeExperiment(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, d := range experiments.List() {
		out = append(out, d.Name+"\t"+d.Summary)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeSet completes --set with "name=" of the experiment given as the first argument (the
// value follows without a space).
func completeSet(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	d, ok := experiments.Lookup(args[0])
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, p := range d.Params {
		out = append(out, p.Name+"=\t"+p.Help+" (default "+p.Default+")")
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// cpChoices are the --cp values the code knows: the reference, each regression switch and the
// per-proxy generation mode, istiod and each build make istiod left (none when there is none),
// the installed istiod, and external: (a descriptor file follows).
func cpChoices() []string {
	out := []string{"reference"}
	for _, sw := range regress.Names() {
		out = append(out, "reference:"+sw)
	}
	out = append(out, "reference:"+subject.GenerationOption+"=per-proxy")
	out = append(out, subject.IstiodPrefix)
	if root, err := bins.IstiodRoot(); err == nil {
		for _, pin := range bins.IstiodPins(root) {
			if pin != "default" { // the default build is plain "istiod"
				out = append(out, subject.IstiodPrefix+"@"+pin)
			}
		}
	}
	return append(out, subject.IstiodPrefix+":"+subject.InstalledSuffix, "external:")
}

// completeCP completes --cp (and upgrade-check's --base and --candidate).
func completeCP(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	choices := cpChoices()
	if strings.HasPrefix(toComplete, "external:") {
		// The descriptor's path: the shell's file completion after the prefix is shell-specific;
		// offer nothing rather than a wrong path.
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
	dir := cobra.ShellCompDirectiveNoFileComp
	if strings.HasPrefix("external:", toComplete) && toComplete != "" {
		dir |= cobra.ShellCompDirectiveNoSpace
	}
	return choices, dir
}

// completeSubstrate completes --substrate.
func completeSubstrate(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return []string{"local\tnetwork namespaces on this host (root)", "kind\tDocker", "existing\ta cluster you have (--kubeconfig)"}, cobra.ShellCompDirectiveNoFileComp
}

// completeSuite completes a suite: the built-in names, and files (a suite YAML).
func completeSuite(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, s := range suite.Builtins() {
		out = append(out, s.Name+"\t"+s.Summary)
	}
	return out, cobra.ShellCompDirectiveDefault
}

// completeSuiteArg completes suite's one NAME|FILE argument.
func completeSuiteArg(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completeSuite(cmd, args, toComplete)
}

// completeOutput completes -o.
func completeOutput(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return []string{outputText, outputJSON}, cobra.ShellCompDirectiveNoFileComp
}

// completeFlags registers the completion of each flag of cmd named in fns that cmd has.
func completeFlags(cmd *cobra.Command, fns map[string]cobra.CompletionFunc) {
	for name, fn := range fns {
		if cmd.Flags().Lookup(name) != nil {
			// Only an unknown flag or a second registration fails: both are bugs shown by the tests.
			if err := cmd.RegisterFlagCompletionFunc(name, fn); err != nil {
				panic(err)
			}
		}
	}
}

// addCompletions registers the completions of the tree under root: arguments and flags that
// take names the code knows.
func addCompletions(root *cobra.Command) {
	experimentFlags := map[string]cobra.CompletionFunc{"set": completeSet, "cp": completeCP, "substrate": completeSubstrate}
	byPath := map[string]func(c *cobra.Command){
		"meshchaos run": func(c *cobra.Command) {
			c.ValidArgsFunction = completeExperiment
			completeFlags(c, experimentFlags)
		},
		"meshchaos describe": func(c *cobra.Command) {
			c.ValidArgsFunction = completeExperiment
			completeFlags(c, experimentFlags)
		},
		"meshchaos suite": func(c *cobra.Command) {
			c.ValidArgsFunction = completeSuiteArg
			completeFlags(c, map[string]cobra.CompletionFunc{"cp": completeCP, "substrate": completeSubstrate})
		},
		"meshchaos upgrade-check": func(c *cobra.Command) {
			completeFlags(c, map[string]cobra.CompletionFunc{"suite": completeSuite, "base": completeCP, "candidate": completeCP, "substrate": completeSubstrate})
		},
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if f, ok := byPath[c.CommandPath()]; ok {
			f(c)
		}
		if c.Flags().Lookup("output") != nil {
			completeFlags(c, map[string]cobra.CompletionFunc{"output": completeOutput})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
