// Package existing is the substrate for a Kubernetes cluster that already exists and is not the
// run's own (a staging cluster, a shared CI cluster): the harness has only a kubeconfig.
//
//   - Namespaces: the run creates its namespaces (cluster.Spec.Namespaces, the workloads'
//     WorkloadNamespace instead of "default", and AgentNamespace), labelled with the run's name,
//     and deletes them in Down. It refuses to start when any of them exists already, saying whose
//     it is. It never writes to another namespace. Cluster-scoped objects the control plane under
//     test needs (its CRDs, ClusterRoles, webhook configurations) are created when absent,
//     labelled with the run's name, and otherwise used as the cluster has them (kube.Apply: a
//     CRD of another version is reported, never overwritten); Down deletes the cluster-scoped
//     objects that carry the run's label and nothing else.
//   - Nodes: node k is the node labelled meshchaos.io/node=k when the cluster's owner labelled
//     nodes 1..N (discovered, left as they are). A run with node access needs those labels: its
//     faults land only on nodes the owner chose. Without node access and labels, the first N
//     Ready, schedulable, untainted nodes by name are labelled for the run's pods and
//     unlabelled in Down.
//   - Images: nothing is pulled or loaded; every node must already hold the meshchaos images
//     (meshchaos.local/NAME:dev, imagePullPolicy Never). Up checks the nodes' image lists and
//     names what is missing.
//   - The agent: a DaemonSet on the run's nodes running `meshchaos agent` from the echo image
//     (every meshchaos image holds the meshchaos binary). The harness reaches it through the API
//     server's pod exec only: it dials pod IPs and ClusterIPs from its node (Dialer), and, when
//     node chaos is allowed, it runs with the node's PID and network namespaces and the
//     capabilities to find and write cgroups and run node tools (kube-proxy throttle, node CPU
//     budgets, pods' memory and CPU, iptables-save). Without AllowNodeChaos it has no privilege
//     and those methods say so.
package existing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/existing/agent"
	"github.com/meshchaos/meshchaos/harness/kube"
	imgs "github.com/meshchaos/meshchaos/images"
)

const (
	// WorkloadNamespace holds the mesh's workloads on an existing cluster.
	WorkloadNamespace = "meshchaos-workloads"
	// AgentNamespace holds the agent DaemonSet.
	AgentNamespace = "meshchaos-agent"
	// RunLabel marks a namespace (value: the run's cluster name) as created by a meshchaos run;
	// on a node, LabelledByAnnotation says which run set its cluster.NodeLabel.
	RunLabel             = kube.OwnerLabel
	LabelledByAnnotation = "meshchaos.io/labelled-by"

	agentName   = "meshchaos-agent"
	agentBinary = imgs.Self
	// agentImage is the image the agent runs from: every workload image holds /meshchaos (the
	// control plane's holds only its own binary).
	agentImage = "echo"
)

// ErrNodeChaosNotAllowed is returned by the methods that need node access when the run did not
// allow it (Substrate.AllowNodeChaos, the CLI's --allow-node-chaos).
var ErrNodeChaosNotAllowed = errors.New("node access is not allowed on this existing cluster (it needs the privileged agent, which the run did not allow)")

// ErrNoKubeconfig is why RESTConfig fails when no kubeconfig was named (Substrate.Kubeconfig, the
// CLI's --kubeconfig) and kubectl's defaults find none.
var ErrNoKubeconfig = errors.New("the existing substrate needs the cluster's kubeconfig")

// Substrate is the existing substrate.
type Substrate struct {
	// Kubeconfig is the path of the kubeconfig; Context picks one of its contexts ("" = current).
	Kubeconfig, Context string
	// AllowNodeChaos runs the agent with node access (cgroups, node tools).
	AllowNodeChaos bool
	// DownBudget bounds the run's teardown (0: DownBudget).
	DownBudget time.Duration
}

var (
	_ cluster.Shared    = Substrate{}
	_ cluster.NodePaths = (*existingCluster)(nil)
)

// Name implements cluster.Substrate.
func (Substrate) Name() string { return "existing" }

// WorkloadNamespace implements cluster.Shared.
func (Substrate) WorkloadNamespace() string { return WorkloadNamespace }

// RESTConfig reads the kubeconfig as kubectl does: Kubeconfig when given, else the files
// $KUBECONFIG lists (merged), else ~/.kube/config; Context picks one of its contexts ("" =
// current). Errors say which file or context is wrong, on one line; ErrNoKubeconfig when there
// is none.
func (p Substrate) RESTConfig() (*rest.Config, error) {
	rules, source := &clientcmd.ClientConfigLoadingRules{ExplicitPath: p.Kubeconfig}, "kubeconfig "+p.Kubeconfig
	if p.Kubeconfig == "" {
		rules = clientcmd.NewDefaultClientConfigLoadingRules()
		var found []string
		for _, f := range rules.GetLoadingPrecedence() {
			if _, err := os.Stat(f); err == nil {
				found = append(found, f)
			}
		}
		env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar)
		switch {
		case len(found) == 0 && env != "":
			return nil, fmt.Errorf("%w and $KUBECONFIG (%s) names no file that exists: fix $KUBECONFIG or name the kubeconfig file", ErrNoKubeconfig, env)
		case len(found) == 0:
			return nil, fmt.Errorf("%w: name its file, set $KUBECONFIG, or create %s", ErrNoKubeconfig, clientcmd.RecommendedHomeFile)
		case env != "":
			source = "$KUBECONFIG " + strings.Join(found, string(os.PathListSeparator))
		default:
			source = "kubeconfig " + found[0]
		}
	} else if _, err := os.ReadFile(p.Kubeconfig); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", p.Kubeconfig, err)
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: p.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %s", source, strings.ReplaceAll(err.Error(), "\n", " "))
	}
	return cfg, nil
}

// RequiredImages are the images every node must hold: the catalog's, less the local substrate's
// own (pause, coredns), which a real cluster brings.
func RequiredImages() []string {
	var out []string
	for _, s := range imgs.Catalog {
		if s.Name != "pause" && s.Name != "coredns" {
			out = append(out, s.Ref())
		}
	}
	return out
}

// Up implements cluster.Substrate: it claims the run's namespaces, maps nodes, checks images and
// starts the agent. On failure whatever it created is removed.
func (p Substrate) Up(ctx context.Context, s cluster.Spec) (cluster.Cluster, error) {
	logf := s.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	c, err := p.connect(s.Name, logf)
	if err != nil {
		return nil, err
	}
	c.allow = p.AllowNodeChaos
	c.fwd = &forwarder{c: c, pods: map[string]podRef{}, conns: map[string]httpstream.Connection{}, refused: map[string]bool{}, tried: map[string]bool{}, carried: map[string]bool{}}
	if err := c.up(ctx, s); err != nil {
		// Down has its own budget.
		if derr := c.Down(context.Background()); derr != nil {
			logf("clean up after a failed start: %v", derr)
		}
		return nil, err
	}
	return c, nil
}

// connect reads the kubeconfig, reaches the cluster and returns run's view of it, with nothing
// of the run's found or created yet.
func (p Substrate) connect(run string, logf func(string, ...any)) (*existingCluster, error) {
	cfg, err := p.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := client.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("reach the cluster at %s (kubeconfig %q, context %q): %w", cfg.Host, p.Kubeconfig, p.Context, err)
	}
	owned, err := kube.NewOwnedClients(cfg)
	if err != nil {
		return nil, err
	}
	c := &existingCluster{name: run, cfg: cfg, client: client, owned: owned, logf: logf, budget: p.DownBudget, kubeconfig: p.Kubeconfig, context: p.Context,
		exec: podExec{cfg: cfg, client: client, namespace: AgentNamespace, container: "agent"}, sessions: map[string]*session{}}
	c.runOnAgent = c.exec.run
	return c, nil
}

// existingCluster is an existing cluster as one run uses it.
type existingCluster struct {
	name string
	// kubeconfig and context are the run's --kubeconfig and --context ("": kubectl's defaults).
	kubeconfig, context string
	cfg                 *rest.Config
	client              kubernetes.Interface
	allow               bool
	logf                func(string, ...any)
	exec                podExec
	owned               kube.OwnedClients
	// runOnAgent runs argv in an agent pod (exec.run; a test's fake).
	runOnAgent func(ctx context.Context, pod string, argv ...string) ([]byte, error)
	// budget bounds Down (0: DownBudget); podMargin is how long past its grace period a pod
	// being deleted may stay before Down reports it (0: PodGoneMargin).
	budget, podMargin time.Duration

	nodes      []string          // node k-1
	agents     map[string]string // node name → agent pod
	namespaces []string          // created by this run
	labelled   []string          // nodes this run labelled

	fwd *forwarder

	mu       sync.Mutex
	sessions map[string]*session // node name → agent session
	down     bool
}

func (c *existingCluster) up(ctx context.Context, s cluster.Spec) error {
	if s.Nodes < 1 {
		return fmt.Errorf("nodes=%d: want at least 1", s.Nodes)
	}
	nss := []string{AgentNamespace}
	for _, ns := range s.Namespaces {
		if ns == metav1.NamespaceDefault || strings.HasPrefix(ns, "kube-") {
			return fmt.Errorf("namespace %s is the cluster's own: the existing substrate runs only in namespaces it creates", ns)
		}
		if !contains(nss, ns) {
			nss = append(nss, ns)
		}
	}
	// Every refusal before anything is created.
	for _, ns := range nss {
		if err := c.checkFree(ctx, ns); err != nil {
			return err
		}
	}
	if err := c.mapNodes(ctx, s.Nodes); err != nil {
		return err
	}
	if err := c.checkImages(ctx); err != nil {
		return err
	}
	for _, ns := range nss {
		if err := c.claim(ctx, ns); err != nil {
			return err
		}
	}
	if err := c.labelNodes(ctx); err != nil {
		return err
	}
	c.logf("existing cluster: nodes %s; namespaces %s", strings.Join(c.nodes, ", "), strings.Join(nss, ", "))
	if c.allow {
		c.logf("node-level effects: a privileged agent (host PID and network, cgroup writes) on %s; the experiment's node faults (kube-proxy and node CPU limits, pods' cgroups) land on these nodes only and are undone at the end", strings.Join(c.nodes, ", "))
	} else {
		c.logf("node-level effects: none (no --allow-node-chaos): the run's pods on %s only", strings.Join(c.nodes, ", "))
	}
	return c.startAgent(ctx)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkFree refuses a namespace that exists, naming its owner.
func (c *existingCluster) checkFree(ctx context.Context, ns string) error {
	got, err := c.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	return ownedError(got)
}

func ownedError(ns *corev1.Namespace) error {
	if run := ns.Labels[RunLabel]; run != "" {
		return fmt.Errorf("namespace %s belongs to meshchaos run %s (running now, or left by a run that was killed): wait for it, or delete it with 'kubectl delete namespace %s'", ns.Name, run, ns.Name)
	}
	return fmt.Errorf("namespace %s already exists and was not created by meshchaos: the existing substrate runs only in namespaces it creates; use another cluster, or delete it if it is yours", ns.Name)
}

// claim creates a namespace labelled as the run's; losing a race to another creator refuses.
func (c *existingCluster) claim(ctx context.Context, ns string) error {
	labels := map[string]string{RunLabel: c.name, "app.kubernetes.io/managed-by": "meshchaos"}
	if ns == AgentNamespace && c.allow {
		// The agent needs node access; Pod Security admission must let it in.
		labels["pod-security.kubernetes.io/enforce"] = "privileged"
	}
	_, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, gerr := c.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("namespace %s: %w", ns, gerr)
		}
		return ownedError(got)
	}
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	c.namespaces = append(c.namespaces, ns)
	return nil
}

// mapNodes decides node k: nodes labelled 1..N by the cluster's owner, else (for a run without
// node access only) the first N usable nodes by name (labelled in labelNodes).
func (c *existingCluster) mapNodes(ctx context.Context, n int) error {
	list, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	byIndex := map[int]string{}
	var other []string
	for _, nd := range list.Items {
		v, ok := nd.Labels[cluster.NodeLabel]
		if !ok {
			continue
		}
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 || byIndex[k] != "" {
			other = append(other, nd.Name+"="+v)
			continue
		}
		byIndex[k] = nd.Name
	}
	if len(byIndex) > 0 || len(other) > 0 {
		c.nodes = make([]string, n)
		for k := 1; k <= n; k++ {
			if byIndex[k] == "" {
				return fmt.Errorf("the cluster's nodes carry %s labels (%d of them) but none is %d: label %d nodes %s=1..%d, or remove the labels to let meshchaos pick nodes", cluster.NodeLabel, len(byIndex)+len(other), k, n, cluster.NodeLabel, n)
			}
			c.nodes[k-1] = byIndex[k]
		}
		return nil
	}
	if c.allow {
		// Node faults (throttled kube-proxy, node CPU budgets, pods' cgroups) change what the
		// node's other tenants get: they land only on nodes the cluster's owner chose.
		return fmt.Errorf("node faults land only on nodes you choose and no node carries %s: label %d node(s) %s=1..%d ('kubectl label node NODE %s=1'), or run without node chaos allowed (meshchaos then picks nodes for its pods alone)", cluster.NodeLabel, n, cluster.NodeLabel, n, cluster.NodeLabel)
	}
	var usable []string
	for _, nd := range list.Items {
		if nd.Spec.Unschedulable || !nodeReady(&nd) || hasHardTaint(&nd) {
			continue
		}
		usable = append(usable, nd.Name)
	}
	sort.Strings(usable)
	if len(usable) < n {
		return fmt.Errorf("the experiment needs %d node(s); the cluster has %d Ready, schedulable node(s) without NoSchedule taints (%s)", n, len(usable), strings.Join(usable, ", "))
	}
	c.nodes = usable[:n]
	c.labelled = c.nodes
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasHardTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return true
		}
	}
	return false
}

// labelNodes sets cluster.NodeLabel on the nodes this run picked.
func (c *existingCluster) labelNodes(ctx context.Context) error {
	for i, n := range c.labelled {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:%q}}}`, cluster.NodeLabel, strconv.Itoa(i+1), LabelledByAnnotation, c.name)
		if _, err := c.client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label node %s %s=%d (or label the nodes yourself): %w", n, cluster.NodeLabel, i+1, err)
		}
	}
	return nil
}

// checkImages proves every node the run uses holds every image: nothing will be pulled.
func (c *existingCluster) checkImages(ctx context.Context) error {
	var missing []string
	for _, name := range c.nodes {
		nd, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		have := map[string]bool{}
		for _, im := range nd.Status.Images {
			for _, n := range im.Names {
				have[n] = true
			}
		}
		var lacks []string
		for _, ref := range RequiredImages() {
			if !have[ref] {
				lacks = append(lacks, ref)
			}
		}
		if len(lacks) > 0 {
			missing = append(missing, fmt.Sprintf("%s lacks %s", name, strings.Join(lacks, ", ")))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("images: %s; meshchaos never pulls its images: import bin/images/*.tar into each node's containerd ('ctr -n k8s.io images import FILE' on the node)", strings.Join(missing, "; "))
	}
	return nil
}

// startAgent runs the agent on the run's nodes and waits until each node has a running one.
func (c *existingCluster) startAgent(ctx context.Context) error {
	labels := map[string]string{"app": agentName}
	sc := &corev1.SecurityContext{}
	if c.allow {
		// Named capabilities rather than privileged: what the agent does and no more (reading
		// other processes' /proc entries, cgroup writes through the node's root, chroot for
		// node tools, iptables-save).
		sc.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT", "NET_ADMIN", "NET_RAW", "DAC_READ_SEARCH"}}
		sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	} else {
		no := false
		sc.AllowPrivilegeEscalation = &no
	}
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	if c.allow {
		// The node's root, with the mounts below it (cgroup hierarchies; the runtime binds
		// hostPath volumes recursively): agent.HostRoot. No propagation: a node whose / is a
		// private mount refuses HostToContainer.
		volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		mounts = []corev1.VolumeMount{{Name: "host", MountPath: agent.HostRoot}}
	}
	grace, noToken := int64(1), false
	// One term per node (terms are ORed): a node-name field selector takes one value.
	var terms []corev1.NodeSelectorTerm
	for _, n := range c.nodes {
		terms = append(terms, corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{n}}}})
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: agentName, Namespace: AgentNamespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
						NodeSelectorTerms: terms}}},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					HostNetwork:                   c.allow,
					HostPID:                       c.allow,
					TerminationGracePeriodSeconds: &grace,
					AutomountServiceAccountToken:  &noToken,
					Volumes:                       volumes,
					Containers: []corev1.Container{{
						Name: "agent", Image: imgs.Ref(agentImage), ImagePullPolicy: corev1.PullNever,
						Command:         []string{"/" + agentBinary, "agent"},
						SecurityContext: sc,
						VolumeMounts:    mounts,
					}},
				},
			},
		},
	}
	if c.allow {
		// Node commands run in the agent's container and inherit its oom_score_adj: a critical
		// pod's (-997) rather than a best-effort pod's 1000, so that the generic memory hog
		// (chaos.MemoryHog), which joins the target's memory cgroup, is never the OOM killer's choice
		// there (it refuses to start with a positive score).
		ds.Spec.Template.Spec.PriorityClassName = "system-node-critical"
	}
	if _, err := c.client.AppsV1().DaemonSets(AgentNamespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the agent DaemonSet: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := c.client.CoreV1().Pods(AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + agentName})
		if err != nil {
			return fmt.Errorf("agent pods: %w", err)
		}
		agents, why := map[string]string{}, ""
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				agents[p.Spec.NodeName] = p.Name
			}
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
					why = fmt.Sprintf("; pod %s on %s: %s %s", p.Name, p.Spec.NodeName, w.Reason, w.Message)
				}
			}
		}
		if len(agents) == len(c.nodes) {
			c.agents = agents
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent runs on %d of %d nodes after 2 minutes%s", len(agents), len(c.nodes), why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Name implements cluster.Cluster.
func (c *existingCluster) Name() string { return c.name }

// RESTConfig implements cluster.Cluster.
func (c *existingCluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.cfg) }

// Nodes implements cluster.Cluster.
func (c *existingCluster) Nodes() []string { return append([]string(nil), c.nodes...) }

func (c *existingCluster) agent(k int) (string, error) {
	if k < 1 || k > len(c.nodes) {
		return "", fmt.Errorf("node %d: the cluster has %d node(s)", k, len(c.nodes))
	}
	pod, ok := c.agents[c.nodes[k-1]]
	if !ok {
		return "", fmt.Errorf("no agent on node %s", c.nodes[k-1])
	}
	return pod, nil
}

// Dialer implements cluster.Cluster: a connection to a pod of the run goes through the API
// server's port-forward to that pod (cheap: one multiplexed connection per pod); any other
// address is dialled by node k's agent (from its pod network, or the node's with node access),
// carried by a pod exec.
func (c *existingCluster) Dialer(k int) cluster.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if network != "tcp" && network != "tcp4" {
			return nil, fmt.Errorf("dial %s %s: the existing substrate dials TCP only", network, addr)
		}
		if host, port, err := net.SplitHostPort(addr); err == nil {
			if p, ok := c.fwd.pod(ctx, host); ok && c.fwd.usable(addr) {
				if conn, err := c.fwd.dial(p, addr, port); !errors.Is(err, errRefused) {
					return conn, err
				}
			}
		}
		pod, err := c.agent(k)
		if err != nil {
			return nil, err
		}
		return c.exec.dial(ctx, pod, addr)
	}
}

// NodeExec implements cluster.Cluster: argv runs in node k's root and network namespace.
func (c *existingCluster) NodeExec(ctx context.Context, k int, argv ...string) ([]byte, error) {
	if !c.allow {
		return nil, ErrNodeChaosNotAllowed
	}
	pod, err := c.agent(k)
	if err != nil {
		return nil, err
	}
	return c.exec.run(ctx, pod, append([]string{"/" + agentBinary, "agent", "exec", "--"}, argv...)...)
}

var _ cluster.NodeQuerier = (*existingCluster)(nil)

// NodeQuery implements cluster.NodeQuerier: the command runs in node k's agent session (as a
// child of its long-running `agent serve`), not in a pod exec of its own: a poll of kube-proxy's
// rules every 50 ms through pod exec started 20 runc execs a second on the very node whose
// kube-proxy the experiment throttles.
func (c *existingCluster) NodeQuery(ctx context.Context, k int, argv ...string) ([]byte, error) {
	if !c.allow {
		return nil, ErrNodeChaosNotAllowed
	}
	s, err := c.nodeSession(k)
	if err != nil {
		return nil, err
	}
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := s.run(argv)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-ctx.Done():
		// The session answers within its own bound; that answer is dropped.
		return nil, ctx.Err()
	}
}

func (c *existingCluster) session(node string) (*session, error) {
	if !c.allow {
		return nil, ErrNodeChaosNotAllowed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil, errors.New("the cluster is down")
	}
	pod, ok := c.agents[node]
	if !ok {
		return nil, fmt.Errorf("no agent on node %s (the run uses %s)", node, strings.Join(c.nodes, ", "))
	}
	s := c.sessions[node]
	if s == nil {
		s = &session{exec: c.exec, pod: pod}
		c.sessions[node] = s
	}
	return s, nil
}

// nodeSession is node k's agent session.
func (c *existingCluster) nodeSession(k int) (*session, error) {
	if k < 1 || k > len(c.nodes) {
		return nil, fmt.Errorf("node %d: the cluster has %d node(s)", k, len(c.nodes))
	}
	return c.session(c.nodes[k-1])
}

func (c *existingCluster) nodeGroup(k int, op string) (*cgroup.Group, error) {
	s, err := c.nodeSession(k)
	if err != nil {
		return nil, err
	}
	return s.group(op, "")
}

// KubeProxyCgroup implements cluster.Cluster: the agent finds kube-proxy's process on node k.
func (c *existingCluster) KubeProxyCgroup(k int) (*cgroup.Group, error) {
	return c.nodeGroup(k, "kube-proxy")
}

// PodsCgroup implements cluster.Cluster: kubelet's kubepods group on node k.
func (c *existingCluster) PodsCgroup(k int) (*cgroup.Group, error) { return c.nodeGroup(k, "pods") }

// PodCgroup implements cluster.Cluster: the pod's group on its node, found by UID.
func (c *existingCluster) PodCgroup(pod *corev1.Pod) (*cgroup.Group, error) {
	if pod.Spec.NodeName == "" {
		return nil, fmt.Errorf("pod %s/%s is not scheduled", pod.Namespace, pod.Name)
	}
	s, err := c.session(pod.Spec.NodeName)
	if err != nil {
		return nil, err
	}
	return s.group("pod", string(pod.UID))
}

// NodePath implements cluster.NodePaths: the agent reaches the node's root at agent.HostRoot,
// where its cgroup paths point; NodeExec runs chrooted into it.
func (c *existingCluster) NodePath(path string) string {
	if rest, ok := strings.CutPrefix(path, agent.HostRoot+"/"); ok {
		return "/" + rest
	}
	return path
}

// LoadImageArchive implements cluster.Cluster: the existing substrate loads no images.
func (c *existingCluster) LoadImageArchive(context.Context, string) error {
	return errors.New("the existing substrate does not load images: import them into each node's containerd ('ctr -n k8s.io images import FILE')")
}
