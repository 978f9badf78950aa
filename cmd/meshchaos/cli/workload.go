package cli

import (
	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/workloads/echo"
)

func init() { register(newWorkloadCmd) }

var workloadCmds []func() *cobra.Command

// registerWorkload adds a `meshchaos workload NAME` subcommand; called from init.
func registerWorkload(c func() *cobra.Command) { workloadCmds = append(workloadCmds, c) }

func newWorkloadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workload",
		Short: "Run a workload process (the entrypoint of the workload images)",
	}
	cmd.AddCommand(newEchoCmd())
	for _, c := range workloadCmds {
		cmd.AddCommand(c())
	}
	return cmd
}

func newEchoCmd() *cobra.Command {
	var o echo.Options
	cmd := &cobra.Command{
		Use:   "echo",
		Short: "HTTP backend answering with its pod name and IP (GET /, /healthz)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return echo.Serve(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Addr, "addr", ":8080", "listen address")
	cmd.Flags().IntVar(&o.BallastMB, "ballast-mb", 0, "allocate and touch this many MiB at start (memory-limit tests)")
	return cmd
}
