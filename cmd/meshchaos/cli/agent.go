package cli

import (
	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/harness/cluster/existing/agent"
)

func init() { register(newAgentCmd) }

// newAgentCmd is the node agent of the existing substrate (harness/cluster/existing/agent): the
// pod runs `meshchaos agent`; the harness execs the subcommands through the API server.
func newAgentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "agent",
		Short:  "Node agent for the existing substrate (runs in a pod; reached only through pod exec)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE:   func(cmd *cobra.Command, _ []string) error { return agent.Wait(cmd.Context()) },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "dial HOST:PORT",
		Short: "Copy stdin to a TCP connection from this node and the connection to stdout",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return agent.Dial(cmd.Context(), args[0], cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}, &cobra.Command{
		Use:   "serve",
		Short: "Answer cgroup requests (JSON lines) on stdin",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return agent.Serve(cmd.InOrStdin(), cmd.OutOrStdout()) },
	}, &cobra.Command{
		Use:   "exec -- COMMAND [ARG]…",
		Short: "Run a command in the node's root file system and network namespace",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return agent.Exec(cmd.Context(), args, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	})
	return cmd
}
