package local

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"

	"github.com/meshchaos/meshchaos/harness/netns"
)

// MaxNodes bounds --nodes: each node is a containerd, a kubelet and a kube-proxy on 2 cores.
const MaxNodes = 8

// Address plan. Every cluster has the same plan: clusters never share a network namespace, so
// their addresses cannot collide, and nothing here is ever routed to the host.
const (
	// LANCIDR joins the control-plane namespace (hub) and the node namespaces.
	LANCIDR = "10.200.0.0/24"
	// ClusterCIDR holds the pod CIDRs: node k gets 10.244.(k-1).0/24.
	ClusterCIDR = "10.244.0.0/16"
	// ServiceCIDR is the Service ClusterIP range.
	ServiceCIDR = "10.96.0.0/16"
	// DNSServiceIP is the kube-dns Service's ClusterIP.
	DNSServiceIP = "10.96.0.10"
	// APIServerPort is the apiserver's port inside the hub namespace.
	APIServerPort = 6443
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$`)

// ValidateName checks a cluster name: it becomes part of namespace, cgroup and node names.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("cluster name %q: use 1-20 lowercase letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// Home is where cluster state lives: $MESHCHAOS_HOME, default ~/.cache/meshchaos.
func Home() string {
	if h := os.Getenv("MESHCHAOS_HOME"); h != "" {
		return h
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "meshchaos")
	}
	return filepath.Join(os.TempDir(), "meshchaos")
}

// layout names every resource a cluster owns on the host; teardown after a crash rebuilds it
// from the name alone.
type layout struct {
	name  string
	home  string
	nodes int
}

func (l layout) dir() string      { return filepath.Join(l.home, "clusters", l.name) }
func (l layout) marker() string   { return l.dir() + "/" } // in every component's command line
func (l layout) logDir() string   { return filepath.Join(l.dir(), "logs") }
func (l layout) cpDir() string    { return filepath.Join(l.dir(), "cp") }
func (l layout) hubNetns() string { return "meshchaos-" + l.name }
func (l layout) hubNetnsPath() string {
	return netns.Path(l.hubNetns())
}
func (l layout) kubeconfig() string     { return filepath.Join(l.dir(), "kubeconfig") }
func (l layout) cgroupRoot() string     { return "/meshchaos/" + l.name }
func (l layout) nodeNetns(k int) string { return fmt.Sprintf("meshchaos-%s-n%d", l.name, k) }
func (l layout) nodeNetnsPath(k int) string {
	return netns.Path(l.nodeNetns(k))
}
func (l layout) nodeName(k int) string   { return fmt.Sprintf("%s-n%d", l.name, k) }
func (l layout) nodeDir(k int) string    { return filepath.Join(l.dir(), fmt.Sprintf("n%d", k)) }
func (l layout) nodeCgroup(k int) string { return fmt.Sprintf("%s/n%d", l.cgroupRoot(), k) }
func (l layout) kubeProxyCgroup(k int) string {
	return l.nodeCgroup(k) + "/kube-proxy"
}

// nodeKubeconfig is kubelet's kubeconfig on node k: the node's own identity, not the admin's.
// Its name is the one it had when it held the admin's token.
func (l layout) nodeKubeconfig(k int) string { return filepath.Join(l.nodeDir(k), "kubeconfig") }

// kubeProxyKubeconfig is kube-proxy's kubeconfig on node k (system:kube-proxy).
func (l layout) kubeProxyKubeconfig(k int) string {
	return filepath.Join(l.nodeDir(k), "kubeconfig-kube-proxy")
}

// cniNetwork names node k's CNI network; the CNI result cache under /var/lib/cni is keyed by it.
func (l layout) cniNetwork(k int) string { return l.nodeNetns(k) }

func hubIP() net.IP           { return net.IPv4(10, 200, 0, 1).To4() }
func nodeIP(k int) net.IP     { return net.IPv4(10, 200, 0, byte(10+k)).To4() }
func podCIDR(k int) string    { return fmt.Sprintf("10.244.%d.0/24", k-1) }
func podGateway(k int) net.IP { return net.IPv4(10, 244, byte(k-1), 1).To4() }
func apiServerURL() string    { return fmt.Sprintf("https://%s:%d", hubIP(), APIServerPort) }
