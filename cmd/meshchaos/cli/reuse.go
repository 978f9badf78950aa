package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/cluster/reuse"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/suite"
)

// reuseFlag registers --reuse-cluster on a command that makes many runs (suite, upgrade-check,
// fidelity).
func (j *job) reuseFlag(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&j.ReuseCluster, "reuse-cluster", true, "the runs share one cluster (local and kind substrates): each gets namespaces of its own and its own control plane, and the cluster is checked to hold nothing of a run before the next one has it (a cluster that does is replaced); false: a new cluster per run")
}

// newPool returns the pool of clusters the runs of a command share, or nil: --reuse-cluster
// off, a substrate whose clusters are not the run's own (existing), or a control plane installed
// before the run (cps, as --cp spells them; it lives on an existing cluster only).
func (j *job) newPool(cps ...string) (*reuse.Pool, error) {
	if !j.ReuseCluster || (j.Substrate != "local" && j.Substrate != "kind") {
		return nil, nil
	}
	for _, cp := range cps {
		if sut, err := subject.Parse(cp); err == nil {
			if _, attached := sut.(subject.Attached); attached {
				return nil, nil
			}
		}
	}
	inner, err := j.provider()
	if err != nil {
		return nil, err
	}
	name := j.Name
	if name == "" {
		name = fmt.Sprintf("mcpool%d", os.Getpid()%100000)
	}
	if j.Substrate == "local" {
		if err := local.CheckName("", name); err != nil {
			return nil, Usagef("--name: %v", err)
		}
	}
	return reuse.New(inner, name), nil
}

// closePool tears down the pool's cluster (if any) once the command's runs are over, and says how
// the runs used it.
func closePool(ctx context.Context, p *reuse.Pool, stderr io.Writer) {
	if p == nil {
		return
	}
	err := p.Close(context.WithoutCancel(ctx))
	st := p.Stats()
	fmt.Fprintf(stderr, "shared cluster: %d cluster(s) brought up, %d run(s) on a cluster an earlier run had used", st.Clusters, st.Reused)
	for _, why := range st.Discarded {
		fmt.Fprintf(stderr, "; replaced: %s", why)
	}
	fmt.Fprintln(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tear the shared cluster down: %v\n", err)
	}
}

// suiteCPs are the control planes s's entries run against (cp where an entry names none).
func suiteCPs(s suite.Suite, cp string) []string {
	out := []string{cp}
	for _, e := range s.Entries {
		if e.ControlPlane != "" {
			out = append(out, e.ControlPlane)
		}
	}
	return out
}

// planPool tells the pool the runs to come, in order, and the nodes each asks for.
func planPool(p *reuse.Pool, runs []*prepared) {
	var plan []reuse.Planned
	for _, r := range runs {
		plan = append(plan, reuse.Planned{K: r.poolRun, Nodes: r.nodes})
	}
	p.Plan(plan)
}
