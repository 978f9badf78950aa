package existing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshchaos/meshchaos/harness/cluster"
)

const (
	// DownBudget bounds the existing substrate's teardown. It is Down's own, not its caller's:
	// the runner's teardown budget (2 minutes) covers saving logs too, and a teardown cut short
	// leaves the run's namespaces on a cluster that is someone else's.
	DownBudget = 3 * time.Minute
	// PodGoneMargin is how long past its grace period a pod being deleted may stay before Down
	// reports it, naming its node: its kubelet has not confirmed it stopped.
	PodGoneMargin = 15 * time.Second
	// defaultGrace is the API server's default termination grace period.
	defaultGrace = 30 * time.Second
	// pollEvery paces Down's waits: one List per namespace per tick.
	pollEvery = 250 * time.Millisecond
)

func (c *existingCluster) log(format string, a ...any) {
	if c.logf != nil {
		c.logf(format, a...)
	}
}

var _ cluster.Keeper = (*existingCluster)(nil)

// Keep implements cluster.Keeper: everything the run made stays on the cluster (its namespaces
// with their pods, the agent, cluster-scoped objects, node labels), for 'cluster down
// --substrate existing NAME' (Substrate.Remove) to take away later; only this process's agent
// sessions and port-forwards end.
func (c *existingCluster) Keep(context.Context) (cluster.Kept, error) {
	c.closeSessions()
	return cluster.Kept{Kubeconfig: c.kubeconfig, Context: c.context}, nil
}

// closeSessions ends this process's agent sessions and port-forwards.
func (c *existingCluster) closeSessions() {
	c.mu.Lock()
	c.down = true
	for _, s := range c.sessions {
		s.close()
	}
	c.sessions = map[string]*session{}
	c.mu.Unlock()
	if c.fwd != nil {
		c.fwd.close()
	}
}

// Down implements cluster.Cluster, within its own budget (Substrate.DownBudget, else DownBudget;
// the caller's deadline is not its own). It deletes the cluster-scoped objects the run created
// (webhook configurations first), then the pods of the run's namespaces and waits for them,
// reporting by name and node (with the node's kubelet log when the agent can read it) every pod
// still there past its grace period and PodGoneMargin; then the agent (its DaemonSet before its
// pods), the namespaces, which it waits for, and the node labels the run set. The error lists
// everything it could not remove. Safe to call twice.
func (c *existingCluster) Down(ctx context.Context) error {
	c.closeSessions()
	budget := c.budget
	if budget <= 0 {
		budget = DownBudget
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	defer cancel()

	var errs []error
	deleted, err := c.owned.DeleteOwned(ctx, c.name)
	if err != nil {
		errs = append(errs, fmt.Errorf("delete the run's cluster-scoped objects: %w", err))
	}
	if len(deleted) > 0 {
		c.log("deleted the run's cluster-scoped objects: %s", strings.Join(deleted, ", "))
	}
	// Pods before namespaces: a pod its kubelet keeps is named with its node here rather than
	// hidden in a namespace stuck Terminating. Two thirds of the budget at most, so that the
	// namespaces are deleted even when pods stay.
	podCtx, podCancel := context.WithDeadline(ctx, start.Add(budget*2/3))
	defer podCancel()
	var workloads []string
	for _, ns := range c.namespaces {
		if ns != AgentNamespace {
			workloads = append(workloads, ns)
		}
	}
	errs = append(errs, c.deletePods(podCtx, workloads)...)
	if contains(c.namespaces, AgentNamespace) {
		// The agent last: it reads the kubelet logs above. Its DaemonSet first, or it replaces
		// the pods deleted.
		bg := metav1.DeletePropagationBackground
		err := c.client.AppsV1().DaemonSets(AgentNamespace).Delete(ctx, agentName, metav1.DeleteOptions{PropagationPolicy: &bg})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete the agent DaemonSet %s/%s: %w", AgentNamespace, agentName, err))
		}
		errs = append(errs, c.deletePods(podCtx, []string{AgentNamespace})...)
	}

	bg := metav1.DeletePropagationBackground
	for _, ns := range c.namespaces {
		err := c.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{PropagationPolicy: &bg})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", ns, err))
		}
	}
	for _, n := range c.labelled {
		if err := c.unlabelNode(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	c.labelled = nil
	// Gone, not just deleting: the next run's claim would be refused by a terminating namespace.
	for _, ns := range c.namespaces {
		for {
			_, err := c.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if ctx.Err() != nil {
				errs = append(errs, fmt.Errorf("namespace %s still terminating after the teardown's %s (%s)", ns, budget, c.whyTerminating(ns)))
				break
			}
			sleep(ctx, pollEvery)
		}
	}
	c.namespaces = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("the teardown of run %s left things on the cluster: %w\nremove them with 'meshchaos cluster down --substrate existing %s' (with the same kubeconfig and context) once the cause is fixed", c.name, err, c.name)
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// deletePods deletes every pod in namespaces and waits until they are gone. A pod still there
// past its grace period and the margin is reported at once, by name and node, and not waited
// for any longer: the namespace's deletion goes on without it. Pods still there when ctx ends
// are reported too.
func (c *existingCluster) deletePods(ctx context.Context, namespaces []string) []error {
	margin := c.podMargin
	if margin <= 0 {
		margin = PodGoneMargin
	}
	type pending struct {
		uid            types.UID
		deleted        time.Time
		grace          time.Duration
		namespace, pod string
	}
	left := map[string]pending{} // by namespace/name
	var errs []error
	for _, ns := range namespaces {
		pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("list the pods of namespace %s: %w", ns, err))
			continue
		}
		for _, p := range pods.Items {
			err := c.client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) { // gone, or another pod of that name
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("delete pod %s/%s: %w", ns, p.Name, err))
				continue
			}
			grace := defaultGrace
			if g := p.DeletionGracePeriodSeconds; g != nil {
				grace = time.Duration(*g) * time.Second
			} else if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
				grace = time.Duration(*g) * time.Second
			}
			left[ns+"/"+p.Name] = pending{p.UID, time.Now(), grace, ns, p.Name}
		}
	}
	for len(left) > 0 {
		// One list per namespace; a pod is gone when a list of its namespace lacks it.
		// Once ctx has ended, one last look with a short deadline of its own, to name the pods
		// left with their state.
		expired := ctx.Err() != nil
		lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		listed, still := map[string]bool{}, map[string]*corev1.Pod{}
		for _, ns := range namespaces {
			pods, err := c.client.CoreV1().Pods(ns).List(lctx, metav1.ListOptions{})
			if err != nil {
				continue // asked again next tick
			}
			listed[ns] = true
			for i, p := range pods.Items {
				if w, ok := left[ns+"/"+p.Name]; ok && w.uid == p.UID {
					still[ns+"/"+p.Name] = &pods.Items[i]
				}
			}
		}
		lcancel()
		var stuck []string
		for key, w := range left {
			switch p := still[key]; {
			case p == nil && listed[w.namespace]:
				delete(left, key)
			case p != nil && (time.Since(w.deleted) > w.grace+margin || expired):
				stuck = append(stuck, key)
			}
		}
		sort.Strings(stuck)
		for _, key := range stuck {
			p, w := still[key], left[key]
			err := fmt.Errorf("pod %s (%s) still there %s after its deletion (grace period %s): %s", key, podState(p), time.Since(w.deleted).Round(100*time.Millisecond), w.grace, c.kubeletExcerpt(p))
			c.log("%v", err)
			errs = append(errs, err)
			delete(left, key)
		}
		if len(left) == 0 {
			break
		}
		if expired {
			// Not even listed at the end: named without their state.
			var keys []string
			for key := range left {
				keys = append(keys, key)
			}
			sort.Strings(keys)
			errs = append(errs, fmt.Errorf("pod(s) %s: not seen gone by the end of the teardown's time for pods: %w", strings.Join(keys, ", "), ctx.Err()))
			break
		}
		sleep(ctx, pollEvery)
	}
	return errs
}

// podState says where a pod is and what keeps it: its node, phase, deletion and finalizers.
func podState(p *corev1.Pod) string {
	state := "node " + p.Spec.NodeName
	if p.Spec.NodeName == "" {
		state = "unscheduled"
	}
	state += ", " + string(p.Status.Phase)
	if p.DeletionTimestamp != nil {
		state += fmt.Sprintf(", deletion timestamp %s ago", time.Since(p.DeletionTimestamp.Time).Round(time.Second))
	}
	if len(p.Finalizers) > 0 {
		state += ", finalizers " + strings.Join(p.Finalizers, ",")
	}
	return state
}

// kubeletLogScript prints the lines of the node's kubelet log that name the pod ($1 its UID, $2
// its name): the journal's kubelet unit, the usual log files, and the file a running kubelet's
// standard error goes to (a kubelet started by hand, or by the local substrate).
const kubeletLogScript = `uid=$1 name=$2
{
  command -v journalctl >/dev/null 2>&1 && journalctl -u kubelet --no-pager -o cat --since -30min 2>/dev/null
  for f in /var/log/kubelet.log /var/log/kubelet/kubelet.log; do [ -f "$f" ] && tail -n 50000 "$f"; done
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = kubelet ] || continue
    f=$(readlink "$d/fd/2" 2>/dev/null)
    case "$f" in /*) [ -f "$f" ] && tail -n 50000 "$f";; esac
  done
} | grep -F -e "$uid" -e "$name" | tail -n 12`

// kubeletExcerpt is the end of the pod's node's kubelet log about the pod, read through the
// node's agent, or why there is none.
func (c *existingCluster) kubeletExcerpt(p *corev1.Pod) string {
	node := p.Spec.NodeName
	switch {
	case node == "":
		return "no kubelet log excerpt: the pod was never scheduled to a node"
	case !c.allow:
		return "no kubelet log excerpt: the agent has no node access (the run had no --allow-node-chaos); read the kubelet log on node " + node
	case c.agents[node] == "":
		return "no kubelet log excerpt: no agent on node " + node + " (the run's agents run on " + strings.Join(c.nodes, ", ") + ")"
	}
	// Its own deadline: Down's may be spent.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := c.runOnAgent(ctx, c.agents[node], "/"+agentBinary, "agent", "exec", "--", "sh", "-c", kubeletLogScript, "sh", string(p.UID), p.Name)
	text := strings.TrimSpace(string(out))
	switch {
	case err != nil && text == "":
		return fmt.Sprintf("no kubelet log excerpt: reading node %s's kubelet log through its agent failed: %v", node, err)
	case text == "":
		return fmt.Sprintf("no kubelet log excerpt: node %s's kubelet log (journal, /var/log/kubelet*.log, the kubelet's stderr file) has no line naming the pod", node)
	}
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if len(l) > 400 {
			l = l[:400] + "…"
		}
		lines = append(lines, "  "+l)
	}
	return fmt.Sprintf("kubelet on %s:\n%s", node, strings.Join(lines, "\n"))
}

// whyTerminating says what keeps namespace ns from going: its conditions that are true
// (content that cannot be deleted, finalizers left) and the pods still in it, for the error of
// a Down that ran out of time. It has its own short deadline: Down's has passed.
func (c *existingCluster) whyTerminating(ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var why []string
	if n, err := c.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
		for _, cond := range n.Status.Conditions {
			if cond.Status == corev1.ConditionTrue {
				why = append(why, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
			}
		}
	}
	pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return strings.Join(append(why, fmt.Sprintf("pods not listed: %v", err)), "; ")
	}
	for i, p := range pods.Items {
		if i == 3 {
			why = append(why, fmt.Sprintf("%d more pods", len(pods.Items)-i))
			break
		}
		why = append(why, fmt.Sprintf("pod %s (%s)", p.Name, podState(&p)))
	}
	if len(why) == 0 {
		return "no pods left, no condition set"
	}
	return strings.Join(why, "; ")
}

// unlabelNode removes the node label and annotation the run set on node, only if the annotation
// still names the run (another run, or the cluster's owner, may have labelled it since), and
// only on the version of the node it read (a conflict is read again).
func (c *existingCluster) unlabelNode(ctx context.Context, node string) error {
	for attempt := 0; ; attempt++ {
		n, err := c.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unlabel node %s: %w", node, err)
		}
		if by := n.Annotations[LabelledByAnnotation]; by != c.name {
			switch {
			case by != "":
				c.log("node %s: its %s label is run %s's now, not %s's: left as it is", node, cluster.NodeLabel, by, c.name)
			case n.Labels[cluster.NodeLabel] != "":
				c.log("node %s: its %s label was set by someone else since (it names no run): left as it is", node, cluster.NodeLabel)
			}
			return nil
		}
		patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{%q:null},"annotations":{%q:null}}}`, n.ResourceVersion, cluster.NodeLabel, LabelledByAnnotation)
		_, err = c.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err) && attempt < 3:
			continue
		}
		return fmt.Errorf("unlabel node %s (remove %s and the annotation %s): %w", node, cluster.NodeLabel, LabelledByAnnotation, err)
	}
}
