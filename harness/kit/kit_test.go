package kit

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/chaos"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/mesh"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
)

var testDef = Definition{
	Name: "test-exp",
	Params: params.Set{params.Rate, params.Length, params.Steady, params.Nodes,
		params.IntParam("replicas", 1, 1, 10, "", "backend replicas")},
	Validate: func(v params.Values) error {
		if v.Int("replicas") > 5 && v.Int("nodes") == 1 {
			return errors.New("replicas>5 needs 2 nodes")
		}
		return nil
	},
	Mesh: func(v params.Values) mesh.Spec {
		return mesh.Spec{Nodes: v.Int("nodes"), CP: subject.Placement{Node: 1},
			Backends: []mesh.Backend{{Name: "echo", Replicas: v.Int("replicas"), Node: 2}}}
	},
}

func TestResolveValidatesBeforeAnythingStarts(t *testing.T) {
	_, err := testDef.Resolve(nil)
	require.NoError(t, err)
	_, err = testDef.Resolve([]string{"replicas=6", "nodes=1"})
	assert.ErrorContains(t, err, "replicas>5 needs 2 nodes")
	_, err = testDef.Resolve([]string{"steady=90s"})
	assert.ErrorContains(t, err, "steady=90s must be shorter than duration=1m0s")
	_, err = testDef.Resolve([]string{"nodes=1"})
	assert.ErrorContains(t, err, "backend echo on node 2: the cluster has 1 node(s)", "the mesh is checked against the parameters")
	_, err = testDef.Resolve([]string{"rate=0"})
	assert.ErrorContains(t, err, "want a whole number from 1 to 10000 rps")
}

func TestMeshSpecAppliesTheControlPlaneLimits(t *testing.T) {
	def := testDef
	def.Params = append(params.Set{params.CPMemory, params.CPCPU}, testDef.Params...)
	v, err := def.Resolve([]string{"cpMemoryLimit=300Mi", "cpCPULimit=250m"})
	require.NoError(t, err)
	cp := def.MeshSpec(v).CP
	assert.Equal(t, "300Mi", cp.MemoryLimit)
	assert.Equal(t, "250m", cp.CPULimit)

	v, err = def.Resolve([]string{"cpCPULimit="})
	require.NoError(t, err)
	cp = def.MeshSpec(v).CP
	assert.Equal(t, params.CPMemory.Default, cp.MemoryLimit, "the parameter's default")
	assert.Empty(t, cp.CPULimit, `"" sets no limit`)

	// An experiment that shapes the control plane's resources itself keeps its placement.
	shaped := def
	shaped.Mesh = func(v params.Values) mesh.Spec {
		s := testDef.Mesh(v)
		s.CP.QoS = subject.QoSBestEffort
		return s
	}
	cp = shaped.MeshSpec(v).CP
	assert.Empty(t, cp.MemoryLimit)
	assert.Empty(t, cp.CPULimit)

	// Without the parameters, no limit of the harness's.
	v, err = testDef.Resolve(nil)
	require.NoError(t, err)
	cp = testDef.MeshSpec(v).CP
	assert.Empty(t, cp.MemoryLimit)
	assert.Empty(t, cp.CPULimit)
}

func TestBuildNeedsSubstrateAndControlPlane(t *testing.T) {
	v, err := testDef.Resolve(nil)
	require.NoError(t, err)
	_, err = testDef.Build(Env{}, v)
	assert.ErrorContains(t, err, "a substrate and a control plane under test are required")
}

func TestShortName(t *testing.T) {
	assert.Equal(t, "cpoo", shortName("cp-oom-restart"))
	assert.Equal(t, "ep", shortName("ep"))
}

// fault records what happened to it; its evidence is what it did.
type fault struct {
	name          string
	failInject    bool
	injected, clr int
	order         *[]string
}

func (f *fault) Name() string { return f.name }
func (f *fault) Inject(context.Context) (chaos.Evidence, error) {
	if f.failInject {
		return chaos.Evidence{}, errors.New("no effect")
	}
	f.injected++
	*f.order = append(*f.order, "inject "+f.name)
	return chaos.Evidence{At: time.Now(), Summary: f.name + " in force"}, nil
}
func (f *fault) Clear(context.Context) (chaos.Evidence, error) {
	f.clr++
	*f.order = append(*f.order, "clear "+f.name)
	return chaos.Evidence{At: time.Now(), Summary: f.name + " cleared"}, nil
}

// TestInjectedFaultsAreClearedNewestFirst: whatever the fault sequence does, every fault it
// injected is cleared when it ends (even when it fails), newest first, with evidence on the
// timeline; a fault that cannot take effect is an error, never silently skipped.
func TestInjectedFaultsAreClearedNewestFirst(t *testing.T) {
	var order []string
	a, b := &fault{name: "a", order: &order}, &fault{name: "b", order: &order}
	broken := &fault{name: "broken", failInject: true, order: &order}
	var injectErr error
	exp := runner.Experiment{Name: "faults", Phases: []runner.Phase{{Name: "chaos", Do: func(ctx context.Context, r *runner.Run) error {
		s := &State{Run: r}
		err := func() error {
			if err := s.Inject(ctx, a); err != nil {
				return err
			}
			if err := s.Inject(ctx, b); err != nil {
				return err
			}
			injectErr = s.Inject(ctx, broken)
			return injectErr
		}()
		return errors.Join(err, s.clearAll())
	}}}}
	s, err := runner.Execute(context.Background(), exp, runner.Options{Dir: t.TempDir(), Progress: runner.NewProgress(&bytes.Buffer{})})
	require.NoError(t, err)
	assert.ErrorContains(t, injectErr, "inject broken: no effect")
	assert.Equal(t, []string{"inject a", "inject b", "clear b", "clear a"}, order)
	assert.Equal(t, 0, broken.clr, "a fault that never took effect is not cleared")
	var timeline []string
	for _, e := range s.Events {
		if e.Kind == "chaos.injected" || e.Kind == "chaos.cleared" {
			timeline = append(timeline, e.Kind+" "+e.Object+": "+e.Detail)
		}
	}
	assert.Equal(t, []string{"chaos.injected a: a in force", "chaos.injected b: b in force", "chaos.cleared b: b cleared", "chaos.cleared a: a cleared"}, timeline)
	assert.Equal(t, "error", string(s.Verdict), "the phase failed")
}

// provider is a substrate that is never brought up: Build only looks at it.
type provider struct{ name string }

func (p provider) Name() string { return p.name }
func (provider) Up(context.Context, cluster.Spec) (cluster.Cluster, error) {
	return nil, errors.New("not in this test")
}

// sharedProvider is a cluster the run does not own (as the existing substrate).
type sharedProvider struct{ provider }

func (sharedProvider) WorkloadNamespace() string { return "meshchaos-workloads" }

// TestBuildAttached: a control plane installed before the run is refused on a cluster the run
// brings up (it holds none), and an experiment's faults on it need AllowCPChaos, listed.
func TestBuildAttached(t *testing.T) {
	cp, err := subject.NewInstalledIstiod()
	require.NoError(t, err)
	v, err := testDef.Resolve(nil)
	require.NoError(t, err)
	testDef := testDef
	testDef.Checks = func(params.Values) []runner.Check { return nil }
	faulty := testDef
	faulty.CPFaults = []string{"OOM-kills it", "starves it"}

	_, err = testDef.Build(Env{Substrate: provider{"local"}, ControlPlane: cp}, v)
	assert.ErrorContains(t, err, "istiod:installed attaches to a control plane installed already, and a cluster on substrate local is new and holds none: run it on the existing substrate (the cluster where it is installed), or let meshchaos install one (control plane istiod)")
	_, err = faulty.Build(Env{Substrate: sharedProvider{provider{"existing"}}, ControlPlane: cp}, v)
	assert.ErrorContains(t, err, "test-exp does this to the control plane, which is istiod:installed, installed before the run (not the run's own): OOM-kills it; starves it: control-plane chaos not allowed")
	assert.ErrorIs(t, err, ErrCPChaosNotAllowed)

	_, err = faulty.Build(Env{Substrate: sharedProvider{provider{"existing"}}, ControlPlane: cp, AllowCPChaos: true}, v)
	assert.NoError(t, err)
	_, err = testDef.Build(Env{Substrate: sharedProvider{provider{"existing"}}, ControlPlane: cp}, v)
	assert.NoError(t, err, "no fault on the control plane: nothing to allow")
	ref, err := subject.NewReference(nil)
	require.NoError(t, err)
	_, err = faulty.Build(Env{Substrate: sharedProvider{provider{"existing"}}, ControlPlane: ref}, v)
	assert.NoError(t, err, "the run's own control plane is the run's to fault")
}
