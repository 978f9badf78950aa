package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/results"
)

// connectCommand is what serves a kept local cluster's API once the run that brought it up has
// ended (local.Config.Connect): this binary's `cluster connect`, naming the cluster's state
// directory so that `cluster down` finds and ends it with the cluster.
func connectCommand(name, stateDir string) []string {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return []string{exe, "cluster", "connect", name, "--state-dir", stateDir}
}

func newClusterConnectCmd() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:   "connect NAME",
		Short: "Serve a local cluster's API on a loopback port and point its kubeconfig there; stays in the foreground",
		Long: `A local cluster's API is reachable from the host through a loopback forwarder that lives in the
process that brought it up. A run with --keep-cluster starts 'cluster connect' on its own to keep
serving it; if that process is gone, run it again (as root): it points the cluster's kubeconfig
at its port, prints 'kubeconfig: PATH', makes itself the cluster's owner (so 'cluster down --stale'
leaves the cluster alone while it runs) and serves until SIGINT or SIGTERM. 'cluster down NAME'
ends it with the cluster.

  sudo meshchaos cluster connect cpoo4242 &
  sudo KUBECONFIG=/var/lib/meshchaos/clusters/cpoo4242/kubeconfig kubectl get pods -A`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := local.ValidateName(name); err != nil {
				return Usagef("%v", err)
			}
			if stateDir == "" {
				stateDir = filepath.Join(local.Home(), "clusters", name)
			}
			if filepath.Base(filepath.Clean(stateDir)) != name {
				return Usagef("--state-dir %s is not cluster %s's", stateDir, name)
			}
			if euid() != 0 {
				return Usagef("cluster connect needs root (it enters the cluster's network namespace)")
			}
			ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr(), newActivity("cluster connect "+name))
			defer stop()
			err := local.Connect(ctx, stateDir, func(kubeconfig string) {
				fmt.Fprintln(cmd.OutOrStdout(), "kubeconfig:", kubeconfig)
			})
			if err != nil {
				return WithExitCode(2, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "the cluster's state directory (default: under $MESHCHAOS_HOME, as 'cluster up' makes it)")
	return cmd
}

// printKept says how to reach the cluster a run kept and how to remove it.
func printKept(w io.Writer, k *results.KeptCluster) {
	fmt.Fprintf(w, "cluster kept: %s (%s; %s)\n", k.Name, k.Substrate, k.Why)
	kubectl := "kubectl"
	if k.Context != "" {
		kubectl += " --context " + k.Context
	}
	where := "get pods -A"
	if k.Substrate == "existing" {
		where = "get pods -n " + strings.Join(k.Namespaces, ",")
		fmt.Fprintf(w, "  the run's namespaces stay: %s (with its agent and node labels)\n", strings.Join(k.Namespaces, ", "))
	}
	if k.Kubeconfig != "" {
		fmt.Fprintf(w, "  export KUBECONFIG=%s\n", k.Kubeconfig)
	}
	if k.Substrate == "local" {
		fmt.Fprintf(w, "  %s %s   (as root, as the run: the kubeconfig is root's)\n", kubectl, where)
	} else {
		fmt.Fprintf(w, "  %s %s\n", kubectl, where)
	}
	down := "meshchaos cluster down " + k.Name
	switch k.Substrate {
	case "kind":
		down = "meshchaos cluster down --substrate kind " + k.Name
	case "existing":
		down = "meshchaos cluster down --substrate existing " + k.Name
		if k.Kubeconfig != "" {
			down += " --kubeconfig " + k.Kubeconfig
		}
		if k.Context != "" {
			down += " --context " + k.Context
		}
	}
	fmt.Fprintf(w, "  remove it: %s\n", down)
}
