package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/controlplane/command"
	"github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/internal/crds"
)

func init() { register(newControlPlaneCmd) }

// newControlPlaneCmd is the reference control plane's own command line (controlplane/command,
// which the control plane's image runs as meshchaos-controlplane), kept here for runs by hand,
// with the rendering of its manifests beside it.
func newControlPlaneCmd() *cobra.Command {
	cmd := command.New("controlplane")
	cmd.AddCommand(newControlPlaneManifestsCmd())
	return cmd
}

// newControlPlaneManifestsCmd renders the reference control plane's manifests into a directory,
// so it can be deployed as an external control plane (examples/controlplanes/reference.yaml) or
// by hand.
func newControlPlaneManifestsCmd() *cobra.Command {
	var (
		out      string
		p        manifests.Params
		switches []string
	)
	cmd := &cobra.Command{
		Use:   "manifests --out DIR",
		Short: "Write the reference control plane's manifests (CRDs, control plane) to a directory",
		Long: `Write what the harness applies for --cp reference into DIR: crds.yaml (the Istio ServiceEntry,
WorkloadEntry and Sidecar CRDs) and controlplane.yaml (Namespace, RBAC, Deployment, Service,
webhook configurations). A descriptor's install.manifests can point at DIR
(examples/controlplanes/reference.yaml), or apply it with kubectl apply --server-side -f DIR.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return Usagef("--out DIR is required")
			}
			if _, err := regress.Parse(switches); err != nil {
				return Usagef("%v", err)
			}
			p.Regress = switches
			p.SyncGate = !slices.Contains(switches, string(regress.Ungated))
			y, err := manifests.ControlPlane(p)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("create %s: %w", out, err)
			}
			for name, data := range map[string][]byte{"crds.yaml": crds.Istio, "controlplane.yaml": y} {
				if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
					return fmt.Errorf("write %s: %w", name, err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", filepath.Join(out, "crds.yaml"), filepath.Join(out, "controlplane.yaml"))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "directory to write crds.yaml and controlplane.yaml into (created if needed)")
	f.StringVar(&p.Namespace, "namespace", "", "namespace of the control plane (default meshchaos-system)")
	f.StringVar(&p.MemoryLimit, "memory-limit", "", "the control plane container's memory limit (default 1Gi; experiments set their own)")
	f.StringArrayVar(&switches, "regress", nil, "enable a regression switch (repeatable): "+fmt.Sprint(regress.Names()))
	return cmd
}
