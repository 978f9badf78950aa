package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/kind"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/runner"
)

func init() { register(newClusterCmd) }

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Local clusters: real Kubernetes in network namespaces (root, Linux)"}
	cmd.AddCommand(newClusterUpCmd(), newClusterDownCmd(), newClusterExecCmd(), newClusterLoadCmd(), newClusterListCmd(), newClusterConnectCmd())
	return cmd
}

func newClusterUpCmd() *cobra.Command {
	var name, imagesDir string
	var nodes int
	var show bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring a cluster up; stays in the foreground and tears it down on Ctrl-C / SIGTERM",
		Long: "Bring a local cluster up. When it is ready, prints one line 'kubeconfig: PATH' on stdout\n" +
			"and stays in the foreground (the kubeconfig's loopback forwarder lives in this process).\n" +
			"SIGINT or SIGTERM tears everything down.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := local.ValidateName(name); err != nil {
				return Usagef("%v", err)
			}
			if nodes < 1 || nodes > local.MaxNodes {
				return Usagef("--nodes %d: choose 1 to %d", nodes, local.MaxNodes)
			}
			if err := local.Preflight(); err != nil {
				return WithExitCode(2, err)
			}
			images, err := bins.ImagesDir(imagesDir)
			if err != nil {
				return WithExitCode(2, err)
			}
			ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr(), newActivity("cluster "+name))
			defer stop()
			p := runner.NewProgress(cmd.ErrOrStderr())
			p.Phase("cluster up " + name)
			c, err := local.Up(ctx, local.Config{Name: name, Nodes: nodes, ImagesDir: images, Logf: p.Logf})
			p.Done()
			if err != nil {
				if errors.Is(err, local.ErrNameInUse) {
					return WithExitCode(2, fmt.Errorf("--name: %w", err))
				}
				return WithExitCode(2, fmt.Errorf("cluster up: %w", err))
			}
			fmt.Fprintln(cmd.OutOrStdout(), "kubeconfig:", c.KubeconfigPath())
			if show {
				showCluster(ctx, cmd, c)
			}
			<-ctx.Done()
			fmt.Fprintln(cmd.ErrOrStderr(), "tearing down", name, "…")
			down, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return c.Down(down)
		},
	}
	cmd.Flags().StringVar(&name, "name", "meshchaos", "cluster name (unique on this host)")
	cmd.Flags().IntVar(&nodes, "nodes", 1, "number of nodes")
	cmd.Flags().StringVar(&imagesDir, "images", "", "directory of image tarballs to load (from 'make images'; "+imagesDefault+")")
	cmd.Flags().BoolVar(&show, "show", false, "print nodes and pods once ready")
	return cmd
}

// imagesDefault says where --images defaults to; bins.ImagesDir resolves it.
const imagesDefault = "default: $MESHCHAOS_IMAGES, else bin/images of the checkout around the working directory, else images/ beside meshchaos"

func showCluster(ctx context.Context, cmd *cobra.Command, c *local.Cluster) {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return
	}
	out := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	defer out.Flush()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err == nil {
		fmt.Fprintln(out, "NODE\tSTATUS\tIP\tNETNS")
		for i, n := range nodes.Items {
			status := "NotReady"
			if kube.NodeReady(&n) {
				status = "Ready"
			}
			ip := ""
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					ip = a.Address
				}
			}
			fmt.Fprintf(out, "%s\t%s\t%s\t%s\n", n.Name, status, ip, c.NodeNetns(i+1))
		}
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err == nil {
		fmt.Fprintln(out, "POD\tPHASE\tIP\tNODE")
		for _, p := range pods.Items {
			fmt.Fprintf(out, "%s/%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Status.Phase, p.Status.PodIP, p.Spec.NodeName)
		}
	}
	out.Flush()
	fmt.Fprintf(cmd.OutOrStdout(), "Try: KUBECONFIG=%s kubectl get pods -A   (Ctrl-C tears the cluster down)\n", c.KubeconfigPath())
}

// Seams for tests: 'cluster down --stale' is tested against fakes, never against this host's
// clusters (another run's may be up).
var (
	localOwners     = local.Owners
	localCheckOwner = local.CheckOwner
	localDown       = local.Down
	euid            = os.Geteuid
)

func newClusterDownCmd() *cobra.Command {
	var name, substrate, prefix string
	var all, stale bool
	var ex existingDown
	cmd := &cobra.Command{
		Use:   "down (NAME | --name N) [--substrate local|kind|existing] | --all [--prefix P] | --stale [--prefix P]",
		Short: "Remove everything a cluster left (also after a crash): processes, namespaces, mounts, cgroups, kind containers, state; on an existing cluster, a run's leftovers",
		Long: "Remove a cluster. --all removes every local cluster on this host and every kind cluster\n" +
			"meshchaos created (kind clusters named " + kind.Prefix + "*); on a shared host narrow it with --prefix.\n" +
			"--stale removes only the local clusters whose owner process (the 'cluster up', 'run' or test\n" +
			"that brought them up) is gone, and says which it skipped and why; it covers local clusters\n" +
			"only: kind clusters record no owner.\n" +
			"A local teardown that fails part-way keeps the cluster's state directory: run it again with --name.\n" +
			existingDownHelp,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if name != "" {
					return Usagef("give the name once: NAME or --name N")
				}
				name = args[0]
			}
			modes := 0
			for _, on := range []bool{name != "", all, stale} {
				if on {
					modes++
				}
			}
			if modes != 1 {
				return Usagef("give exactly one of --name N, --all or --stale (a NAME argument is --name N)")
			}
			if substrate == "existing" {
				if stale {
					return Usagef("--stale covers local clusters only (it finds their owner processes on this host); on an existing cluster give the run's NAME, or --all")
				}
				return ex.down(cmd, name, prefix)
			}
			if err := ex.check(substrate); err != nil {
				return err
			}
			if substrate != "local" && substrate != "kind" {
				return Usagef("--substrate %s: local, kind or existing", substrate)
			}
			if stale && substrate != "local" {
				return Usagef("--stale covers local clusters only (kind clusters record no owner process); remove kind clusters with --name or --all")
			}
			if prefix != "" && name != "" {
				return Usagef("--prefix narrows --all and --stale; with --name give the whole name")
			}
			out := cmd.OutOrStdout()
			type target struct{ substrate, name, why string }
			targets := []target{{substrate, name, ""}}
			switch {
			case stale:
				if euid() != 0 {
					return Usagef("cluster down --stale needs root (it reads other users' processes and removes network namespaces, mounts and cgroups)")
				}
				owners, err := localOwners("")
				if err != nil {
					return WithExitCode(2, err)
				}
				targets = nil
				for _, o := range owners {
					switch {
					case !strings.HasPrefix(o.Name, prefix):
					case !o.Stale:
						fmt.Fprintf(out, "skipped %s: %s\n", o.Name, o.Why)
					default:
						targets = append(targets, target{"local", o.Name, o.Why})
					}
				}
				if len(targets) == 0 {
					if prefix != "" {
						fmt.Fprintf(out, "no stale local clusters named %s… on this host\n", prefix)
					} else {
						fmt.Fprintln(out, "no stale local clusters on this host")
					}
					return nil
				}
			case all:
				targets = nil
				if euid() == 0 {
					for _, n := range local.List("") {
						targets = append(targets, target{"local", n, ""})
					}
				}
				kinds, err := kind.List()
				if err != nil {
					return WithExitCode(2, fmt.Errorf("list kind clusters: %w", err))
				}
				for _, n := range kinds {
					targets = append(targets, target{"kind", n, ""})
				}
				targets = slices.DeleteFunc(targets, func(t target) bool { return !strings.HasPrefix(t.name, prefix) })
				if len(targets) == 0 {
					if prefix != "" {
						fmt.Fprintf(out, "no clusters named %s… on this host\n", prefix)
					} else {
						fmt.Fprintln(out, "no clusters on this host")
					}
					return nil
				}
			}
			var errs []error
			for _, t := range targets {
				if stale {
					// Again, right before: teardowns take a while, and an owner may have come
					// back under the name since the list was made.
					if o := localCheckOwner("", t.name); !o.Stale {
						fmt.Fprintf(out, "skipped %s: %s\n", t.name, o.Why)
						continue
					}
				}
				start := time.Now()
				var err error
				if t.substrate == "kind" {
					err = kind.Down(t.name, nil)
				} else if euid() != 0 {
					return Usagef("cluster down of a local cluster needs root (it removes network namespaces, mounts and cgroups)")
				} else {
					err = localDown(cmd.Context(), "", t.name, func(f string, a ...any) {
						if !strings.HasPrefix(f, "[down]") { // the per-step timings are for tests
							fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...)
						}
					})
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", t.name, err))
					continue
				}
				if t.why != "" {
					fmt.Fprintf(out, "removed %s (%s; %s) in %s\n", t.name, t.substrate, t.why, time.Since(start).Round(10*time.Millisecond))
				} else {
					fmt.Fprintf(out, "removed %s (%s) in %s\n", t.name, t.substrate, time.Since(start).Round(10*time.Millisecond))
				}
			}
			if err := errors.Join(errs...); err != nil {
				if name != "" && strings.Contains(err.Error(), "no cluster named") {
					return WithExitCode(2, err)
				}
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "cluster name")
	cmd.Flags().StringVar(&substrate, "substrate", "local", "the cluster's substrate: local or kind (with --name), existing (a run's leftovers on the cluster --kubeconfig names; NAME or --all)")
	ex.flags(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "every meshchaos cluster on this host, local and kind (other users' too: narrow it with --prefix)")
	cmd.Flags().BoolVar(&stale, "stale", false, "every local cluster on this host whose owner process is gone (local clusters only)")
	cmd.Flags().StringVar(&prefix, "prefix", "", "with --all or --stale: only the clusters whose names start with this")
	return cmd
}

func newClusterExecCmd() *cobra.Command {
	var name string
	var nodeNum int
	cmd := &cobra.Command{
		Use:   "exec --name N [--node K] -- CMD [ARGS…]",
		Short: "Run CMD inside a node's network namespace (--node 0: the control-plane namespace)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, err := local.NodeNetnsPath(name, nodeNum)
			if err != nil {
				return Usagef("%v", err)
			}
			c := exec.CommandContext(cmd.Context(), "nsenter", append([]string{"--net=" + ns, "--"}, args...)...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			if err := c.Run(); err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					return WithExitCode(ee.ExitCode(), fmt.Errorf("%s: %w", args[0], err))
				}
				return WithExitCode(2, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "meshchaos", "cluster name")
	cmd.Flags().IntVar(&nodeNum, "node", 1, "node number (1-based; 0 is the control plane)")
	return cmd
}

func newClusterLoadCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "load --name N IMAGE.tar…",
		Short: "Import image tarballs into every node of a running cluster",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if _, err := os.Stat(a); err != nil {
					return Usagef("%v", err)
				}
			}
			for _, a := range args {
				if err := local.LoadArchive(cmd.Context(), "", name, a); err != nil {
					return WithExitCode(2, err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), "loaded", a)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "meshchaos", "cluster name")
	return cmd
}

func newClusterListCmd() *cobra.Command {
	var substrate string
	var ex existingDown
	cmd := &cobra.Command{
		Use:   "list [--substrate existing [--kubeconfig F] [--context C]]",
		Short: "List the clusters that have state on this host (local ones, and meshchaos's kind clusters as 'NAME (kind)'); with --substrate existing, the runs that left something on that cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch substrate {
			case "existing":
				return ex.list(cmd)
			case "local", "kind":
				if err := ex.check(substrate); err != nil {
					return err
				}
			default:
				return Usagef("--substrate %s: local or kind (this host's clusters, both listed) or existing", substrate)
			}
			for _, n := range local.List("") {
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
			kinds, err := kind.List()
			if err != nil {
				return WithExitCode(2, fmt.Errorf("list kind clusters: %w", err))
			}
			for _, n := range kinds {
				fmt.Fprintf(cmd.OutOrStdout(), "%s (kind)\n", n)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&substrate, "substrate", "local", "local (this host's local and kind clusters) or existing (the runs that left something on the cluster --kubeconfig names)")
	ex.flags(cmd)
	return cmd
}
