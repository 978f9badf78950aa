package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/subject"
)

func init() { register(newDescribeCmd) }

// setupEstimate is what bringing up a cluster, the control plane and the workloads takes at
// the experiments' default scale on the 2-core CI machine (README's times less the traffic's):
// a rough figure, said to be one wherever it is printed.
const setupEstimate = 45 * time.Second

func newDescribeCmd() *cobra.Command {
	var (
		j      job
		output string
	)
	cmd := &cobra.Command{
		Use:   "describe EXPERIMENT [--set k=v]… [--cp …] [--substrate …] [-o text|json]",
		Short: "Show what a run would do, without running it: parameters, cluster, workloads, faults, time, needs",
		Long: `Shows the plan of a run of EXPERIMENT: its parameters after --set (defaults marked), the
cluster nodes, namespaces and workloads it creates, the faults it injects and where (node access,
faults on the control plane), how long it takes (the traffic's duration and an estimate of the
setup) and what it needs (root for local, Docker for kind, --allow-node-chaos on existing when it
touches nodes).

describe checks the parameters and --cp as run does but not the substrate's preconditions (root,
Docker, a reachable cluster): 'meshchaos run --dry-run' checks everything a run checks.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			x, err := experimentArg(cmd.ErrOrStderr(), args, "describe")
			if err != nil {
				return err
			}
			j.Experiment = x
			p, err := j.describe()
			if err != nil {
				return err
			}
			return printPlan(cmd.OutOrStdout(), output, p)
		},
	}
	cmd.Flags().StringVar(&j.Substrate, "substrate", "local", "where it would run: local, kind or existing")
	cmd.Flags().StringVar(&j.CP, "cp", "reference", "control plane under test, as run takes it")
	cmd.Flags().StringArrayVar(&j.Sets, "set", nil, "experiment parameter name=value (repeatable; see 'meshchaos list')")
	outputFlag(cmd, &output)
	return cmd
}

// describe checks the job's parameters and control plane as run does (not the substrate's
// preconditions) and returns its plan.
func (j job) describe() (plan, error) {
	switch j.Substrate {
	case "local", "kind", "existing":
	default:
		return plan{}, Usagef("--substrate %s: choose local, kind or existing", j.Substrate)
	}
	def, ok := experiments.Lookup(j.Experiment)
	if !ok {
		return plan{}, Usagef("unknown experiment %q (see 'meshchaos list')", j.Experiment)
	}
	vals, err := def.Resolve(j.Sets)
	if err != nil {
		return plan{}, Usagef("--set: %v", err)
	}
	sut, err := subject.Parse(j.CP)
	if err != nil {
		return plan{}, Usagef("--cp: %v", err)
	}
	if def.Needs != nil {
		if err := def.Needs(sut); err != nil {
			return plan{}, Usagef("%s on %s: %v", def.Name, sut.Name(), err)
		}
	}
	return newPlan(j, def, vals, sut), nil
}

// plan is what a run would do: `meshchaos describe` and `run --dry-run` print it.
type plan struct {
	Experiment   string      `json:"experiment"`
	Summary      string      `json:"summary"`
	Substrate    string      `json:"substrate"`
	ControlPlane string      `json:"controlPlane"`
	Params       []planParam `json:"params"`
	Nodes        int         `json:"nodes"`
	Namespaces   []string    `json:"namespaces"`
	Workloads    []string    `json:"workloads"`
	// Faults is the fault sequence in a sentence (the experiment's summary).
	Faults     string   `json:"faults"`
	NodeAccess []string `json:"nodeAccess"`
	CPFaults   []string `json:"cpFaults"`
	Time       planTime `json:"time"`
	Needs      []string `json:"needs"`
	// DryRun is set by run --dry-run: every input was checked as the run checks it.
	DryRun bool `json:"dryRun,omitempty"`
	// KeepCluster is run --keep-cluster's value when it keeps the cluster (on-failure, always).
	KeepCluster string `json:"keepCluster,omitempty"`
}

// planParam is a resolved parameter; Default says it was not given with --set.
type planParam struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	Default bool   `json:"default"`
	Unit    string `json:"unit,omitempty"`
}

// planTime is how long a run takes. TrafficSeconds is exact (0: the experiment sends no
// timed traffic, its steps set its length); SetupEstimateSeconds is an estimate.
type planTime struct {
	TrafficSeconds       float64 `json:"trafficSeconds"`
	SetupEstimateSeconds float64 `json:"setupEstimateSeconds"`
	Note                 string  `json:"note"`
}

func newPlan(j job, def kit.Definition, vals params.Values, sut subject.ControlPlane) plan {
	p := plan{Experiment: def.Name, Summary: def.Summary, Substrate: j.Substrate, ControlPlane: j.CP,
		Params: []planParam{}, Namespaces: []string{}, Workloads: []string{}, Faults: def.Summary,
		NodeAccess: append([]string{}, def.NodeAccess...), CPFaults: append([]string{}, def.CPFaults...),
		Needs: []string{}}
	given := map[string]bool{}
	for _, s := range j.Sets {
		k, _, _ := strings.Cut(s, "=")
		given[k] = true
	}
	for _, prm := range def.Params {
		p.Params = append(p.Params, planParam{Name: prm.Name, Value: vals.String(prm.Name), Default: !given[prm.Name], Unit: prm.Unit})
	}

	workNS := "default"
	if j.Substrate == "existing" {
		workNS = "a namespace of the run's own (labelled, deleted at the end)"
	}
	p.Namespaces = append(p.Namespaces, workNS, sut.Namespace()+" (the control plane's)")
	if def.Mesh != nil {
		spec := def.MeshSpec(vals)
		p.Nodes = spec.Nodes
		cp := fmt.Sprintf("control plane %s: %s", sut.Name(), onNode(spec.CP.Node))
		if spec.CP.Replicas > 1 {
			cp += fmt.Sprintf(", %d replicas", spec.CP.Replicas)
		}
		if spec.CP.MemoryLimit != "" {
			cp += ", memory limit " + spec.CP.MemoryLimit
		}
		if spec.CP.CPULimit != "" {
			cp += ", CPU limit " + spec.CP.CPULimit
		}
		if spec.CP.QoS != "" {
			cp += ", QoS " + spec.CP.QoS
		}
		p.Workloads = append(p.Workloads, cp)
		for _, b := range spec.Backends {
			p.Workloads = append(p.Workloads, fmt.Sprintf("backend %s: %d echo pod(s) %s", b.Name, b.Replicas, onNode(b.Node)))
		}
		if g := spec.Gateway; g.Replicas > 0 {
			w := fmt.Sprintf("gateway: %d proxy pod(s) %s", g.Replicas, onNode(g.Node))
			if def.Hosts != nil {
				w += fmt.Sprintf(", routing %d host(s)", max(g.Hosts, def.Hosts(vals)))
			}
			p.Workloads = append(p.Workloads, w)
		}
		if a := spec.ADSLoad; a.Clients > 0 {
			w := fmt.Sprintf("adsload: %d ADS clients standing in for sidecars %s", a.Clients, onNode(a.Node))
			if a.Pods > 1 {
				w = fmt.Sprintf("adsload: %d ADS clients standing in for sidecars, spread over %d pods", a.Clients, a.Pods)
				if len(a.Nodes) > 0 {
					w += fmt.Sprintf(" on nodes %v (round-robin)", a.Nodes)
				}
			}
			p.Workloads = append(p.Workloads, w)
		}
		if se := spec.ServiceEntries; se.Count > 0 {
			w := fmt.Sprintf("%d ServiceEntries", se.Count)
			if se.Endpoints > 0 {
				w += fmt.Sprintf(" × %d endpoints", se.Endpoints)
			} else if se.Backend != "" {
				w += " on backend " + se.Backend + "'s pods"
			}
			p.Workloads = append(p.Workloads, w)
		}
	}

	p.Time.SetupEstimateSeconds = setupEstimate.Seconds()
	if _, ok := def.Params.Lookup(params.Length.Name); ok {
		p.Time.TrafficSeconds = vals.Duration(params.Length.Name).Seconds()
		p.Time.Note = "traffic for the duration parameter; the setup (cluster, control plane, workloads) and teardown are an estimate: longer on a first run or a busy machine"
	} else {
		p.Time.Note = "no timed traffic: its steps set its length; the setup (cluster, control plane, workloads) is an estimate: longer on a first run or a busy machine"
	}

	switch j.Substrate {
	case "local":
		p.Needs = append(p.Needs, "root (sudo): the local substrate runs the cluster in network namespaces on this host", "the binaries and images 'make images' makes")
	case "kind":
		p.Needs = append(p.Needs, "Docker, running (sudo hack/docker.sh starts one)", "the images 'make images' makes and kind's node image (make kind-node-image)")
	case "existing":
		p.Needs = append(p.Needs, "--kubeconfig of the cluster, whose nodes hold meshchaos's images")
		if len(def.NodeAccess) > 0 {
			p.Needs = append(p.Needs, "--allow-node-chaos and nodes labelled for it: the faults reach nodes (see node access)")
		}
	}
	if _, attached := sut.(subject.Attached); attached && len(def.CPFaults) > 0 {
		p.Needs = append(p.Needs, "--allow-cp-chaos: the faults hit a control plane the cluster already had")
	}
	return p
}

// onNode says where a workload is pinned.
func onNode(n int) string {
	if n == 0 {
		return "on any node"
	}
	return fmt.Sprintf("on node %d", n)
}

// printPlan prints p on w: a page for people (text) or the document (json).
func printPlan(w io.Writer, format string, p plan) error {
	if format == outputJSON {
		return writeJSON(w, p)
	}
	fmt.Fprintf(w, "%s (%s, %s)\n", p.Experiment, p.Substrate, p.ControlPlane)
	fmt.Fprintln(w, "parameters:")
	for _, prm := range p.Params {
		mark := "(set)"
		if prm.Default {
			mark = "(default)"
		}
		unit := ""
		if prm.Unit != "" {
			unit = " " + prm.Unit
		}
		fmt.Fprintf(w, "  %s=%s%s %s\n", prm.Name, prm.Value, unit, mark)
	}
	fmt.Fprintf(w, "creates:\n  a cluster of %d node(s)\n", p.Nodes)
	fmt.Fprintf(w, "  namespaces: %s\n", strings.Join(p.Namespaces, ", "))
	for _, wl := range p.Workloads {
		fmt.Fprintf(w, "  %s\n", wl)
	}
	fmt.Fprintf(w, "faults:\n  %s\n", p.Faults)
	list := func(title string, items []string) {
		if len(items) == 0 {
			fmt.Fprintf(w, "  %s: none\n", title)
			return
		}
		fmt.Fprintf(w, "  %s:\n", title)
		for _, it := range items {
			fmt.Fprintf(w, "    - %s\n", it)
		}
	}
	list("node access", p.NodeAccess)
	list("on the control plane", p.CPFaults)
	fmt.Fprintln(w, "time:")
	if p.Time.TrafficSeconds > 0 {
		fmt.Fprintf(w, "  traffic %s + setup about %s (estimate)\n", seconds(p.Time.TrafficSeconds), seconds(p.Time.SetupEstimateSeconds))
	} else {
		fmt.Fprintf(w, "  setup about %s (estimate), then its steps\n", seconds(p.Time.SetupEstimateSeconds))
	}
	fmt.Fprintf(w, "  %s\n", p.Time.Note)
	fmt.Fprintln(w, "needs:")
	for _, n := range p.Needs {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if p.KeepCluster != "" {
		fmt.Fprintf(w, "keeps the cluster at the end: %s (--keep-cluster)\n", p.KeepCluster)
	}
	if p.DryRun {
		fmt.Fprintln(w, "dry run: every input checked as the run checks it; nothing created")
	}
	return nil
}

func seconds(s float64) string { return (time.Duration(s) * time.Second).String() }
