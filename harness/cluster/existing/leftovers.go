package existing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrNothingLeft is Remove's error for a run that left nothing on the cluster.
var ErrNothingLeft = errors.New("the run left nothing on the cluster")

// Leftovers is what one run left on an existing cluster (a run killed before its teardown, or
// one whose teardown failed), found by the run's owner label: everything a run creates carries
// it, and nothing else does.
type Leftovers struct {
	// Run is the run's name (its cluster name, the value of RunLabel).
	Run string
	// Namespaces the run created.
	Namespaces []string
	// ClusterScoped are the cluster-scoped objects the run created, as "Kind name".
	ClusterScoped []string
	// NodeLabels are the nodes whose cluster.NodeLabel the run set (LabelledByAnnotation).
	NodeLabels []string
}

// String lists the leftovers on one line.
func (l Leftovers) String() string {
	var parts []string
	if len(l.Namespaces) > 0 {
		parts = append(parts, "namespaces "+strings.Join(l.Namespaces, ", "))
	}
	parts = append(parts, l.ClusterScoped...)
	if len(l.NodeLabels) > 0 {
		parts = append(parts, "its node labels on "+strings.Join(l.NodeLabels, ", "))
	}
	return strings.Join(parts, "; ")
}

// Leftovers lists, by run in name order, what run (every run when run is "") left on the
// cluster the kubeconfig names. It writes nothing.
func (p Substrate) Leftovers(ctx context.Context, run string) ([]Leftovers, error) {
	c, err := p.connect(run, nil)
	if err != nil {
		return nil, err
	}
	return c.leftovers(ctx, run)
}

// Remove removes what run left on the cluster, as the run's own Down would have (same order,
// same budget, same report of what stays), and only what carries run's owner label: its
// namespaces (their pods first), its cluster-scoped objects, the node labels it set. It returns
// what it found; ErrNothingLeft when that is nothing. Never for a run still running: its
// namespaces would go from under it.
func (p Substrate) Remove(ctx context.Context, run string, logf func(string, ...any)) (Leftovers, error) {
	if run == "" {
		return Leftovers{}, errors.New("remove a run's leftovers: no run name (everything would match)")
	}
	c, err := p.connect(run, logf)
	if err != nil {
		return Leftovers{Run: run}, err
	}
	return c.removeLeftovers(ctx)
}

// leftovers finds by owner label what run (every run: "") left.
func (c *existingCluster) leftovers(ctx context.Context, run string) ([]Leftovers, error) {
	byRun := map[string]*Leftovers{}
	of := func(r string) *Leftovers {
		if byRun[r] == nil {
			byRun[r] = &Leftovers{Run: r}
		}
		return byRun[r]
	}
	selector := RunLabel
	if run != "" {
		selector += "=" + run
	}
	nss, err := c.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list the namespaces of meshchaos runs (%s): %w", selector, err)
	}
	for _, ns := range nss.Items {
		l := of(ns.Labels[RunLabel])
		l.Namespaces = append(l.Namespaces, ns.Name)
	}
	owned, err := c.owned.ListOwned(ctx, run)
	if err != nil {
		return nil, fmt.Errorf("list the cluster-scoped objects of meshchaos runs: %w", err)
	}
	for r, objs := range owned {
		of(r).ClusterScoped = objs
	}
	nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		if by := n.Annotations[LabelledByAnnotation]; by != "" && (run == "" || by == run) {
			l := of(by)
			l.NodeLabels = append(l.NodeLabels, n.Name)
		}
	}
	var out []Leftovers
	for _, l := range byRun {
		sort.Strings(l.Namespaces)
		sort.Strings(l.NodeLabels)
		out = append(out, *l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Run < out[j].Run })
	return out, nil
}

// removeLeftovers makes c the run's cluster as Up left it (its namespaces, the nodes it
// labelled, the agent if it still runs: it reads kubelet logs for pods that stay) and runs Down.
func (c *existingCluster) removeLeftovers(ctx context.Context) (Leftovers, error) {
	found, err := c.leftovers(ctx, c.name)
	if err != nil {
		return Leftovers{Run: c.name}, err
	}
	if len(found) == 0 {
		return Leftovers{Run: c.name}, ErrNothingLeft
	}
	l := found[0]
	c.namespaces, c.labelled = l.Namespaces, l.NodeLabels
	if contains(l.Namespaces, AgentNamespace) {
		ds, err := c.client.AppsV1().DaemonSets(AgentNamespace).Get(ctx, agentName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return l, fmt.Errorf("read the run's agent DaemonSet: %w", err)
		}
		if err == nil {
			c.allow = ds.Spec.Template.Spec.HostPID // node access: the agent reads kubelet logs
		}
		pods, err := c.client.CoreV1().Pods(AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + agentName})
		if err != nil {
			return l, fmt.Errorf("list the run's agent pods: %w", err)
		}
		c.agents = map[string]string{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				c.agents[p.Spec.NodeName] = p.Name
				c.nodes = append(c.nodes, p.Spec.NodeName)
			}
		}
		sort.Strings(c.nodes)
	}
	return l, c.Down(ctx)
}
