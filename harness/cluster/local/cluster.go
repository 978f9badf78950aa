// Package local is the local substrate: a real Kubernetes cluster (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, and per node containerd + runc, CNI bridge, kubelet,
// kube-proxy) in network namespaces on this Linux host, without Docker. Chaos depends on it being
// real: kernel OOM kills, kubelet restarts, readiness probes, EndpointSlices, iptables lag.
//
// Provider adapts a Cluster to e2e-framework's cluster provider interface.
package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/internal/proc"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/netns"
	"github.com/meshchaos/meshchaos/images"
)

// Config describes a cluster to bring up.
type Config struct {
	// Name is unique per host; it names namespaces, cgroups and the state directory.
	Name string
	// Nodes is the number of worker nodes (1..MaxNodes).
	Nodes int
	// Home holds the state directory (default Home()).
	Home string
	// ImagesDir holds image tarballs (<name>.tar); pause and coredns are required, every other
	// tarball in it is loaded too. Empty: bins.ImagesDir finds `make images`' output.
	ImagesDir string
	// BinDir is searched first for etcd and the Kubernetes binaries (see bins.Finder).
	BinDir string
	// Logf reports progress (default: silent).
	Logf func(format string, args ...any)
	// Connect is the command Keep starts to serve a kept cluster's API (Connect in a process of
	// its own): argv for cluster name, whose state directory is stateDir (the argv must name
	// stateDir, so that Down finds the process as the cluster's). Nil: the cluster cannot be kept.
	Connect func(name, stateDir string) []string
}

// Cluster is a running local cluster.
type Cluster struct {
	cfg     Config
	l       layout
	api     *apiserver.Server
	kcm     *proc.Process
	sched   *proc.Process
	nodes   []*node
	fwd     *forwarder
	rest    *rest.Config
	started time.Time
	stopped sync.Once
}

// ErrNameInUse is returned when a live cluster already has the name.
var ErrNameInUse = errors.New("cluster name in use")

// Preflight checks what Up needs (Linux, root, binaries, tools) without changing anything.
// It looks for the binaries where Up does with an empty Config.BinDir.
func Preflight() error { return preflight(bins.Finder{}) }

func preflight(f bins.Finder) error {
	if runtime.GOOS != "linux" {
		return errors.New("the local substrate needs Linux (it runs Kubernetes in network namespaces); use the kind substrate (Docker) instead")
	}
	if os.Geteuid() != 0 {
		return errors.New("the local substrate needs root (network namespaces, cgroups, containerd); run as root, or use the kind substrate (Docker) instead")
	}
	var missing []string
	for _, t := range []string{"containerd", "runc", "ctr", "ip", "nsenter", "iptables"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			missing = append(missing, cniBinDir+"/"+p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s: run 'make deps' (installs containerd, runc, containernetworking-plugins, iptables)", strings.Join(missing, ", "))
	}
	_, err := f.All(bins.Etcd, bins.KubeAPIServer, bins.KubeControllerManager, bins.KubeScheduler, bins.Kubelet, bins.KubeProxy)
	return err
}

// Up brings a cluster up and returns once every node is Ready and cluster DNS answers.
// On failure everything it started is torn down again.
func Up(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if err := ValidateName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes {
		return nil, fmt.Errorf("nodes %d: choose 1 to %d", cfg.Nodes, MaxNodes)
	}
	if cfg.Home == "" {
		cfg.Home = Home()
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	finder := bins.Finder{Dir: cfg.BinDir}
	if err := preflight(finder); err != nil {
		return nil, err
	}
	l := layout{name: cfg.Name, home: cfg.Home, nodes: cfg.Nodes}
	if cfg.ImagesDir, err = bins.ImagesDir(cfg.ImagesDir); err != nil {
		return nil, err
	}
	imgs, err := imageTarballs(cfg.ImagesDir)
	if err != nil {
		return nil, err
	}
	// One archive for the images that share layers: each node imports every layer once.
	if imgs, err = images.Imports(imgs, filepath.Join(cfg.Home, "images")); err != nil {
		return nil, err
	}
	if err := claim(l); err != nil {
		return nil, err
	}
	c = &Cluster{cfg: cfg, l: l, started: time.Now()}
	defer func() {
		if err != nil {
			cfg.Logf("bring-up failed, tearing down: %v", err)
			if derr := c.Down(context.Background()); derr != nil {
				err = fmt.Errorf("%w (and teardown: %v)", err, derr)
			}
			c = nil
		}
	}()
	paths, err := finder.All(bins.KubeControllerManager, bins.KubeScheduler, bins.Kubelet, bins.KubeProxy)
	if err != nil {
		return c, err
	}
	containerdPath, _ := exec.LookPath("containerd")

	c.step("network: hub %s and %d node namespace(s)", l.hubNetns(), l.nodes)
	if err := setupNetwork(ctx, l); err != nil {
		return c, fmt.Errorf("set up network: %w", err)
	}
	for k := 1; k <= l.nodes; k++ {
		if _, err := cgroup.Create(l.nodeCgroup(k)); err != nil {
			return c, fmt.Errorf("node %d cgroup root: %w", k, err)
		}
	}

	c.step("control plane: etcd, kube-apiserver")
	c.api, err = apiserver.Start(ctx, apiserver.Options{
		Dir: l.cpDir(), Netns: l.hubNetnsPath(), BindIP: hubIP(), Port: APIServerPort,
		ServiceCIDR: ServiceCIDR, BinDir: cfg.BinDir, Logf: cfg.Logf,
		// The hub runs no kube-proxy, so a ClusterIP means nothing here: the apiserver reaches
		// admission webhooks (and aggregated APIs) behind a Service at a ready endpoint's pod IP,
		// which the hub routes to its node. TLS is still checked against the Service's name.
		// The hub resolves no node names: reach kubelets (pod exec, logs, port-forward) at
		// their node IPs, which it routes.
		ExtraArgs: []string{"--enable-aggregator-routing=true", "--kubelet-preferred-address-types=InternalIP,Hostname"},
	})
	if err != nil {
		return c, fmt.Errorf("start control plane: %w", err)
	}
	c.rest = c.api.RESTConfig()
	if err := c.startControllers(paths); err != nil {
		return c, err
	}

	c.step("nodes: containerd, image import, kubelet, kube-proxy")
	g, gctx := errgroup.WithContext(ctx)
	for k := 1; k <= l.nodes; k++ {
		n := &node{k: k, l: l}
		c.nodes = append(c.nodes, n)
		g.Go(func() error {
			if err := c.startNode(gctx, n, containerdPath, paths, imgs); err != nil {
				return fmt.Errorf("node %d: %w", n.k, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return c, err
	}

	cs, err := kubernetes.NewForConfig(c.rest)
	if err != nil {
		return c, err
	}
	c.step("waiting for %d node(s) Ready", l.nodes)
	if err := c.waitNodesReady(ctx, cs, 90*time.Second); err != nil {
		return c, err
	}
	c.step("cluster DNS: CoreDNS")
	if err := deployDNS(ctx, cs); err != nil {
		return c, fmt.Errorf("deploy CoreDNS: %w", err)
	}
	if err := kube.WaitDeploymentReady(ctx, cs, "kube-system", "coredns", 90*time.Second); err != nil {
		return c, fmt.Errorf("CoreDNS: %w", err)
	}

	c.fwd, err = startForwarder(l.hubNetnsPath(), net.JoinHostPort(hubIP().String(), strconv.Itoa(APIServerPort)))
	if err != nil {
		return c, fmt.Errorf("apiserver forwarder: %w", err)
	}
	if err := c.api.WriteKubeconfig(l.kubeconfig(), "https://"+c.fwd.Addr()); err != nil {
		return c, err
	}
	c.step("ready in %s", time.Since(c.started).Round(100*time.Millisecond))
	return c, nil
}

// step reports a bring-up step; the caller's progress display adds the time.
func (c *Cluster) step(format string, args ...any) { c.cfg.Logf(format, args...) }

func (c *Cluster) startControllers(paths map[string]string) error {
	// kube-controller-manager and kube-scheduler keep the admin's token: they run in the hub,
	// where no pod runs, and their kubeconfig is in the hub's directory, not a node's. Their
	// own identities would change what runs (the controller manager would need
	// --use-service-account-credentials and a token per controller) without keeping
	// anything closer.
	kcfg := filepath.Join(c.l.cpDir(), "kubeconfig-incluster")
	if err := c.api.WriteKubeconfig(kcfg, apiServerURL()); err != nil {
		return err
	}
	var err error
	c.kcm, err = proc.Start(proc.Spec{
		Name: "kube-controller-manager", Path: paths[bins.KubeControllerManager], Dir: c.l.logDir(), Netns: c.l.hubNetnsPath(),
		Args: []string{
			"--kubeconfig=" + kcfg, "--leader-elect=false", "--secure-port=0",
			"--root-ca-file=" + c.api.CACertPath(), "--service-account-private-key-file=" + c.api.SAKeyPath(),
			"--use-service-account-credentials=false", "--v=1",
		},
	})
	if err != nil {
		return err
	}
	schedCfg := filepath.Join(c.l.cpDir(), "kube-scheduler.yaml")
	body := fmt.Sprintf("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection: {kubeconfig: %s}\nleaderElection: {leaderElect: false}\n", kcfg)
	if err := os.WriteFile(schedCfg, []byte(body), 0o644); err != nil {
		return err
	}
	c.sched, err = proc.Start(proc.Spec{
		Name: "kube-scheduler", Path: paths[bins.KubeScheduler], Dir: c.l.logDir(), Netns: c.l.hubNetnsPath(),
		Args: []string{"--config=" + schedCfg, "--secure-port=0", "--v=1"},
	})
	return err
}

func (c *Cluster) startNode(ctx context.Context, n *node, containerdPath string, paths map[string]string, imgs []string) error {
	if err := n.writeConfigs(c.api.CACertPath()); err != nil {
		return err
	}
	// Each node's components authenticate as themselves, as on a real cluster: kubelet as
	// system:node:NAME (NAME is what it registers, --hostname-override), which the Node
	// authorizer confines to its own Node and to what the pods bound to it reference, and
	// kube-proxy as system:kube-proxy (bound to system:node-proxier by the bootstrap policy).
	// The admin's token on a node would let whoever breaks out of a pod there own the cluster.
	name := n.l.nodeName(n.k)
	if err := c.api.WriteClientKubeconfig(n.l.nodeKubeconfig(n.k), apiServerURL(), "system:node:"+name, "system:nodes"); err != nil {
		return fmt.Errorf("kubelet's kubeconfig: %w", err)
	}
	if err := c.api.WriteClientKubeconfig(n.l.kubeProxyKubeconfig(n.k), apiServerURL(), "system:kube-proxy"); err != nil {
		return fmt.Errorf("kube-proxy's kubeconfig: %w", err)
	}
	if err := n.startContainerd(ctx, containerdPath); err != nil {
		return err
	}
	start := time.Now()
	for _, img := range imgs {
		if err := n.importImage(ctx, img); err != nil {
			return err
		}
	}
	c.step("node %d: %d image archive(s) imported in %s", n.k, len(imgs), time.Since(start).Round(100*time.Millisecond))
	if err := n.startKubelet(paths[bins.Kubelet]); err != nil {
		return err
	}
	return n.startKubeProxy(paths[bins.KubeProxy])
}

// waitNodesReady waits for every node to report Ready, then lifts the not-ready taint kubelet
// registers with (the node-lifecycle controller would, but it may lag a fresh node by seconds).
func (c *Cluster) waitNodesReady(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for k := 1; k <= c.l.nodes; k++ {
		name := c.l.nodeName(k)
		err := kube.Poll(ctx, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
			nd, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err == nil && kube.NodeReady(nd) {
				return true, removeNotReadyTaint(ctx, cs, nd)
			}
			// A node component that died will not make the node Ready: say so at once.
			for _, n := range c.nodes {
				for _, p := range []*proc.Process{n.containerd, n.kubelet, n.kubeProxy} {
					if e := p.ExitError(); e != nil {
						return false, e
					}
				}
			}
			return false, nil
		})
		if err != nil {
			if wait.Interrupted(err) {
				return fmt.Errorf("node %s not Ready after %s; kubelet log:\n%s", name, timeout, c.nodes[k-1].kubelet.Tail(15))
			}
			return err
		}
	}
	return nil
}

func removeNotReadyTaint(ctx context.Context, cs kubernetes.Interface, n *corev1.Node) error {
	var keep []corev1.Taint
	for _, t := range n.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady {
			keep = append(keep, t)
		}
	}
	if len(keep) == len(n.Spec.Taints) {
		return nil
	}
	n = n.DeepCopy()
	n.Spec.Taints = keep
	_, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	if err != nil && !strings.Contains(err.Error(), "the object has been modified") {
		return fmt.Errorf("remove not-ready taint from %s: %w", n.Name, err)
	}
	return nil
}

// Name is the cluster's name.
func (c *Cluster) Name() string { return c.l.name }

// Dir is the cluster's state directory (logs, configs, kubeconfig).
func (c *Cluster) Dir() string { return c.l.dir() }

// KubeconfigPath is a kubeconfig usable from the host (through a loopback forwarder that lives
// as long as this process).
func (c *Cluster) KubeconfigPath() string { return c.l.kubeconfig() }

// RESTConfig dials the apiserver directly inside the cluster's namespace.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.rest) }

// Nodes lists the nodes' names in order (node 1 first).
func (c *Cluster) Nodes() []string {
	out := make([]string, c.l.nodes)
	for k := range out {
		out[k] = c.l.nodeName(k + 1)
	}
	return out
}

// NodeNetns is the network namespace path of node k (1-based); 0 is the control-plane hub.
func (c *Cluster) NodeNetns(k int) string {
	if k == 0 {
		return c.l.hubNetnsPath()
	}
	return c.l.nodeNetnsPath(k)
}

// Dialer dials from inside node k's namespace: ClusterIPs (through kube-proxy's rules), pod IPs
// and node IPs are reachable, as from a process on that node.
func (c *Cluster) Dialer(k int) cluster.DialFunc {
	return netns.Dialer(c.NodeNetns(k))
}

// KubeProxyCgroup is the cgroup kube-proxy of node k runs in; chaos sets its CPU quota.
func (c *Cluster) KubeProxyCgroup(k int) (*cgroup.Group, error) {
	if k < 1 || k > c.l.nodes {
		return nil, fmt.Errorf("no node %d (cluster has %d)", k, c.l.nodes)
	}
	return cgroup.Open(c.l.kubeProxyCgroup(k))
}

// KubeProxyPid is the pid of node k's kube-proxy.
func (c *Cluster) KubeProxyPid(k int) int { return c.nodes[k-1].kubeProxy.Pid() }

// LoadImageArchive imports an image tarball into every node's containerd.
func (c *Cluster) LoadImageArchive(ctx context.Context, path string) error {
	return loadArchive(ctx, c.l, path)
}

// Down stops everything the cluster started and removes its state. Safe to call twice.
func (c *Cluster) Down(ctx context.Context) error {
	var err error
	c.stopped.Do(func() {
		start := time.Now()
		if c.fwd != nil {
			c.fwd.Close()
		}
		// Stop what recreates pods and rules first, gracefully, then sweep the rest.
		for _, p := range []*proc.Process{c.kcm, c.sched} {
			if p != nil {
				_ = p.Stop(5 * time.Second)
			}
		}
		for _, n := range c.nodes {
			n.stop()
		}
		err = teardown(ctx, c.l, c.cfg.Logf)
		c.cfg.Logf("[down] %s removed in %s", c.l.name, time.Since(start).Round(100*time.Millisecond))
	})
	return err
}

// owner is written into the state dir so a second `cluster up` with the same name can tell a
// live cluster from one a crash left behind.
type owner struct {
	Pid       int    `json:"pid"`
	StartTime string `json:"startTime"`
	Nodes     int    `json:"nodes"`
}

func claim(l layout) error {
	if err := free(l); err != nil {
		return err
	}
	// The state directory holds the admin kubeconfig, keys and logs: only its owner may enter.
	if err := os.MkdirAll(l.dir(), 0o700); err != nil {
		return err
	}
	if err := os.Chmod(l.dir(), 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(l.logDir(), 0o755); err != nil {
		return err
	}
	// O_EXCL: of two processes that found the name free at once, one wins.
	f, err := os.OpenFile(filepath.Join(l.dir(), "owner.json"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: cluster %q is being brought up by another process; choose another name", ErrNameInUse, l.name)
	}
	if err != nil {
		return err
	}
	b, _ := json.Marshal(owner{Pid: os.Getpid(), StartTime: processStartTime(os.Getpid()), Nodes: l.nodes})
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// free says whether a cluster may take l's name: no live cluster has it and none left anything
// behind under it.
func free(l layout) error {
	if _, err := os.Stat(filepath.Join(l.dir(), "owner.json")); err == nil {
		switch v, why := checkOwner(l.dir()); v {
		case ownerGone:
			return fmt.Errorf("%w: cluster %q was left behind by a process that is gone (%s); run 'meshchaos cluster down --name %s' first", ErrNameInUse, l.name, why, l.name)
		case ownerAlive:
			return fmt.Errorf("%w: cluster %q is running (%s); choose another name or run 'meshchaos cluster down --name %s'", ErrNameInUse, l.name, why, l.name)
		default:
			return fmt.Errorf("%w: cluster %q has state in %s (%s); choose another name, or if no process owns it any more run 'meshchaos cluster down --name %s'", ErrNameInUse, l.name, l.dir(), why, l.name)
		}
	}
	if ns := clusterNetns(l); len(ns) > 0 {
		return fmt.Errorf("%w: network namespaces %v exist; run 'meshchaos cluster down --name %s' first", ErrNameInUse, ns, l.name)
	}
	return nil
}

// CheckName says, before anything starts, whether a new cluster may be called name: a valid
// name that no running cluster has and no crashed one left behind (ErrNameInUse). Up checks
// again when it claims the name.
func CheckName(home, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if home == "" {
		home = Home()
	}
	return free(layout{name: name, home: home})
}

// processStartTime is field 22 of /proc/PID/stat: with the pid it identifies a process.
func processStartTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

func imageTarballs(dir string) ([]string, error) {
	var out []string
	for _, req := range []string{"pause", "coredns"} {
		p := images.TarPath(dir, req)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("image %s missing: run 'make images'", p)
		}
		out = append(out, p)
	}
	all, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
	for _, p := range all {
		if b := filepath.Base(p); b != "pause.tar" && b != "coredns.tar" {
			out = append(out, p)
		}
	}
	return out, nil
}

// PodCgroup is the cgroup of a pod (the same path in each hierarchy, e.g. for the memory
// controller under /sys/fs/cgroup/memory). It outlives container restarts, so a memory watch on
// it follows a control plane across OOM kills. The layout is kubelet's cgroupfs one.
func (c *Cluster) PodCgroup(pod *corev1.Pod) (*cgroup.Group, error) {
	k := c.nodeIndex(pod.Spec.NodeName)
	if k == 0 {
		return nil, fmt.Errorf("pod %s/%s: node %q is not a node of cluster %s", pod.Namespace, pod.Name, pod.Spec.NodeName, c.Name())
	}
	class := ""
	switch pod.Status.QOSClass {
	case corev1.PodQOSBurstable:
		class = "burstable"
	case corev1.PodQOSBestEffort:
		class = "besteffort"
	}
	return cgroup.Open(filepath.Join(c.l.nodeCgroup(k), "kubepods", class, "pod"+string(pod.UID)))
}

// PodsCgroup is kubelet's kubepods cgroup on node k: every pod of the node.
func (c *Cluster) PodsCgroup(k int) (*cgroup.Group, error) {
	if k < 1 || k > c.l.nodes {
		return nil, fmt.Errorf("no node %d (cluster has %d)", k, c.l.nodes)
	}
	return cgroup.Open(filepath.Join(c.l.nodeCgroup(k), "kubepods"))
}

// NodeExec runs argv in node k's network namespace (nsenter, not `ip netns exec`, which would
// remount /sys).
func (c *Cluster) NodeExec(ctx context.Context, k int, argv ...string) ([]byte, error) {
	if k < 1 || k > c.l.nodes {
		return nil, fmt.Errorf("no node %d (cluster has %d)", k, c.l.nodes)
	}
	args := append([]string{"--net=" + c.l.nodeNetnsPath(k), "--"}, argv...)
	out, err := exec.CommandContext(ctx, "nsenter", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("%s on node %d: %w: %s", strings.Join(argv, " "), k, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return out, fmt.Errorf("%s on node %d: %w", strings.Join(argv, " "), k, err)
	}
	return out, nil
}

// nodeIndex is the 1-based index of the named node, 0 if it is not one of this cluster's.
func (c *Cluster) nodeIndex(name string) int {
	for k := 1; k <= c.l.nodes; k++ {
		if c.l.nodeName(k) == name {
			return k
		}
	}
	return 0
}

var _ cluster.Cluster = (*Cluster)(nil)

// Substrate is the local substrate as a cluster.Substrate: clusters in network namespaces on this
// host, state under Home, every tarball of ImagesDir loaded at start.
type Substrate struct {
	Home      string
	ImagesDir string
	// Connect is Config.Connect: what serves a kept cluster (meshchaos run --keep-cluster).
	Connect func(name, stateDir string) []string
}

// Name implements cluster.Substrate.
func (Substrate) Name() string { return "local" }

// Up implements cluster.Substrate.
func (s Substrate) Up(ctx context.Context, spec cluster.Spec) (cluster.Cluster, error) {
	c, err := Up(ctx, Config{Name: spec.Name, Nodes: spec.Nodes, Home: s.Home, ImagesDir: s.ImagesDir, Logf: spec.Logf, Connect: s.Connect})
	if err != nil {
		return nil, err
	}
	return c, nil
}
