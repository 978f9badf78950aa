// Package kit is the experiment kit: a declarative Definition (parameters, the mesh it
// needs, its fault sequence, its checks) and one generic lifecycle for all of them:
// setup (mesh up, routes proven, measurements started) → steady (traffic) → chaos (the faults,
// each with evidence, cleared at the end) → recovery (traffic ends) → teardown. An experiment
// reads like a test story; everything it names is a small value from the harness packages.
package kit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshchaos/meshchaos/harness/chaos"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/mesh"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/traffic"
	"github.com/meshchaos/meshchaos/results"
)

// Definition is one experiment of the catalog.
type Definition struct {
	Name    string
	Summary string
	// Params are its parameters; the kit reads the common ones it finds there (params.Rate,
	// params.Length, params.Steady, params.Nodes; params.CPMemory and params.CPCPU become the
	// control plane's limits, see MeshSpec).
	Params params.Set
	// Validate checks rules between parameters, before anything starts.
	Validate func(v params.Values) error
	// Mesh describes the mesh it needs (the control plane under test, and its limits where the
	// placement leaves them to the kit, are filled in by the kit: MeshSpec).
	Mesh func(v params.Values) mesh.Spec
	// Hosts is how many generated hosts the traffic targets (through every gateway pod). nil: the
	// experiment sends no traffic (a control-plane-only experiment, e.g. scale): no route wait,
	// no steady phase, the chaos phase right after setup. A mesh without gateways whose data
	// plane is proxyless gRPC clients (mesh.Spec.GRPC) has their RPCs as its traffic: they run
	// from their start, and the phases last as the traffic would.
	Hosts func(v params.Values) int
	// Chaos is the fault sequence; injectors started with State.Inject are cleared when it ends.
	Chaos func(ctx context.Context, s *State) error
	// Checks are the SLOs and the proof that the chaos happened.
	Checks func(v params.Values) []runner.Check
	// MetricsInterval is how often the control plane's metrics are scraped (0: the
	// measurement's default, 500 ms). Every scrape is kept, so hour-long runs take fewer.
	MetricsInterval time.Duration
	// NodeAccess names what the experiment does to nodes rather than through the Kubernetes API
	// (a kube-proxy CPU throttle, a node's CPU budget, a pod's cgroup read): on a cluster that is
	// not the run's own these need a privileged agent on the nodes, which the user must allow;
	// without it the run refuses to start and lists them.
	NodeAccess []string
	// CPFaults names what the experiment does to the control plane itself (kills it, starves
	// it, loads it to its limit): against a control plane installed before the run
	// (subject.Attached, the user's own) these need Env.AllowCPChaos (--allow-cp-chaos);
	// without it the run refuses to start and lists them.
	CPFaults []string
	// Needs refuses, before anything starts, a control plane that lacks what the experiment
	// uses (an injection webhook, meshchaos's own proxy injected); nil: any will do.
	Needs func(cp subject.ControlPlane) error
}

// Env is what the CLI hands every experiment.
type Env struct {
	// Substrate provides the cluster.
	Substrate cluster.Substrate
	// ControlPlane is the control plane under test (subject.Parse of --cp).
	ControlPlane subject.ControlPlane
	// ClusterName names the cluster exactly (--name); empty: the experiment's short name and a
	// process-unique suffix.
	ClusterName string
	// XDS is how the data plane reaches the control plane (--xds): mesh.XDSAuto, XDSSecure or
	// XDSPlaintext.
	XDS string
	// AllowCPChaos lets the experiment's CPFaults land on an installed control plane
	// (--allow-cp-chaos).
	AllowCPChaos bool
	// Keep says when the run's cluster is left up at the end instead of torn down
	// (--keep-cluster; default KeepNever).
	Keep KeepPolicy
}

// Resolve validates parameter assignments (name=value: the CLI's --set) and the rules between
// parameters: all before anything starts, so bad input costs no cluster.
func (d Definition) Resolve(sets []string) (params.Values, error) {
	v, err := d.Params.Resolve(sets)
	if err != nil {
		return params.Values{}, err
	}
	if d.Validate != nil {
		if err := d.Validate(v); err != nil {
			return params.Values{}, fmt.Errorf("parameters: %w", err)
		}
	}
	if _, ok := d.Params.Lookup(params.Steady.Name); ok && v.Duration(params.Steady.Name) >= v.Duration(params.Length.Name) {
		return params.Values{}, fmt.Errorf("parameters: steady=%s must be shorter than duration=%s", v.String(params.Steady.Name), v.String(params.Length.Name))
	}
	if d.Mesh != nil {
		spec := d.MeshSpec(v)
		spec.ControlPlane = placeholder{}
		if err := spec.Validate(); err != nil {
			return params.Values{}, fmt.Errorf("parameters: %w", err)
		}
	}
	return v, nil
}

// MeshSpec is the mesh the experiment asks for with v, the control plane's limits applied: an
// experiment that declares params.CPMemory or params.CPCPU and leaves its control plane's
// placement without limits and QoS class gets cpMemoryLimit and cpCPULimit as its limits ("" sets
// none). One that shapes the control plane's resources itself (cp-cpu-starvation's cpQoS: no
// limits at all, or requests equal to them) sets a QoS class or a limit, and the kit leaves the
// placement as it is.
func (d Definition) MeshSpec(v params.Values) mesh.Spec {
	spec := d.Mesh(v)
	cp := &spec.CP
	if cp.QoS != "" || cp.MemoryLimit != "" || cp.CPULimit != "" {
		return spec
	}
	if _, ok := d.Params.Lookup(params.CPMemory.Name); ok {
		cp.MemoryLimit = v.String(params.CPMemory.Name)
	}
	if _, ok := d.Params.Lookup(params.CPCPU.Name); ok {
		cp.CPULimit = v.String(params.CPCPU.Name)
	}
	return spec
}

// placeholder lets a mesh spec be validated before a control plane is chosen.
type placeholder struct{ subject.ControlPlane }

// State is what the fault sequence works with: the run, the mesh, the parameters.
type State struct {
	*runner.Run
	Mesh   *mesh.Mesh
	Params params.Values
	CP     subject.ControlPlane
	// CPPod is the control plane's pod as it was when the chaos began.
	CPPod *corev1.Pod
	// Profiles captures the control plane's pprof profiles (nil when it has no pprof).
	Profiles *observe.Profiles
	// Memory reads the control plane's memory cgroup.
	Memory *observe.CgroupMemory

	active []chaos.Injector
}

// Inject applies a fault and puts its evidence on the timeline; it is cleared when the chaos
// phase ends, unless cleared before with Clear.
func (s *State) Inject(ctx context.Context, inj chaos.Injector) error {
	ev, err := inj.Inject(ctx)
	if err != nil {
		return fmt.Errorf("inject %s: %w", inj.Name(), err)
	}
	s.active = append(s.active, inj)
	s.Event("chaos.injected", inj.Name(), ev.Summary)
	f := results.Fault{Name: inj.Name(), Implementation: "harness"}
	if im, ok := inj.(chaos.Implementer); ok {
		f.Implementation, f.Fallback = im.Implementation()
	}
	s.RecordFault(f)
	return nil
}

// Clear removes a fault now and records what it did.
func (s *State) Clear(ctx context.Context, inj chaos.Injector) error {
	for i, a := range s.active {
		if a == inj {
			s.active = append(s.active[:i], s.active[i+1:]...)
			break
		}
	}
	ev, err := inj.Clear(ctx)
	if err != nil {
		s.Event("chaos.error", inj.Name(), err.Error())
		return fmt.Errorf("clear %s: %w", inj.Name(), err)
	}
	s.Event("chaos.cleared", inj.Name(), ev.Summary)
	return nil
}

// clearAll clears every fault still in force, newest first, even after an interrupt.
func (s *State) clearAll() error {
	var errs []error
	for len(s.active) > 0 {
		errs = append(errs, s.Clear(context.Background(), s.active[len(s.active)-1]))
	}
	return errors.Join(errs...)
}

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Build turns a definition, its resolved parameters and the environment into a runnable
// experiment with the kit's lifecycle.
func (d Definition) Build(env Env, v params.Values) (runner.Experiment, error) {
	if env.Substrate == nil || env.ControlPlane == nil {
		return runner.Experiment{}, errors.New("experiment: a substrate and a control plane under test are required")
	}
	if err := d.checkAttached(env); err != nil {
		return runner.Experiment{}, err
	}
	if d.Needs != nil {
		if err := d.Needs(env.ControlPlane); err != nil {
			return runner.Experiment{}, fmt.Errorf("%s on %s: %w", d.Name, env.ControlPlane.Name(), err)
		}
	}
	spec := d.MeshSpec(v)
	if d.Hosts != nil {
		spec.Gateway.Hosts = max(spec.Gateway.Hosts, d.Hosts(v)) // the gateways route what the traffic targets
	}
	spec.Name = shortName(d.Name)
	spec.ClusterName = env.ClusterName
	spec.ControlPlane = env.ControlPlane
	spec.XDS = env.XDS
	if err := spec.Validate(); err != nil {
		return runner.Experiment{}, err
	}
	s := &State{Params: v, CP: env.ControlPlane}
	var targets []traffic.Target
	// Without gateways the gRPC clients' own RPCs are the traffic: no Vegeta attack.
	httpTraffic := spec.Gateway.Replicas > 0 || spec.GRPC.Clients == 0
	var trafficEnd time.Time
	setup := func(ctx context.Context, r *runner.Run) error {
		s.Run = r
		if spec.Nodes == 1 && spec.Gateway.Node != 0 {
			r.Event("note", "cluster", "1 node: the control plane and the data plane share it")
		}
		m, err := mesh.Up(ctx, env.Substrate, spec, r)
		s.Mesh = m
		if err != nil {
			return err
		}
		if s.CPPod, err = m.ControlPlanePod(ctx); err != nil {
			return err
		}
		if d.Hosts != nil && httpTraffic {
			targets = m.Targets(d.Hosts(v))
			if err := m.WaitRoutes(ctx, targets, 2*time.Minute); err != nil {
				return err
			}
			r.Event("gateway.ready", "gateway", fmt.Sprintf("%d replica(s) route %d hosts", len(m.GatewayIPs), d.Hosts(v)))
		}
		return r.Measure(s.standardMeasurements(spec, d.MetricsInterval)...)
	}
	steady := func(ctx context.Context, r *runner.Run) error {
		if !httpTraffic {
			trafficEnd = time.Now().Add(v.Duration(params.Length.Name))
			return Sleep(ctx, v.Duration(params.Steady.Name))
		}
		if err := r.StartTraffic(traffic.Options{Name: "gateway", Targets: targets, Rate: v.Int(params.Rate.Name),
			Duration: v.Duration(params.Length.Name), DialContext: s.Mesh.Cluster.Dialer(spec.Gateway.Node)}); err != nil {
			return err
		}
		return Sleep(ctx, v.Duration(params.Steady.Name))
	}
	chaosPhase := func(ctx context.Context, r *runner.Run) error {
		err := d.Chaos(ctx, s)
		return errors.Join(err, s.clearAll())
	}
	phases := []runner.Phase{
		{Name: "steady", Do: steady},
		{Name: "chaos", Do: chaosPhase},
		{Name: "recovery", Do: func(ctx context.Context, r *runner.Run) error {
			var err error
			if httpTraffic {
				err = r.WaitTraffic(ctx)
			} else {
				err = Sleep(ctx, time.Until(trafficEnd))
			}
			s.recordCPFigures()
			return err
		}},
	}
	if d.Hosts == nil {
		phases = []runner.Phase{{Name: "chaos", Do: func(ctx context.Context, r *runner.Run) error {
			err := chaosPhase(ctx, r)
			s.recordCPFigures()
			return err
		}}}
	}
	return runner.Experiment{
		Name: d.Name, Substrate: env.Substrate.Name(), ControlPlane: env.ControlPlane.Name(), Params: v.Map(),
		Setup:  setup,
		Phases: phases,
		Teardown: func(ctx context.Context, r *runner.Run) error {
			if s.Mesh == nil || s.Mesh.Cluster == nil {
				return nil
			}
			if s.Mesh.Client != nil {
				s.saveLogs(ctx, r)
			}
			if v := r.VerdictSoFar(); env.Keep.Keeps(v) {
				kept, err := s.keep(ctx, r, env.Keep, v)
				if err == nil {
					r.Event("cluster.kept", kept.Name, kept.Why)
					return nil
				}
				r.Logf("keep the cluster %s: %v: tearing it down", s.Mesh.Cluster.Name(), err)
			}
			return s.Mesh.Down(ctx)
		},
		Checks: d.Checks(v),
	}, nil
}

// ErrCPChaosNotAllowed is why Build refuses an experiment whose faults (CPFaults) would land on
// a control plane installed before the run: Env.AllowCPChaos is not set. The CLI adds its flag.
var ErrCPChaosNotAllowed = errors.New("control-plane chaos not allowed")

// checkAttached refuses an installed control plane (subject.Attached) where the run would
// find none (a cluster the run brings up holds none) or where the experiment's faults on the
// control plane were not allowed.
func (d Definition) checkAttached(env Env) error {
	if _, ok := env.ControlPlane.(subject.Attached); !ok {
		return nil
	}
	if _, ok := env.Substrate.(cluster.Shared); !ok {
		return fmt.Errorf("%s attaches to a control plane installed already, and a cluster on substrate %s is new and holds none: run it on the existing substrate (the cluster where it is installed), or let meshchaos install one (control plane istiod)", env.ControlPlane.Name(), env.Substrate.Name())
	}
	if len(d.CPFaults) > 0 && !env.AllowCPChaos {
		return fmt.Errorf("%s does this to the control plane, which is %s, installed before the run (not the run's own): %s: %w", d.Name, env.ControlPlane.Name(), strings.Join(d.CPFaults, "; "), ErrCPChaosNotAllowed)
	}
	return nil
}

// standardMeasurements follow the control plane: its pods, its metrics, its profiles and its
// memory cgroup (with a heap profile before an OOM kill).
func (s *State) standardMeasurements(spec mesh.Spec, metricsEvery time.Duration) []observe.Measurement {
	cp, pod, c := s.CP, s.CPPod, s.Mesh.Cluster
	dial := c.Dialer(max(spec.CP.Node, 1))
	ms := []observe.Measurement{&observe.Pods{Client: s.Mesh.Client, Namespace: cp.Namespace(), Selector: cp.Selector(), As: observe.RoleControlPlane}}
	if len(cp.Metrics()) > 0 {
		ms = append(ms, &observe.ControlPlaneMetrics{URL: cp.AdminURL(pod) + cp.MetricsPath(), Dial: dial, Measures: cp.Metrics(), Interval: metricsEvery})
	}
	if u := cp.PprofURL(pod); u != "" {
		s.Profiles = &observe.Profiles{BaseURL: u, RunDir: s.Dir(), Dial: dial}
		if da, ok := cp.(subject.DebugAuth); ok {
			// Without its credentials the debug port answers 401: no profile, said once.
			if h, err := da.DebugHeader(context.Background(), c); err != nil {
				s.Logf("profiles of %s: %v", cp.Name(), err)
			} else {
				s.Profiles.Header = h
			}
		}
		ms = append(ms, s.Profiles)
	}
	if len(s.Mesh.GatewayIPs) > 0 {
		ms = append(ms, &observe.Proxies{IPs: s.Mesh.GatewayIPs, Dial: c.Dialer(max(spec.Gateway.Node, 1)), As: "gateway"})
	}
	if s.Mesh.GRPCClientURL != "" {
		ms = append(ms, &observe.GRPCClients{URL: s.Mesh.GRPCClientURL, Dial: c.Dialer(max(spec.GRPC.Node, 1))})
	}
	if g, err := c.PodCgroup(pod); err == nil {
		if mem, err := observe.OpenGroupMemory(g); err == nil {
			s.Memory = mem
			// 70 % leaves the profiler time to capture the heap under a CPU limit before the kill.
			ms = append(ms, &observe.Memory{Reader: mem, Fraction: 0.7, BeforeOOM: func(ctx context.Context) {
				if s.Profiles != nil {
					if _, err := s.Profiles.Capture(ctx, observe.Heap, "before-oom"); err != nil {
						s.Logf("heap profile before OOM: %v", err)
					}
				}
			}})
		} else {
			s.Logf("control plane memory cgroup: %v (memory not followed)", err)
		}
	}
	return ms
}

// shortName is a cluster-name prefix from an experiment name ("cp-oom-restart" → "cpoo"): short,
// since node network namespaces and links derive their names from it.
func shortName(name string) string {
	var b []rune
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b = append(b, r)
		}
	}
	if len(b) > 4 {
		b = b[:4]
	}
	return string(b)
}

// recordCPFigures puts what the control plane says of itself on the timeline: xDS streams it
// refused while not ready (a sync gate at work) and its own time to ready.
func (s *State) recordCPFigures() {
	sum := s.Summary()
	if sum.ControlPlaneStats == nil {
		return
	}
	series := sum.ControlPlaneStats.Metrics
	if ref, ok := s.CP.Metrics()[subject.StreamsRefused]; ok {
		var refused float64
		found := false
		for _, sr := range series {
			if ref.Matches(sr.Name, sr.Labels) {
				refused, found = refused+observe.CounterIncrease(sr.Samples), true
			}
		}
		if found {
			s.Event("cp.streams-refused", s.CP.Name(), fmt.Sprintf("%.0f xDS streams refused while the control plane was not ready", refused))
		}
	}
	if ref, ok := s.CP.Metrics()[subject.TimeToReady]; ok {
		if v, found := observe.Last(series, ref); found {
			s.Event("cp.time-to-ready", s.CP.Name(), fmt.Sprintf("%.2f s from the last start of the process to ready (its own metric)", v))
		}
	}
}
