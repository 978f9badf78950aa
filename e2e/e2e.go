// Package e2e makes meshchaos's experiments usable as sigs.k8s.io/e2e-framework features in a
// user's own `go test` suite. The environment's cluster comes from the kit's providers
// (CreateCluster: the local substrate as an e2e-framework cluster provider); Feature runs one
// experiment of the catalog on it, with the experiment's own checks as the feature's assessment.
//
//	var testenv env.Environment
//
//	func TestMain(m *testing.M) {
//		testenv = env.New()
//		testenv.Setup(e2e.CreateCluster("mine", 2)).Finish(e2e.DestroyCluster("mine"))
//		os.Exit(testenv.Run(m))
//	}
//
//	func TestFlap(t *testing.T) {
//		testenv.Test(t, e2e.Feature("endpoint-flap", "proxies=20", "flapFor=20s"))
//	}
//
// One experiment per cluster at a time: an experiment deploys its control plane and mesh into
// the cluster and leaves removing them to the cluster's teardown.
package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/envfuncs"
	"sigs.k8s.io/e2e-framework/pkg/features"
	"sigs.k8s.io/e2e-framework/support"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/kind"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
)

// clusterKey holds the environment's cluster (an envCluster) in the context.
type clusterKey struct{}

// envCluster is the environment's cluster (the substrate seam's view of it) and its substrate.
type envCluster struct {
	c         cluster.Cluster
	substrate string
}

// CreateCluster creates the environment's cluster with the local provider (nodes worker nodes,
// images from MESHCHAOS_IMAGES or `make images`) and makes it the cluster Feature runs on.
func CreateCluster(name string, nodes int, opts ...local.Option) env.Func {
	p := local.NewProvider(append([]local.Option{local.WithNodes(nodes)}, opts...)...)
	return createWith(p, name, "local", func() cluster.Cluster { return p.Cluster() })
}

// CreateKindCluster is CreateCluster on the kind substrate (Docker; see harness/cluster/kind).
func CreateKindCluster(name string, nodes int, opts ...kind.Option) env.Func {
	p := kind.NewProvider(append([]kind.Option{kind.WithNodes(nodes)}, opts...)...)
	return createWith(p, name, "kind", func() cluster.Cluster { return p.Cluster() })
}

func createWith(p support.E2EClusterProvider, name, substrate string, created func() cluster.Cluster) env.Func {
	create := envfuncs.CreateCluster(p, name)
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		ctx, err := create(ctx, cfg)
		if err != nil {
			return ctx, fmt.Errorf("meshchaos e2e: create cluster %s: %w", name, err)
		}
		return context.WithValue(ctx, clusterKey{}, envCluster{created(), substrate}), nil
	}
}

// DestroyCluster tears the environment's cluster down (every process, namespace, cgroup and
// container it started).
func DestroyCluster(name string) env.Func { return envfuncs.DestroyCluster(name) }

// ClusterFrom returns the cluster CreateCluster put into the context.
func ClusterFrom(ctx context.Context) (cluster.Cluster, bool) {
	e, ok := ctx.Value(clusterKey{}).(envCluster)
	return e.c, ok && e.c != nil
}

// Options adjust a feature beyond the experiment's parameters.
type Options struct {
	// ControlPlane is the control plane under test as --cp spells it (default "reference").
	ControlPlane string
	// Expect is the verdict the feature asserts (default pass; fail for a regression switch the
	// experiment must catch).
	Expect results.Verdict
	// Failing names the checks a fail must fail, and no other (see results.Expect): required
	// with Expect fail, so that a run that fails for another reason is not taken for the bug.
	Failing []string
	// Timeout bounds the run (default 30 minutes).
	Timeout time.Duration
	// Dir is where the run directory goes (default a new temporary directory, removed when the
	// feature passes and kept, with its path logged, when it does not).
	Dir string
}

// Feature runs experiment name with parameters sets (name=value, as --set takes them) against
// the reference control plane on the environment's cluster and asserts that it passes; the
// failed checks are the test's errors and the run directory (summary.json, report) is kept.
func Feature(name string, sets ...string) features.Feature {
	return FeatureWith(name, Options{}, sets...)
}

// FeatureWith is Feature with options: another control plane, an expected failure.
func FeatureWith(name string, o Options, sets ...string) features.Feature {
	if o.ControlPlane == "" {
		o.ControlPlane = "reference"
	}
	if o.Expect == "" {
		o.Expect = results.VerdictPass
	}
	expect := results.Expect{Verdict: o.Expect, Failing: o.Failing}
	if err := expect.Validate(); err != nil {
		panic("e2e.FeatureWith " + name + ": " + err.Error())
	}
	if o.Expect == results.VerdictFail && len(o.Failing) == 0 {
		panic("e2e.FeatureWith " + name + ": expect fail names no check (Options.Failing): a run failing for another reason would count as caught")
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Minute
	}
	title := name
	if len(sets) > 0 {
		title += " " + strings.Join(sets, " ")
	}
	return features.New(title).
		WithLabel("meshchaos.experiment", name).
		WithLabel("meshchaos.controlPlane", o.ControlPlane).
		Assess(fmt.Sprintf("%s against %s gives %s", name, o.ControlPlane, o.Expect), func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			t.Helper()
			s, dir, err := run(ctx, t, name, o, sets)
			if err != nil {
				t.Fatalf("meshchaos e2e: %s: %v", name, err)
			}
			if miss := expect.Judge(s.Verdict, s.Checks); miss != "" {
				for _, c := range s.Checks {
					if !c.Pass {
						t.Errorf("check failed: %s", c.String())
					}
				}
				if s.Error != "" {
					t.Errorf("run error: %s", s.Error)
				}
				t.Errorf("%s against %s: %s (run directory %s)", name, o.ControlPlane, miss, dir)
				return ctx
			}
			t.Logf("%s against %s: %s as expected (%d checks)", name, o.ControlPlane, s.Verdict, len(s.Checks))
			if o.Dir == "" {
				os.RemoveAll(dir)
			}
			return ctx
		}).Feature()
}

// run resolves and runs the experiment on the environment's cluster.
func run(ctx context.Context, t *testing.T, name string, o Options, sets []string) (results.Summary, string, error) {
	e, _ := ctx.Value(clusterKey{}).(envCluster)
	if e.c == nil {
		return results.Summary{}, "", fmt.Errorf("no meshchaos cluster in the environment: set it up with e2e.CreateCluster or e2e.CreateKindCluster")
	}
	d, ok := experiments.Lookup(name)
	if !ok {
		return results.Summary{}, "", fmt.Errorf("unknown experiment %q (see 'meshchaos list')", name)
	}
	v, err := d.Resolve(sets)
	if err != nil {
		return results.Summary{}, "", err
	}
	sut, err := subject.Parse(o.ControlPlane)
	if err != nil {
		return results.Summary{}, "", fmt.Errorf("Options.ControlPlane: %w", err)
	}
	exp, err := d.Build(kit.Env{Substrate: given{e.c, e.substrate}, ControlPlane: sut}, v)
	if err != nil {
		return results.Summary{}, "", err
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "meshchaos-e2e-"); err != nil {
			return results.Summary{}, "", err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	s, err := runner.Execute(ctx, exp, runner.Options{Dir: dir, Progress: runner.NewProgress(logWriter{t})})
	if s.Verdict == "" {
		return s, dir, fmt.Errorf("the run wrote no verdict (run directory %s): %w", dir, err)
	}
	return s, dir, nil
}

// given is a cluster.Substrate whose Up hands out the environment's cluster: the experiment runs
// on it, and its teardown leaves the cluster to the environment's DestroyCluster.
type given struct {
	c         cluster.Cluster
	substrate string
}

// Name is the substrate the environment's cluster is on, as summaries name it.
func (g given) Name() string { return g.substrate }

// used names the clusters an experiment already ran on: what it deployed is still there, and a
// second experiment would measure (and be confused by) it.
var used sync.Map

func (g given) Up(_ context.Context, s cluster.Spec) (cluster.Cluster, error) {
	if _, dup := used.LoadOrStore(g.c.Name(), true); dup {
		return nil, fmt.Errorf("the environment's cluster %s already ran an experiment, whose control plane and mesh are still on it: give each experiment an environment (a cluster) of its own", g.c.Name())
	}
	if n := len(g.c.Nodes()); n < s.Nodes {
		return nil, fmt.Errorf("the experiment needs %d nodes, the environment's cluster %s has %d: create it with more (e2e.CreateCluster(name, %d))", s.Nodes, g.c.Name(), n, s.Nodes)
	}
	if h, ok := g.c.(cluster.ImageHolder); ok {
		return keptHolder{kept{g.c}, h}, nil
	}
	return kept{g.c}, nil
}

// kept is the environment's cluster with Down left to the environment.
type kept struct{ cluster.Cluster }

func (kept) Down(context.Context) error { return nil }

// keptHolder is a kept cluster that can still be given images (kind: Envoy from Docker).
type keptHolder struct {
	kept
	cluster.ImageHolder
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
