// Package kind is the kind substrate: clusters of Docker containers brought up with kind's Go
// library (sigs.k8s.io/kind, pinned in go.mod), one control-plane node plus one container per
// worker node. Node chaos works on the host's view of the node containers: their cgroups (under
// the container's cgroup in each hierarchy), their network namespaces (Dialer) and docker exec.
//
// The default node image is meshchaos.local/kind-node (built by 'make kind-node-image' from
// Debian and our Kubernetes binaries, no registry needed) when Docker has it, else kind's own
// image for the pinned release.
package kind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/apis/config/defaults"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	kindexec "sigs.k8s.io/kind/pkg/exec"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/netns"
	"github.com/meshchaos/meshchaos/images"
)

// KubernetesVersion is the version 'make bins' builds and 'make kind-node-image' packages.
const KubernetesVersion = "v1.36.4"

// LocalImage is the node image 'make kind-node-image' loads into Docker.
const LocalImage = "meshchaos.local/kind-node:" + KubernetesVersion

// Prefix starts the kind name of every cluster meshchaos creates, so 'cluster down --all' finds
// them and never touches anyone else's kind clusters.
const Prefix = "meshchaos-"

// Network is the Docker network our clusters' nodes share (kind's default is "kind"); ours alone,
// so it can be removed when the last of our clusters goes.
const Network = "meshchaos-kind"

// ImageEnv overrides the node image.
const ImageEnv = "MESHCHAOS_KIND_IMAGE"

// RetainEnv, when set to 1, keeps the node containers of a cluster whose creation failed, so
// 'docker exec NODE journalctl -u kubelet' can say why ('meshchaos cluster down' removes them).
const RetainEnv = "MESHCHAOS_KIND_RETAIN"

// MaxNodes bounds the worker count: each node is a container running systemd, containerd and
// kubelet on a 2-core machine.
const MaxNodes = 6

// Substrate is the kind substrate as a cluster.Substrate.
type Substrate struct {
	// ImagesDir holds the image tarballs loaded into every node.
	ImagesDir string
	// Image is the node image (default: see DefaultImage).
	Image string
	// Home holds each cluster's kubeconfig (default: Home()).
	Home string
}

// Name implements cluster.Substrate.
func (Substrate) Name() string { return "kind" }

// Up implements cluster.Substrate.
func (s Substrate) Up(ctx context.Context, spec cluster.Spec) (cluster.Cluster, error) {
	c, err := Up(ctx, Config{Name: spec.Name, Nodes: spec.Nodes, ImagesDir: s.ImagesDir, Image: s.Image, Home: s.Home, Logf: spec.Logf})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Config is what Up needs.
type Config struct {
	Name      string
	Nodes     int
	ImagesDir string
	Image     string
	Home      string
	Logf      func(string, ...any)
}

// Home is where kubeconfigs of kind clusters live: $MESHCHAOS_HOME/kind or ~/.meshchaos/kind.
func Home() string {
	if h := os.Getenv("MESHCHAOS_HOME"); h != "" {
		return filepath.Join(h, "kind")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".meshchaos", "kind")
	}
	return filepath.Join(os.TempDir(), "meshchaos-kind")
}

// Preflight says what to do when Docker cannot run kind nodes here.
func Preflight() error {
	if _, err := exec.LookPath("docker"); err != nil {
		return errors.New("the kind substrate needs Docker: install it (Debian: 'apt-get install docker.io'; CI: 'sudo hack/docker.sh') or use the local substrate")
	}
	out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput()
	if err != nil {
		return fmt.Errorf("the kind substrate needs a running Docker daemon ('docker info': %s): start Docker (on a machine like our CI: 'sudo hack/docker.sh') or use the local substrate", strings.TrimSpace(string(out)))
	}
	return nil
}

// DefaultImage is $MESHCHAOS_KIND_IMAGE, else LocalImage when Docker has it, else the node
// image of the pinned kind release (which Docker pulls).
func DefaultImage() string {
	if img := os.Getenv(ImageEnv); img != "" {
		return img
	}
	if ours(LocalImage) {
		return LocalImage
	}
	return defaults.Image
}

// ours reports whether image is one 'make kind-node-image' built (it carries our label).
func ours(image string) bool {
	out, err := exec.Command("docker", "image", "inspect", "--format", `{{index .Config.Labels "io.meshchaos.image"}}`, image).Output()
	return err == nil && strings.TrimSpace(string(out)) == "kind-node"
}

// Cluster is a running kind cluster.
type Cluster struct {
	cfg        Config
	kindName   string
	kubeconfig string
	provider   *kindcluster.Provider
	rest       *rest.Config
	// workers are the worker nodes, node 1 first; all includes the control plane.
	workers []nodes.Node
	all     []nodes.Node
	mu      sync.Mutex
	pids    map[string]int
	down    sync.Once
}

var (
	_ cluster.Cluster     = (*Cluster)(nil)
	_ cluster.ImageHolder = (*Cluster)(nil)
)

// Up creates the cluster, sets up its pod network, loads the images and waits for Ready nodes
// and DNS. On error the cluster is removed again.
func Up(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes {
		return nil, fmt.Errorf("kind: %d nodes: choose 1 to %d", cfg.Nodes, MaxNodes)
	}
	if cfg.Home == "" {
		cfg.Home = Home()
	}
	if cfg.Image == "" {
		cfg.Image = DefaultImage()
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	// kind reads the network name from its environment when it creates nodes.
	os.Setenv("KIND_EXPERIMENTAL_DOCKER_NETWORK", Network)
	c = &Cluster{
		cfg:      cfg,
		kindName: Prefix + cfg.Name,
		provider: kindcluster.NewProvider(kindcluster.ProviderWithDocker(), kindcluster.ProviderWithLogger(logger{cfg.Logf})),
		pids:     map[string]int{},
	}
	c.kubeconfig = filepath.Join(cfg.Home, cfg.Name, "kubeconfig")
	existing, err := c.provider.List()
	if err != nil {
		return nil, fmt.Errorf("kind: list clusters: %w", err)
	}
	for _, n := range existing {
		if n == c.kindName {
			return nil, fmt.Errorf("kind cluster %s exists; choose another name or run 'meshchaos cluster down --substrate kind --name %s'", n, cfg.Name)
		}
	}
	if err := os.MkdirAll(filepath.Dir(c.kubeconfig), 0o700); err != nil {
		return nil, err
	}
	retain := os.Getenv(RetainEnv) == "1"
	defer func() {
		if err != nil && retain {
			cfg.Logf("[kind] %s=1: nodes of %s kept for debugging; remove them with 'meshchaos cluster down --substrate kind --name %s'", RetainEnv, c.kindName, cfg.Name)
			return
		}
		if err != nil {
			down, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_ = c.Down(down)
		}
	}()
	start := time.Now()
	mine := ours(cfg.Image)
	cfg.Logf("[kind] creating %s: 1 control plane + %d workers, image %s", c.kindName, cfg.Nodes, cfg.Image)
	// kind's Create takes no context and runs kubeadm for a minute or more: an interrupted run
	// removes the nodes under it, which makes Create fail at its next step (the deferred Down
	// then removes whatever it created after that).
	created := make(chan error, 1)
	go func() {
		created <- c.provider.Create(c.kindName,
			kindcluster.CreateWithV1Alpha4Config(clusterConfig(cfg.Nodes, mine, cgroupV1())),
			kindcluster.CreateWithNodeImage(cfg.Image),
			kindcluster.CreateWithKubeconfigPath(c.kubeconfig),
			kindcluster.CreateWithDisplayUsage(false),
			kindcluster.CreateWithDisplaySalutation(false),
			kindcluster.CreateWithRetain(retain),
		)
	}()
	var cerr error
	select {
	case cerr = <-created:
	case <-ctx.Done():
		cfg.Logf("[kind] interrupted while creating %s: removing its nodes", c.kindName)
		_ = Down(cfg.Name, cfg.Logf)
		<-created
		cerr = ctx.Err()
	}
	if cerr != nil {
		return c, fmt.Errorf("kind create %s: %w%s", c.kindName, cerr, commandOutput(cerr))
	}
	cfg.Logf("[kind] kubeadm done in %s", time.Since(start).Round(time.Second))
	if err := c.discover(); err != nil {
		return c, err
	}
	cs, err := kubernetes.NewForConfig(c.rest)
	if err != nil {
		return c, err
	}
	if mine {
		// Our node image has no CNI daemon and a CoreDNS without forwarding; see network.go.
		if err := c.setupPodNetwork(ctx, cs); err != nil {
			return c, fmt.Errorf("pod network: %w", err)
		}
		if err := configureDNS(ctx, cs); err != nil {
			return c, fmt.Errorf("cluster DNS: %w", err)
		}
	}
	if err := placeDNS(ctx, cs); err != nil {
		return c, fmt.Errorf("cluster DNS: %w", err)
	}
	if err := kube.WaitNodesReady(ctx, cs, len(c.all), 3*time.Minute); err != nil {
		return c, fmt.Errorf("nodes ready: %w", err)
	}
	if err := c.loadImages(ctx); err != nil {
		return c, err
	}
	if err := kube.WaitDeploymentReady(ctx, cs, "kube-system", "coredns", 3*time.Minute); err != nil {
		return c, fmt.Errorf("coredns: %w", err)
	}
	cfg.Logf("[kind] %s up in %s", c.kindName, time.Since(start).Round(time.Second))
	return c, nil
}

// commandOutput is the tail of the output of the node command behind a kind error (kubeadm's
// reason is there, not in the error text).
func commandOutput(err error) string {
	re := kindexec.RunErrorForError(err)
	if re == nil || len(re.Output) == 0 {
		return ""
	}
	// kubeadm ends with a Go stack trace; its reason is the last lines before it.
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(re.Output)), "\n") {
		if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "runtime.") || strings.HasPrefix(l, "main.") ||
			strings.HasPrefix(l, "github.com/") || strings.HasPrefix(l, "k8s.io/kubernetes/cmd/") {
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "; output:\n" + strings.Join(lines, "\n")
}

// clusterConfig is kind's cluster config for n workers, labelled as on every substrate.
func clusterConfig(n int, ourImage, cgroupV1 bool) *v1alpha4.Cluster {
	cfg := &v1alpha4.Cluster{
		TypeMeta: v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Nodes:    []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}},
	}
	for k := 1; k <= n; k++ {
		cfg.Nodes = append(cfg.Nodes, v1alpha4.Node{Role: v1alpha4.WorkerRole, Labels: map[string]string{cluster.NodeLabel: fmt.Sprint(k)}})
	}
	if ourImage {
		cfg.Networking.DisableDefaultCNI = true
		// The images are imported by a unit that starts with the node and runs alongside
		// kubeadm's preflight; kubelet waits for it (see nodeimage), so a preflight miss is only
		// a race with that import, never a pull: there is no registry to pull from.
		// The import takes minutes on a loaded 2-core machine, and kubelet waits for it: kubeadm's
		// 4-minute health-check timeouts are too short there.
		cfg.KubeadmConfigPatches = append(cfg.KubeadmConfigPatches,
			"kind: InitConfiguration\nnodeRegistration:\n  ignorePreflightErrors: [ImagePull]\ntimeouts:\n  kubeletHealthCheck: 15m0s\n  controlPlaneComponentHealthCheck: 15m0s\n",
			"kind: JoinConfiguration\nnodeRegistration:\n  ignorePreflightErrors: [ImagePull]\ntimeouts:\n  kubeletHealthCheck: 15m0s\n  tlsBootstrap: 15m0s\n")
	}
	if cgroupV1 {
		// Kubernetes ≥ 1.35 refuses cgroup v1 unless told otherwise.
		cfg.KubeadmConfigPatches = append(cfg.KubeadmConfigPatches, "kind: KubeletConfiguration\nfailCgroupV1: false\n")
	}
	return cfg
}

// cgroupV1 reports whether Docker runs on cgroup v1.
func cgroupV1() bool {
	out, err := exec.Command("docker", "info", "--format", "{{.CgroupVersion}}").Output()
	return err == nil && strings.TrimSpace(string(out)) == "1"
}

// discover finds the nodes (workers by their meshchaos.io/node label) and the REST config.
func (c *Cluster) discover() error {
	all, err := c.provider.ListNodes(c.kindName)
	if err != nil {
		return fmt.Errorf("kind: list nodes: %w", err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].String() < all[j].String() })
	c.all = all
	cp, err := nodeutils.ControlPlaneNodes(all)
	if err != nil || len(cp) == 0 {
		return fmt.Errorf("kind: no control-plane node: %v", err)
	}
	ip, _, err := cp[0].IP()
	if err != nil {
		return fmt.Errorf("kind: control-plane address: %w", err)
	}
	// The host reaches the node containers on the Docker bridge; the apiserver's certificate
	// names the control plane's address, so no port forward is needed.
	raw, err := c.provider.KubeConfig(c.kindName, true)
	if err != nil {
		return err
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig([]byte(raw))
	if err != nil {
		return err
	}
	rc.Host = fmt.Sprintf("https://%s:6443", ip)
	c.rest = rc
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	byName := map[string]nodes.Node{}
	for _, n := range all {
		byName[n.String()] = n
	}
	// kind's Create returns once kubeadm join has run on every worker, which can be before a
	// worker's kubelet has registered its Node (with the label): wait for every numbered one.
	ctx, cancel := context.WithTimeout(context.Background(), workersRegister)
	defer cancel()
	var missing int
	err = kube.Poll(ctx, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: cluster.NodeLabel})
		if err != nil {
			return false, nil // the apiserver may still be settling; the deadline decides
		}
		c.workers = make([]nodes.Node, c.cfg.Nodes)
		for _, n := range list.Items {
			var k int
			if _, err := fmt.Sscan(n.Labels[cluster.NodeLabel], &k); err != nil || k < 1 || k > c.cfg.Nodes {
				continue
			}
			c.workers[k-1] = byName[n.Name]
		}
		missing = slices.Index(c.workers, nil) + 1
		return missing == 0, nil
	})
	if err != nil {
		return fmt.Errorf("kind: no node labelled %s=%d registered within %s of kubeadm's join: %w", cluster.NodeLabel, missing, workersRegister, err)
	}
	return nil
}

// workersRegister bounds the wait for the workers' Nodes after kind's Create.
const workersRegister = 90 * time.Second

// Name is the cluster's name (the kind cluster is Prefix+Name).
func (c *Cluster) Name() string { return c.cfg.Name }

// KubeconfigPath is the kubeconfig kind wrote (apiserver at a loopback port Docker publishes).
func (c *Cluster) KubeconfigPath() string { return c.kubeconfig }

// RESTConfig reaches the apiserver at the control-plane container's address.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.rest) }

// Nodes lists the worker nodes' names, node 1 first.
func (c *Cluster) Nodes() []string {
	out := make([]string, len(c.workers))
	for i, n := range c.workers {
		out[i] = n.String()
	}
	return out
}

func (c *Cluster) node(k int) (nodes.Node, error) {
	if k < 1 || k > len(c.workers) {
		return nil, fmt.Errorf("no node %d (cluster has %d)", k, len(c.workers))
	}
	return c.workers[k-1], nil
}

// pid is the host pid of a node container's init (systemd).
func (c *Cluster) pid(name string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pids[name]; ok {
		return p, nil
	}
	out, err := exec.Command("docker", "inspect", "--format", "{{.State.Pid}}", name).Output()
	if err != nil {
		return 0, fmt.Errorf("docker inspect %s: %w", name, err)
	}
	var p int
	if _, err := fmt.Sscan(string(out), &p); err != nil || p <= 0 {
		return 0, fmt.Errorf("docker inspect %s: no running pid (%q)", name, strings.TrimSpace(string(out)))
	}
	c.pids[name] = p
	return p, nil
}

// Dialer dials from inside node k's container network namespace: ClusterIPs (through that
// node's kube-proxy rules), pod IPs and node IPs are reachable as from a process on the node.
func (c *Cluster) Dialer(k int) cluster.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n, err := c.node(k)
		if err != nil {
			return nil, err
		}
		p, err := c.pid(n.String())
		if err != nil {
			return nil, err
		}
		return netns.DialContext(ctx, fmt.Sprintf("/proc/%d/ns/net", p), network, addr)
	}
}

// NodeExec runs argv in node k's container (docker exec) and returns its standard output.
func (c *Cluster) NodeExec(ctx context.Context, k int, argv ...string) ([]byte, error) {
	n, err := c.node(k)
	if err != nil {
		return nil, err
	}
	return dockerExec(ctx, n.String(), nil, argv...)
}

func dockerExec(ctx context.Context, node string, stdin []byte, argv ...string) ([]byte, error) {
	args := []string{"exec"}
	if stdin != nil {
		args = append(args, "-i")
	}
	cmd := exec.CommandContext(ctx, "docker", append(append(args, node), argv...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s on %s: %w: %s", strings.Join(argv, " "), node, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// LoadImageArchive imports an image tarball into every node's containerd (kind's loader).
func (c *Cluster) LoadImageArchive(ctx context.Context, path string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.all))
	for i, n := range c.all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(path)
			if err != nil {
				errs[i] = err
				return
			}
			defer f.Close()
			if err := nodeutils.LoadImageArchive(n, f); err != nil {
				errs[i] = fmt.Errorf("load %s into %s: %w", filepath.Base(path), n, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// HoldImage implements cluster.ImageHolder: when Docker has ref, it is saved and loaded into
// every node. Docker is never asked to pull it.
func (c *Cluster) HoldImage(ctx context.Context, ref string) (bool, error) {
	if exec.CommandContext(ctx, "docker", "image", "inspect", ref).Run() != nil {
		return false, nil
	}
	dir, err := os.MkdirTemp("", "meshchaos-image-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	tar := filepath.Join(dir, "image.tar")
	if out, err := exec.CommandContext(ctx, "docker", "save", "-o", tar, ref).CombinedOutput(); err != nil {
		return false, fmt.Errorf("docker save %s: %w: %s", ref, err, strings.TrimSpace(string(out)))
	}
	if err := c.LoadImageArchive(ctx, tar); err != nil {
		return false, err
	}
	c.cfg.Logf("[kind] %s loaded into %d nodes", ref, len(c.all))
	return true, nil
}

func (c *Cluster) loadImages(ctx context.Context) error {
	if c.cfg.ImagesDir == "" {
		return nil
	}
	tars, _ := filepath.Glob(filepath.Join(c.cfg.ImagesDir, "*.tar"))
	start := time.Now()
	// One archive for the images that share layers: each node imports every layer once.
	tars, err := images.Imports(tars, filepath.Join(c.cfg.Home, ".images"))
	if err != nil {
		return err
	}
	for _, t := range tars {
		if err := c.LoadImageArchive(ctx, t); err != nil {
			return err
		}
	}
	c.cfg.Logf("[kind] loaded %d image archive(s) into %d nodes in %s", len(tars), len(c.all), time.Since(start).Round(100*time.Millisecond))
	return nil
}

var _ cluster.Keeper = (*Cluster)(nil)

// Keep implements cluster.Keeper: the kind cluster lives in Docker, not in this process; its
// kubeconfig (a port Docker publishes on loopback) stays, and Down (or 'cluster down') removes
// both later.
func (c *Cluster) Keep(context.Context) (cluster.Kept, error) {
	return cluster.Kept{Kubeconfig: c.kubeconfig}, nil
}

// Down deletes the kind cluster, its kubeconfig and, when no cluster uses it any more, our
// Docker network. Safe to call twice.
func (c *Cluster) Down(ctx context.Context) error {
	var err error
	c.down.Do(func() {
		err = Down(c.cfg.Name, c.cfg.Logf)
	})
	return err
}

// Down removes the kind cluster Prefix+name (also one a crashed run left behind).
func Down(name string, logf func(string, ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	start := time.Now()
	p := kindcluster.NewProvider(kindcluster.ProviderWithDocker(), kindcluster.ProviderWithLogger(logger{logf}))
	kc := filepath.Join(Home(), name, "kubeconfig")
	err := p.Delete(Prefix+name, kc)
	os.RemoveAll(filepath.Dir(kc))
	// docker refuses to remove a network that has containers: another cluster of ours is up.
	if out, nerr := exec.Command("docker", "network", "rm", Network).CombinedOutput(); nerr != nil && !strings.Contains(string(out), "not found") && !strings.Contains(string(out), "active endpoints") {
		logf("[kind] docker network rm %s: %s", Network, strings.TrimSpace(string(out)))
	}
	logf("[down] kind %s removed in %s", Prefix+name, time.Since(start).Round(100*time.Millisecond))
	return err
}

// List names the kind clusters meshchaos created (without Prefix).
func List() ([]string, error) {
	if exec.Command("docker", "info").Run() != nil {
		return nil, nil // no Docker, no kind clusters
	}
	p := kindcluster.NewProvider(kindcluster.ProviderWithDocker())
	all, err := p.List()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range all {
		if rest, ok := strings.CutPrefix(n, Prefix); ok {
			out = append(out, rest)
		}
	}
	return out, nil
}

// --- cgroups ---

// nodeCgroup is the node container's cgroup path on the host (e.g. /docker/<id>): the root of
// everything that runs in the node.
func (c *Cluster) nodeCgroup(name string) (string, error) {
	p, err := c.pid(name)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		// The memory hierarchy on v1, the unified one ("0::") on v2.
		if f[1] == "memory" || (f[0] == "0" && f[1] == "") {
			// systemd, the node's PID 1, moves itself into init.scope below the container's
			// cgroup; kubelet's cgroups are siblings of that scope.
			return strings.TrimSuffix(f[2], "/init.scope"), nil
		}
	}
	return "", fmt.Errorf("node %s: no memory cgroup in /proc/%d/cgroup", name, p)
}

// find returns the cgroup path (host-relative) under a node whose last element satisfies
// match, searching the memory hierarchy breadth first; kubelet's layout there depends on its
// cgroup driver (kubepods/burstable/pod<uid> or kubelet-kubepods-burstable-pod<uid>.slice).
func (c *Cluster) find(name string, match func(string) bool) (string, error) {
	root, err := c.nodeCgroup(name)
	if err != nil {
		return "", err
	}
	g, err := cgroup.Open(root)
	if err != nil {
		return "", err
	}
	base := g.Dir("memory")
	if base == "" {
		return "", errors.New("no memory cgroup hierarchy")
	}
	queue := []string{""}
	for depth := 0; depth < 6 && len(queue) > 0; depth++ {
		var next []string
		for _, rel := range queue {
			ents, err := os.ReadDir(filepath.Join(base, rel))
			if err != nil {
				continue
			}
			for _, e := range ents {
				if !e.IsDir() {
					continue
				}
				r := filepath.Join(rel, e.Name())
				if match(e.Name()) {
					return filepath.Join(root, r), nil
				}
				next = append(next, r)
			}
		}
		queue = next
	}
	return "", fmt.Errorf("no matching cgroup under node %s (%s)", name, base)
}

// PodsCgroup is kubelet's kubepods cgroup on node k, as the host sees it.
func (c *Cluster) PodsCgroup(k int) (*cgroup.Group, error) {
	n, err := c.node(k)
	if err != nil {
		return nil, err
	}
	p, err := c.find(n.String(), func(s string) bool { return s == "kubepods" || s == "kubelet-kubepods.slice" || s == "kubepods.slice" })
	if err != nil {
		return nil, err
	}
	return cgroup.Open(p)
}

// PodCgroup is the cgroup of a pod (it outlives container restarts), as the host sees it.
func (c *Cluster) PodCgroup(pod *corev1.Pod) (*cgroup.Group, error) {
	var node nodes.Node
	for _, n := range c.all {
		if n.String() == pod.Spec.NodeName {
			node = n
		}
	}
	if node == nil {
		return nil, fmt.Errorf("pod %s/%s: node %q is not a node of cluster %s", pod.Namespace, pod.Name, pod.Spec.NodeName, c.Name())
	}
	uid := string(pod.UID)
	systemdUID := strings.ReplaceAll(uid, "-", "_")
	p, err := c.find(node.String(), func(s string) bool {
		return s == "pod"+uid || strings.HasSuffix(s, "-pod"+systemdUID+".slice")
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return cgroup.Open(p)
}

// KubeProxyCgroup is the cgroup of node k's kube-proxy pod.
func (c *Cluster) KubeProxyCgroup(k int) (*cgroup.Group, error) {
	n, err := c.node(k)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(c.rest)
	if err != nil {
		return nil, err
	}
	pods, err := cs.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{
		LabelSelector: "k8s-app=kube-proxy", FieldSelector: "spec.nodeName=" + n.String()})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) == 0 {
		return nil, fmt.Errorf("no kube-proxy pod on node %d (%s)", k, n)
	}
	return c.PodCgroup(&pods.Items[0])
}

// ImagePresent reports whether Docker has image locally.
func ImagePresent(image string) bool {
	return exec.Command("docker", "image", "inspect", image).Run() == nil
}

// Leftovers lists what the cluster named name left in Docker: containers and kubeconfig state.
func Leftovers(name string) []string {
	var out []string
	ids, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster="+Prefix+name).Output()
	for _, id := range strings.Fields(string(ids)) {
		out = append(out, "container "+id)
	}
	if _, err := os.Stat(filepath.Join(Home(), name)); err == nil {
		out = append(out, filepath.Join(Home(), name))
	}
	return out
}
