package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/params"
)

func init() { register(newListCmd) }

func newListCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list [-o text|json]",
		Short: "List the experiments with their parameters",
		Long: `Lists every experiment with its parameters (default, allowed values, unit, help). With -o json,
one document on stdout: each experiment's name, summary, parameters, nodeAccess (what it does to
nodes, which needs --allow-node-chaos on the existing substrate) and cpFaults (what it does to
the control plane, which needs --allow-cp-chaos on an installed one).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), catalogJSON())
			}
			printCatalog(cmd.OutOrStdout(), true)
			return nil
		},
	}
	outputFlag(cmd, &output)
	return cmd
}

func printCatalog(out io.Writer, params bool) {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	for _, d := range experiments.List() {
		fmt.Fprintf(w, "%s\t%s\n", d.Name, d.Summary)
		if params {
			for _, p := range d.Params {
				fmt.Fprintf(w, "\t  --set %s=%s\t%s (%s)\n", p.Name, p.Default, p.Help, p.Range())
			}
		}
	}
	w.Flush()
}

// catalogDoc is `meshchaos list -o json`.
type catalogDoc struct {
	Experiments []experimentDoc `json:"experiments"`
}

// experimentDoc is one experiment of the catalog as list -o json prints it.
type experimentDoc struct {
	Name    string     `json:"name"`
	Summary string     `json:"summary"`
	Params  []paramDoc `json:"params"`
	// NodeAccess and CPFaults are always arrays (empty: none), so scripts need no null check.
	NodeAccess []string `json:"nodeAccess"`
	CPFaults   []string `json:"cpFaults"`
}

// paramDoc is one parameter: Range is the allowed values in words (as list prints them),
// Values an enum's choices.
type paramDoc struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"`
	Default  string   `json:"default"`
	Range    string   `json:"range"`
	Values   []string `json:"values,omitempty"`
	Unit     string   `json:"unit,omitempty"`
	Optional bool     `json:"optional,omitempty"`
	Help     string   `json:"help"`
}

func catalogJSON() catalogDoc {
	doc := catalogDoc{Experiments: []experimentDoc{}}
	for _, d := range experiments.List() {
		doc.Experiments = append(doc.Experiments, experimentJSON(d))
	}
	return doc
}

func experimentJSON(d kit.Definition) experimentDoc {
	e := experimentDoc{Name: d.Name, Summary: d.Summary, Params: []paramDoc{},
		NodeAccess: append([]string{}, d.NodeAccess...), CPFaults: append([]string{}, d.CPFaults...)}
	for _, p := range d.Params {
		e.Params = append(e.Params, paramJSON(p))
	}
	return e
}

func paramJSON(p params.Param) paramDoc {
	return paramDoc{Name: p.Name, Kind: string(p.Kind), Default: p.Default, Range: p.Range(),
		Values: p.Values, Unit: p.Unit, Optional: p.Optional, Help: p.Help}
}
