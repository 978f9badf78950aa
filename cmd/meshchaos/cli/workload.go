package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/workloads/echo"
	"github.com/meshchaos/meshchaos/workloads/hog"
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
	cmd.AddCommand(newEchoCmd(), newHogCmd())
	for _, c := range workloadCmds {
		cmd.AddCommand(c())
	}
	return cmd
}

func newEchoCmd() *cobra.Command {
	var o echo.Options
	cmd := &cobra.Command{
		Use:   "echo",
		Short: "HTTP backend answering with its pod name and IP (GET /, /healthz, flapping /ready)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return Usagef("echo: %v", err)
			}
			return echo.Serve(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Addr, "addr", "127.0.0.1:8080", "listen address; in a pod the manifest gives :PORT")
	f.DurationVar(&o.ReadyFor, "ready-for", 0, "flap readiness: /ready is 200 for this long, then --unready-for 503, repeating (env ECHO_READY_FOR)")
	f.DurationVar(&o.UnreadyFor, "unready-for", 0, "flap readiness: /ready is 503 for this long after each --ready-for (env ECHO_UNREADY_FOR)")
	f.DurationVar(&o.Latency, "latency", 0, "delay every answer of GET / (env ECHO_LATENCY)")
	f.Float64Var(&o.ErrorRate, "error-rate", 0, "fraction 0..1 of GET / answered with --error-code (env ECHO_ERROR_RATE)")
	f.IntVar(&o.ErrorCode, "error-code", 0, "status of injected errors (default 500; env ECHO_ERROR_CODE)")
	f.IntVar(&o.BallastMB, "ballast-mb", 0, "allocate and touch this many MiB at start (memory-limit tests)")
	return cmd
}

func newHogCmd() *cobra.Command {
	var (
		cpus       float64
		serve, url string
		parallel   int
	)
	cmd := &cobra.Command{
		Use:   "hog [--cpus N | --serve ADDR | --download URL [--parallel N]]",
		Short: "Noisy neighbour: burn --cpus CPUs, or serve large downloads (--serve), or drive them (--download)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if serve != "" && url != "" {
				return Usagef("hog: --serve and --download are two ends: run one per process")
			}
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			switch {
			case serve != "":
				return hog.Serve(ctx, serve)
			case url != "":
				if parallel < 1 {
					return Usagef("hog: --parallel %d: at least 1", parallel)
				}
				out := cmd.OutOrStdout()
				last := time.Now()
				var prev int64
				_, err := hog.Drive(ctx, url, parallel, 10*time.Second, func(total int64) {
					now := time.Now()
					fmt.Fprintf(out, "downloaded %d MiB (%.0f MiB/s)\n", total>>20, float64(total-prev)/(1<<20)/now.Sub(last).Seconds())
					last, prev = now, total
				})
				return err
			}
			if err := hog.Validate(cpus); err != nil {
				return Usagef("hog: %v", err)
			}
			return hog.Run(ctx, cpus)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&cpus, "cpus", 1, "CPUs to burn; fractions run a duty cycle (1.5 = two goroutines busy 75 % of the time)")
	f.StringVar(&serve, "serve", "", "serve GET /download?mib=N (default 150 MiB, the incident's files) on this address instead of burning CPU")
	f.StringVar(&url, "download", "", "download this URL over and over (discarding the bytes) instead of burning CPU")
	f.IntVar(&parallel, "parallel", 4, "concurrent downloads with --download")
	return cmd
}
