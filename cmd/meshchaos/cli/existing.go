package cli

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/existing"
	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/subject"
)

// existingFlags are the flags of --substrate existing.
type existingFlags struct {
	Kubeconfig, Context string
	AllowNodeChaos      bool
	// AllowCPChaos lets an experiment's faults land on a control plane installed before the
	// run (--cp istiod:installed, a descriptor with install: none).
	AllowCPChaos bool
}

func (e *existingFlags) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&e.Kubeconfig, "kubeconfig", "", "--substrate existing: the cluster's kubeconfig (default: $KUBECONFIG, else ~/.kube/config, as kubectl)")
	cmd.Flags().StringVar(&e.Context, "context", "", "--substrate existing: the kubeconfig context (default: its current one)")
	cmd.Flags().BoolVar(&e.AllowNodeChaos, "allow-node-chaos", false, "--substrate existing: run the agent with node access (cgroups, kube-proxy, node tools) for the faults that need it")
	cmd.Flags().BoolVar(&e.AllowCPChaos, "allow-cp-chaos", false, "--substrate existing: let the experiment's faults (OOM kill, CPU starvation, load) land on a control plane installed before the run (--cp istiod:installed, install: none)")
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
	}{{"kubeconfig", e.Kubeconfig != ""}, {"context", e.Context != ""}, {"allow-node-chaos", e.AllowNodeChaos}, {"allow-cp-chaos", e.AllowCPChaos}} {
		if f.set {
			return Usagef("--%s is for --substrate existing: add --substrate existing to run on that cluster, or leave --%s out to run on --substrate %s", f.name, f.name, substrate)
		}
	}
	return nil
}

// provider checks the kubeconfig before anything starts: an unreadable one is exit 2.
func (e existingFlags) provider() (cluster.Substrate, error) {
	p := existing.Substrate{Kubeconfig: e.Kubeconfig, Context: e.Context, AllowNodeChaos: e.AllowNodeChaos}
	if _, err := p.RESTConfig(); err != nil {
		return nil, kubeconfigError(e.Kubeconfig, err)
	}
	return p, nil
}

// kubeconfigError is the usage error for RESTConfig's err: it names --kubeconfig when the flag
// gave the file, or when there is none and the flag is the way to give one; a wrong --context in
// $KUBECONFIG's file already says which file and context.
func kubeconfigError(kubeconfig string, err error) error {
	if kubeconfig != "" || errors.Is(err, existing.ErrNoKubeconfig) {
		return Usagef("--kubeconfig: %v", err)
	}
	return Usagef("%v", err)
}

// checkNodeAccess refuses, before anything starts, an experiment whose faults or measures need
// node access on an existing cluster where it was not allowed, and names them.
func checkNodeAccess(sub cluster.Substrate, def kit.Definition) error {
	p, ok := sub.(existing.Substrate)
	if !ok || p.AllowNodeChaos || len(def.NodeAccess) == 0 {
		return nil
	}
	return Usagef("%s needs node access the existing substrate gives only with --allow-node-chaos (a privileged agent on the nodes): %s", def.Name, strings.Join(def.NodeAccess, "; "))
}

// checkInstalled reads a control plane installed before the run (subject.Attached) and refuses,
// before anything starts, a placement the experiment asks that it does not already have.
func checkInstalled(sub cluster.Substrate, sut subject.ControlPlane, def kit.Definition, vals params.Values) error {
	a, ok := sut.(subject.Attached)
	p, isExisting := sub.(existing.Substrate)
	if !ok || !isExisting || def.Mesh == nil {
		return nil
	}
	cfg, err := p.RESTConfig()
	if err != nil {
		return Usagef("%v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Usagef("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.CheckInstalled(ctx, cs, def.MeshSpec(vals).CP); err != nil {
		return Usagef("%s on %s: %v", def.Name, sut.Name(), err)
	}
	return nil
}
