package reuse

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster"
)

// fakeSubstrate brings up fakeClusters and counts them.
type fakeSubstrate struct {
	mu     sync.Mutex
	up     []*fakeCluster
	failUp error
}

func (s *fakeSubstrate) Name() string { return "fake" }

func (s *fakeSubstrate) Up(_ context.Context, spec cluster.Spec) (cluster.Cluster, error) {
	if s.failUp != nil {
		return nil, s.failUp
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &fakeCluster{name: spec.Name, nodes: spec.Nodes}
	s.up = append(s.up, c)
	return c, nil
}

type fakeCluster struct {
	cluster.Cluster
	name  string
	nodes int
	downs int
}

func (c *fakeCluster) Name() string                   { return c.name }
func (c *fakeCluster) Down(ctx context.Context) error { c.downs++; return nil }

// fakeOps records what the pool asked of the cluster; left is what the next check finds.
type fakeOps struct {
	claimed  map[string][]string
	cleaned  []string
	left     []string
	checkErr error
}

func newPool(t *testing.T, s cluster.Substrate) (*Pool, *fakeOps) {
	t.Helper()
	f := &fakeOps{claimed: map[string][]string{}}
	p := New(s, "suite1")
	p.ops = ops{
		snapshot: func(context.Context, cluster.Cluster) (*Snapshot, error) { return &Snapshot{}, nil },
		claim: func(_ context.Context, _ cluster.Cluster, run string, nss []string) error {
			f.claimed[run] = nss
			return nil
		},
		cleanup: func(_ context.Context, _ cluster.Cluster, run string, _ []string, _ *Snapshot) error {
			f.cleaned = append(f.cleaned, run)
			return nil
		},
		check: func(context.Context, cluster.Cluster, *Snapshot) ([]string, []string, error) {
			left := f.left
			f.left = nil
			return left, left, f.checkErr
		},
	}
	return p, f
}

func TestRunsShareOneCluster(t *testing.T) {
	ctx := context.Background()
	s := &fakeSubstrate{}
	p, f := newPool(t, s)
	for k := 1; k <= 3; k++ {
		rs := p.Run(k)
		assert.Equal(t, "fake", rs.Name(), "a pooled run's substrate is named as the inner one")
		sh, ok := rs.(cluster.Shared)
		require.True(t, ok, "a pooled run keeps its workloads in a namespace of its own")
		c, err := rs.Up(ctx, cluster.Spec{Name: "ignored", Nodes: 2, Namespaces: []string{sh.WorkloadNamespace(), "istio-system"}})
		require.NoError(t, err)
		assert.Equal(t, sh.WorkloadNamespace(), c.Name(), "the run's objects are labelled with its own name")
		l, ok := c.(cluster.Lent)
		require.True(t, ok, "the run's timeline can name the cluster it borrowed")
		name, reused := l.LentFrom()
		assert.Equal(t, "suite1", name)
		assert.Equal(t, k > 1, reused, "run %d", k)
		require.NoError(t, c.Down(ctx))
		require.NoError(t, c.Down(ctx), "Down twice is safe")
	}
	require.Len(t, s.up, 1, "three runs, one cluster")
	assert.Equal(t, "suite1", s.up[0].name)
	assert.Zero(t, s.up[0].downs, "given back, not torn down")
	assert.Equal(t, []string{"suite1-r1", "suite1-r2", "suite1-r3"}, f.cleaned, "each run's objects deleted once")
	assert.Equal(t, []string{"suite1-r2", "istio-system"}, f.claimed["suite1-r2"])
	assert.Equal(t, Stats{Clusters: 1, Reused: 2}, p.Stats())
	require.NoError(t, p.Close(ctx))
	assert.Equal(t, 1, s.up[0].downs, "Close tears the held cluster down")
}

func TestALeftoverDiscardsTheCluster(t *testing.T) {
	ctx := context.Background()
	s := &fakeSubstrate{}
	p, f := newPool(t, s)
	c, err := p.Run(1).Up(ctx, cluster.Spec{Nodes: 1})
	require.NoError(t, err)
	f.left = []string{"Pod kube-system/hog"}
	require.NoError(t, c.Down(ctx))
	assert.Equal(t, 1, s.up[0].downs, "a cluster that holds something of the run is torn down")
	c, err = p.Run(2).Up(ctx, cluster.Spec{Nodes: 1})
	require.NoError(t, err)
	require.NoError(t, c.Down(ctx))
	require.Len(t, s.up, 2, "the next run gets a new cluster")
	st := p.Stats()
	assert.Equal(t, 2, st.Clusters)
	assert.Zero(t, st.Reused)
	require.Len(t, st.Discarded, 1)
	assert.Contains(t, st.Discarded[0], "Pod kube-system/hog")

	f.checkErr = errors.New("apiserver gone")
	c, err = p.Run(3).Up(ctx, cluster.Spec{Nodes: 1})
	require.NoError(t, err)
	require.NoError(t, c.Down(ctx))
	assert.Equal(t, 1, s.up[1].downs, "a cluster that cannot be checked is torn down too")
}

func TestAClusterNoPlannedRunCanUseGoesAtOnce(t *testing.T) {
	ctx := context.Background()
	s := &fakeSubstrate{}
	p, f := newPool(t, s)
	p.Plan([]Planned{{K: 1, Nodes: 2}, {K: 2, Nodes: 2}, {K: 3, Nodes: 1}, {K: 5, Nodes: 1}})
	for _, r := range []Planned{{1, 2}, {2, 2}, {3, 1}, {5, 1}} {
		c, err := p.Run(r.K).Up(ctx, cluster.Spec{Nodes: r.Nodes})
		require.NoError(t, err)
		require.NoError(t, c.Down(ctx))
	}
	require.Len(t, s.up, 2)
	assert.Equal(t, 1, s.up[0].downs, "the 2-node cluster goes when the next run needs 1 node")
	assert.Equal(t, 1, s.up[1].downs, "the last run's cluster goes at its end")
	assert.Equal(t, []string{"suite1-r1", "suite1-r3"}, f.cleaned, "nothing cleaned for a run that could not use it")
	assert.Equal(t, Stats{Clusters: 2, Reused: 2}, p.Stats(), "neither counts as a cluster something was left on")
	require.NoError(t, p.Close(ctx))
	assert.Equal(t, 1, s.up[1].downs, "Close has nothing left to tear down")
}

func TestAnotherSizeGetsANewCluster(t *testing.T) {
	ctx := context.Background()
	s := &fakeSubstrate{}
	p, _ := newPool(t, s)
	c, err := p.Run(1).Up(ctx, cluster.Spec{Nodes: 1})
	require.NoError(t, err)
	require.NoError(t, c.Down(ctx))
	c, err = p.Run(2).Up(ctx, cluster.Spec{Nodes: 2})
	require.NoError(t, err)
	require.Len(t, s.up, 2)
	assert.Equal(t, 1, s.up[0].downs, "the 1-node cluster made way")
	assert.Equal(t, 2, s.up[1].nodes)
	require.NoError(t, c.Down(ctx))
	require.NoError(t, p.Close(ctx))
	assert.Equal(t, 1, s.up[1].downs)
}

func TestOneRunAtATime(t *testing.T) {
	ctx := context.Background()
	p, _ := newPool(t, &fakeSubstrate{})
	c, err := p.Run(1).Up(ctx, cluster.Spec{Nodes: 1})
	require.NoError(t, err)
	_, err = p.Run(2).Up(ctx, cluster.Spec{Nodes: 1})
	require.ErrorContains(t, err, "lent to another run")
	require.NoError(t, c.Down(ctx))
	c, err = p.Run(2).Up(ctx, cluster.Spec{Nodes: 1})
	require.NoError(t, err, "lent again once given back")
	require.NoError(t, c.Down(ctx))
}

func TestAFailedBringUpLendsNothing(t *testing.T) {
	ctx := context.Background()
	s := &fakeSubstrate{failUp: errors.New("no etcd")}
	p, _ := newPool(t, s)
	_, err := p.Run(1).Up(ctx, cluster.Spec{Nodes: 1})
	require.ErrorContains(t, err, "no etcd")
	s.failUp = nil
	c, err := p.Run(2).Up(ctx, cluster.Spec{Nodes: 1})
	require.NoError(t, err, "the failed run did not keep the pool")
	require.NoError(t, c.Down(ctx))
}

func TestDiff(t *testing.T) {
	assert.Equal(t, []string{"namespace r1", "namespace default gone"},
		diff("namespace ", []string{"kube-system", "r1"}, []string{"default", "kube-system"}))
	assert.Empty(t, diff("", []string{"a"}, []string{"a"}))
}
