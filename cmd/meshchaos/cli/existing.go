package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/existing"
	"github.com/meshchaos/meshchaos/harness/experiment"
)

// existingFlags are the flags of --substrate existing.
type existingFlags struct {
	Kubeconfig, Context string
	AllowNodeChaos      bool
}

func (e *existingFlags) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&e.Kubeconfig, "kubeconfig", "", "--substrate existing: the cluster's kubeconfig (default: $KUBECONFIG, else ~/.kube/config, as kubectl)")
	cmd.Flags().StringVar(&e.Context, "context", "", "--substrate existing: the kubeconfig context (default: its current one)")
	cmd.Flags().BoolVar(&e.AllowNodeChaos, "allow-node-chaos", false, "--substrate existing: run the agent with node access (cgroups, kube-proxy, node tools) for the faults that need it")
}

// check refuses the existing substrate's flags with another substrate: they would be ignored, and
// a cluster built on this host where the user meant the one the kubeconfig names.
func (e existingFlags) check(substrate string) error {
	if substrate == "existing" {
		return nil
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"kubeconfig", e.Kubeconfig != ""}, {"context", e.Context != ""}, {"allow-node-chaos", e.AllowNodeChaos}} {
		if f.set {
			return Usagef("--%s is for --substrate existing: add --substrate existing to run on that cluster, or leave --%s out to run on --substrate %s", f.name, f.name, substrate)
		}
	}
	return nil
}

// provider checks the kubeconfig before anything starts: an unreadable one is exit 2.
func (e existingFlags) provider() (cluster.Provider, error) {
	p := existing.Provider{Kubeconfig: e.Kubeconfig, Context: e.Context, AllowNodeChaos: e.AllowNodeChaos}
	if _, err := p.RESTConfig(); err != nil {
		return nil, Usagef("%v", err)
	}
	return p, nil
}

// checkNodeAccess refuses, before anything starts, an experiment whose faults or measures need
// node access on an existing cluster where it was not allowed, and names them.
func checkNodeAccess(sub cluster.Provider, def experiment.Definition) error {
	p, ok := sub.(existing.Provider)
	if !ok || p.AllowNodeChaos || len(def.NodeAccess) == 0 {
		return nil
	}
	return Usagef("%s needs node access the existing substrate gives only with --allow-node-chaos (a privileged agent on the nodes): %s", def.Name, strings.Join(def.NodeAccess, "; "))
}
