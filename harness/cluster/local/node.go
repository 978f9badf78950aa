package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/internal/proc"
	"github.com/meshchaos/meshchaos/images"
)

// node is one Kubernetes node: its own network namespace, containerd, kubelet and kube-proxy.
type node struct {
	k          int
	l          layout
	containerd *proc.Process
	kubelet    *proc.Process
	kubeProxy  *proc.Process
	proxyGroup *cgroup.Group
}

func (n *node) dir() string  { return n.l.nodeDir(n.k) }
func (n *node) sock() string { return filepath.Join(n.dir(), "containerd.sock") }

const cniBinDir = "/usr/lib/cni"

// writeConfigs writes containerd's, the CNI's, kubelet's and kube-proxy's configuration.
// clientCA is the cluster CA, which signed the certificate the apiserver calls kubelets with.
func (n *node) writeConfigs(clientCA string) error {
	d := n.dir()
	for _, sub := range []string{"cni.d", "kubelet", "pod-logs", "runc", "opt", "cni-ipam"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			return err
		}
	}
	containerd := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  # Root here cannot lower oom_score_adj; without this every sandbox fails to start.
  restrict_oom_score_adj = true
  # Pod network namespaces live under the state dir, so teardown finds every one of them.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[8]q
`, filepath.Join(d, "ctr-root"), filepath.Join(d, "ctr-state"), n.sock(), filepath.Join(d, "opt"),
		images.Ref("pause"), cniBinDir, filepath.Join(d, "cni.d"), filepath.Join(d, "runc"))

	cni := fmt.Sprintf(`{"cniVersion":"0.4.0","name":%q,"plugins":[
 {"type":"bridge","bridge":"mcbr0","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q,"gateway":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
`, n.l.cniNetwork(n.k), filepath.Join(d, "cni-ipam"), podCIDR(n.k), podGateway(n.k))

	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
# Port 10250 runs commands in pods and reads their logs: whoever reaches the node's address
# (a pod may) must be the apiserver (a client certificate from the cluster CA) or someone the
# apiserver vouches for (TokenReview) and authorizes (SubjectAccessReview, nodes/proxy…).
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: %[7]q}}
authorization: {mode: Webhook}
address: %[2]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
enforceNodeAllocatable: []
containerRuntimeEndpoint: unix://%[3]s
# Images are imported, never pulled: garbage collection must never remove them.
imageGCHighThresholdPercent: 100
evictionHard: {}
localStorageCapacityIsolation: false
serializeImagePulls: false
clusterDNS: [%[4]s]
clusterDomain: cluster.local
resolvConf: %[5]s
podLogsDir: %[6]s
nodeStatusUpdateFrequency: 5s
`, n.l.nodeCgroup(n.k), nodeIP(n.k), n.sock(), DNSServiceIP, filepath.Join(d, "resolv.conf"), filepath.Join(d, "pod-logs"), clientCA)

	kubeProxy := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: %[1]s}
clusterCIDR: %[2]s
hostnameOverride: %[3]s
# Leave conntrack sysctls alone: some are host-wide.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
iptables: {syncPeriod: 30s, minSyncPeriod: 1s}
`, n.l.kubeProxyKubeconfig(n.k), ClusterCIDR, n.l.nodeName(n.k))

	// Pods resolve through cluster DNS only; the host's resolvers are never handed to them.
	for name, body := range map[string]string{
		"containerd.toml": containerd, "cni.d/10-mcnet.conflist": cni,
		"kubelet.yaml": kubelet, "kube-proxy.yaml": kubeProxy, "resolv.conf": "options ndots:5\n",
	} {
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (n *node) startContainerd(ctx context.Context, path string) error {
	var err error
	n.containerd, err = proc.Start(proc.Spec{
		Name: fmt.Sprintf("n%d-containerd", n.k), Path: path, Dir: n.l.logDir(), Netns: n.l.nodeNetnsPath(n.k),
		Args: []string{"--config", filepath.Join(n.dir(), "containerd.toml")},
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if out, err := n.ctr(ctx, "version"); err == nil && strings.Contains(out, "Server") {
			return nil
		}
		if e := n.containerd.ExitError(); e != nil {
			return e
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd on node %d not answering after 30s; last log lines:\n%s", n.k, n.containerd.Tail(15))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ctr runs containerd's CLI against this node's containerd, in the k8s.io namespace (the CRI's).
func (n *node) ctr(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--address", n.sock(), "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, "ctr", full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// importImage loads an image tarball into the node's containerd.
func (n *node) importImage(ctx context.Context, tarPath string) error {
	_, err := n.ctr(ctx, "images", "import", tarPath)
	return err
}

func (n *node) startKubelet(path string) error {
	var err error
	n.kubelet, err = startKubeletAlone(func() (*proc.Process, error) {
		return proc.Start(proc.Spec{
			Name: fmt.Sprintf("n%d-kubelet", n.k), Path: path, Dir: n.l.logDir(), Netns: n.l.nodeNetnsPath(n.k),
			Args: []string{
				"--config=" + filepath.Join(n.dir(), "kubelet.yaml"),
				"--kubeconfig=" + n.l.nodeKubeconfig(n.k),
				"--node-ip=" + nodeIP(n.k).String(),
				"--hostname-override=" + n.l.nodeName(n.k),
				"--root-dir=" + filepath.Join(n.dir(), "kubelet"),
				"--cert-dir=" + filepath.Join(n.dir(), "kubelet", "pki"),
				"--node-labels=" + NodeLabel + "=" + fmt.Sprint(n.k),
				"--v=1",
			},
		})
	})
	return err
}

// NodeLabel carries a node's number (1, 2, …): experiments pin pods with a nodeSelector on it.
const NodeLabel = cluster.NodeLabel

func (n *node) startKubeProxy(path string) error {
	g, err := cgroup.Create(n.l.kubeProxyCgroup(n.k))
	if err != nil {
		return fmt.Errorf("kube-proxy cgroup: %w", err)
	}
	n.proxyGroup = g
	n.kubeProxy, err = proc.Start(proc.Spec{
		Name: fmt.Sprintf("n%d-kube-proxy", n.k), Path: path, Dir: n.l.logDir(), Netns: n.l.nodeNetnsPath(n.k),
		Args: []string{"--config=" + filepath.Join(n.dir(), "kube-proxy.yaml"), "--v=1"},
	})
	if err != nil {
		return err
	}
	// Moving the pid moves every thread; the iptables children it forks later inherit the group.
	return g.AddProcess(n.kubeProxy.Pid())
}

// stop ends kube-proxy and kubelet; containers and containerd go in teardown.
func (n *node) stop() {
	for _, p := range []*proc.Process{n.kubeProxy, n.kubelet} {
		if p != nil {
			_ = p.Stop(5 * time.Second)
		}
	}
}
