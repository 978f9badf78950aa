package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/internal/version"
)

func init() { register(newVersionCmd) }

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version [-o text|json]",
		Short: "Print meshchaos's version and the commit it was built from",
		Long: `Prints the version (git describe when built by make, else the module version go build
recorded), the commit's revision and time, whether the tree had uncommitted changes, and the Go
toolchain. summary.json records the same as harnessVersion and harnessCommit.

A revision is known only when the build recorded one: make build passes it with -ldflags -X;
go build alone stamps it in a plain checkout but not in a linked git worktree, and go run and
go test never do.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := version.Get()
			out := cmd.OutOrStdout()
			if err := checkOutput(output); err != nil {
				return err
			}
			if output == outputJSON {
				return writeJSON(out, in)
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "version\t%s\n", in.Version)
			revision, when, modified := "unknown (not recorded by this build)", "unknown", "unknown"
			if in.Revision != "" {
				revision = in.Revision
			}
			if in.Time != nil {
				when = in.Time.UTC().Format(time.RFC3339)
			}
			if in.Modified != nil {
				modified = fmt.Sprint(*in.Modified)
			}
			fmt.Fprintf(w, "revision\t%s\n", revision)
			fmt.Fprintf(w, "time\t%s\n", when)
			fmt.Fprintf(w, "modified\t%s\n", modified)
			fmt.Fprintf(w, "go\t%s\n", in.GoVersion)
			return w.Flush()
		},
	}
	outputFlag(cmd, &output)
	return cmd
}
