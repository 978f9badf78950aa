// Package reuse lends one cluster to a series of runs (a suite, an upgrade-check), one run at a
// time, instead of bringing a cluster up and down for each: every run gets namespaces of its own
// (its workloads' and its control plane's, created for it) and its own control plane, and when it
// ends its objects are deleted and the cluster is checked against what it held when it came up
// before the next run may have it. A cluster that fails the check (something of the run is left:
// a namespace, a pod, a cluster-scoped object, a node's changed CPU quota) is torn down and the
// next run gets a new one, so a run never inherits another's leftovers.
//
// A Pool wraps a substrate whose clusters are the run's own (local, kind); a shared cluster
// (existing) has its own per-run namespaces already and is not pooled.
package reuse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/meshchaos/meshchaos/harness/cluster"
)

// Pool holds at most one cluster of its substrate and lends it to one run at a time. Its
// methods are safe for concurrent use; runs are expected one after the other.
type Pool struct {
	inner cluster.Substrate
	name  string
	ops   ops

	mu       sync.Mutex
	held     cluster.Cluster
	nodes    int
	base     *Snapshot
	lent     bool
	logf     func(string, ...any) // the current run's, for the held cluster's own messages
	plan     []Planned            // the series' runs in order (nil: not known)
	ups      int                  // clusters brought up
	reused   int                  // runs that got a cluster a previous run had used
	discards []string             // why clusters were torn down before Close
}

// New returns a pool of clusters of inner named name (the name every cluster it brings up
// gets; each run is named name-rK on it, see Run).
func New(inner cluster.Substrate, name string) *Pool {
	return &Pool{inner: inner, name: name, ops: ops{snapshot: takeSnapshot, claim: claimNamespaces, cleanup: deleteRun, check: compare}}
}

// Planned is a run of the series: its number (Run's k) and the nodes it will ask for.
type Planned struct {
	K, Nodes int
}

// Plan tells the pool the series' runs, in order: a run after which no run comes, or the next
// asks for another number of nodes, has its cluster torn down when it ends instead of cleaned
// for a run that could not use it.
func (p *Pool) Plan(runs []Planned) {
	p.mu.Lock()
	p.plan = append([]Planned(nil), runs...)
	p.mu.Unlock()
}

// lastOfItsSize says whether no run of the plan after run k can use its cluster, and why.
func (p *Pool) lastOfItsSize(k int) (bool, string) {
	for i, r := range p.plan {
		if r.K != k {
			continue
		}
		if i == len(p.plan)-1 {
			return true, "the last run"
		}
		if next := p.plan[i+1]; next.Nodes != r.Nodes {
			return true, fmt.Sprintf("the next run needs %d node(s), not %d", next.Nodes, r.Nodes)
		}
		return false, ""
	}
	return false, ""
}

// Run is the substrate run k (1-based) of the series uses: its Up lends the pool's cluster
// (bringing one up when the pool holds none of the size asked for) with the run's namespaces
// created, and the lent cluster's Down gives it back clean. It is a cluster.Shared substrate:
// the run's workloads go to a namespace of its own rather than "default".
func (p *Pool) Run(k int) cluster.Substrate {
	return &runSubstrate{pool: p, k: k, run: fmt.Sprintf("%s-r%d", p.name, k)}
}

// ops are what the pool does to a cluster through its API (tests replace them).
type ops struct {
	// snapshot records a new cluster's baseline.
	snapshot func(ctx context.Context, c cluster.Cluster) (*Snapshot, error)
	// claim creates a run's namespaces.
	claim func(ctx context.Context, c cluster.Cluster, run string, namespaces []string) error
	// cleanup deletes what a run created.
	cleanup func(ctx context.Context, c cluster.Cluster, run string, namespaces []string, base *Snapshot) error
	// check lists what the cluster holds that its baseline did not, once deletions under way are
	// over (waited: what it waited for).
	check func(ctx context.Context, c cluster.Cluster, base *Snapshot) (left, waited []string, err error)
}

// Stats says how the pool served its runs.
type Stats struct {
	// Clusters is how many clusters the pool brought up; Reused how many runs got a cluster an
	// earlier run had used.
	Clusters, Reused int
	// Discarded says why each cluster torn down before Close was not lent again.
	Discarded []string
}

// Stats says how the pool has served its runs so far.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Clusters: p.ups, Reused: p.reused, Discarded: append([]string(nil), p.discards...)}
}

// Close tears down the cluster the pool holds, if any. A run still holding it loses it.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	c := p.held
	p.held, p.base, p.lent = nil, nil, false
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Down(ctx)
}

// logf reports through the current run's log.
func (p *Pool) log(format string, args ...any) {
	p.mu.Lock()
	f := p.logf
	p.mu.Unlock()
	if f != nil {
		f(format, args...)
	}
}

// acquire lends the held cluster to run, or brings one up.
func (p *Pool) acquire(ctx context.Context, run string, spec cluster.Spec) (cluster.Cluster, bool, error) {
	p.mu.Lock()
	if p.lent {
		p.mu.Unlock()
		return nil, false, fmt.Errorf("run %s: the pool's cluster %s is lent to another run", run, p.name)
	}
	p.lent, p.logf = true, spec.Logf
	held, nodes := p.held, p.nodes
	p.mu.Unlock()
	if held != nil && nodes == spec.Nodes {
		p.mu.Lock()
		p.reused++
		p.mu.Unlock()
		return held, true, nil
	}
	if held != nil {
		p.discard(ctx, fmt.Sprintf("run %s needs %d node(s), the cluster had %d", run, spec.Nodes, nodes))
	}
	c, err := p.inner.Up(ctx, cluster.Spec{Name: p.name, Nodes: spec.Nodes, Logf: p.log})
	if err != nil {
		p.release()
		return nil, false, err
	}
	base, err := p.ops.snapshot(ctx, c)
	if err != nil {
		p.release()
		return nil, false, errors.Join(fmt.Errorf("record the new cluster's baseline: %w", err), c.Down(context.WithoutCancel(ctx)))
	}
	p.mu.Lock()
	p.held, p.nodes, p.base = c, spec.Nodes, base
	p.ups++
	p.mu.Unlock()
	return c, false, nil
}

// release ends a loan.
func (p *Pool) release() {
	p.mu.Lock()
	p.lent, p.logf = false, nil
	p.mu.Unlock()
}

// discard tears the held cluster down (why says why) so that the next run gets a new one.
func (p *Pool) discard(ctx context.Context, why string) error {
	p.mu.Lock()
	c := p.held
	p.held, p.base = nil, nil
	p.discards = append(p.discards, why)
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	p.log("cluster %s not lent again: %s: tearing it down", p.name, why)
	return c.Down(context.WithoutCancel(ctx))
}

// giveBack takes the cluster back from run: the run's objects deleted, the cluster checked
// against its baseline, and torn down when it differs or cannot be checked.
func (p *Pool) giveBack(ctx context.Context, k int, run string, namespaces []string) error {
	defer p.release()
	p.mu.Lock()
	c, base := p.held, p.base
	done, why := p.lastOfItsSize(k)
	if done {
		p.held, p.base = nil, nil
	}
	p.mu.Unlock()
	if c == nil {
		return nil // closed under the run
	}
	if done {
		p.log("cluster %s: no run after %s can use it (%s): tearing it down", p.name, run, why)
		return c.Down(context.WithoutCancel(ctx))
	}
	start := time.Now()
	if err := p.ops.cleanup(ctx, c, run, namespaces, base); err != nil {
		return p.discard(ctx, fmt.Sprintf("the run %s's objects could not be deleted: %v", run, err))
	}
	deleted := time.Now()
	left, waited, err := p.ops.check(ctx, c, base)
	if err != nil {
		return p.discard(ctx, fmt.Sprintf("the cluster could not be checked after run %s: %v", run, err))
	}
	if len(left) > 0 {
		return p.discard(ctx, fmt.Sprintf("run %s left %v", run, left))
	}
	p.log("cluster %s: the run's objects deleted in %s, the cluster as it came up %s later (the last to go: %s); kept for the next run",
		p.name, deleted.Sub(start).Round(100*time.Millisecond), time.Since(deleted).Round(100*time.Millisecond), abbreviate(waited, 6))
	return nil
}

// runSubstrate is the substrate of one run of the pool.
type runSubstrate struct {
	pool *Pool
	k    int
	run  string
}

var _ cluster.Shared = (*runSubstrate)(nil)

// Name implements cluster.Substrate: the inner substrate's, so that a pooled run's summary names
// where it ran as an unpooled one's does.
func (s *runSubstrate) Name() string { return s.pool.inner.Name() }

// WorkloadNamespace implements cluster.Shared: the run's own.
func (s *runSubstrate) WorkloadNamespace() string { return s.run }

// Up implements cluster.Substrate: the pool's cluster, lent, with the run's namespaces created
// for it (refused when one exists: it would be another run's).
func (s *runSubstrate) Up(ctx context.Context, spec cluster.Spec) (cluster.Cluster, error) {
	c, reused, err := s.pool.acquire(ctx, s.run, spec)
	if err != nil {
		return nil, err
	}
	l := &lease{Cluster: c, pool: s.pool, k: s.k, run: s.run, reused: reused}
	if err := s.pool.ops.claim(ctx, c, s.run, spec.Namespaces); err != nil {
		return nil, errors.Join(err, l.Down(ctx))
	}
	l.namespaces = spec.Namespaces
	if reused {
		s.pool.log("cluster %s reused for run %s (namespaces %v)", s.pool.name, s.run, spec.Namespaces)
	}
	if h, ok := c.(cluster.ImageHolder); ok {
		return &imageLease{lease: l, ImageHolder: h}, nil
	}
	return l, nil
}

// lease is the pool's cluster as one run sees it: named for the run (the owner label of what it
// creates), given back instead of torn down.
type lease struct {
	cluster.Cluster
	pool       *Pool
	k          int
	run        string
	reused     bool
	namespaces []string
	once       sync.Once
	err        error
}

// imageLease is a lease of a cluster that can be given the host's images.
type imageLease struct {
	*lease
	cluster.ImageHolder
}

// Name implements cluster.Cluster: the run's name.
func (l *lease) Name() string { return l.run }

// LentFrom implements cluster.Lent: the pool's cluster, and whether an earlier run had it.
func (l *lease) LentFrom() (string, bool) { return l.pool.name, l.reused }

var _ cluster.Lent = (*lease)(nil)

// Down implements cluster.Cluster: the run's objects deleted, the cluster checked and kept for
// the next run (or torn down when something of this one is left). Safe to call twice.
func (l *lease) Down(ctx context.Context) error {
	l.once.Do(func() { l.err = l.pool.giveBack(ctx, l.k, l.run, l.namespaces) })
	return l.err
}

// abbreviate lists at most n of items, saying how many more there are.
func abbreviate(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}
