package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/meshchaos/meshchaos/harness/netns"
)

// setupNetwork builds the cluster's network entirely inside namespaces it creates:
//
//	hub (meshchaos-NAME):      bridge lan0 10.200.0.1/24 — etcd, kube-apiserver, controllers
//	node k (meshchaos-NAME-nk): eth0 10.200.0.(10+k)/24 (veth to lan0), pod bridge mcbr0 for
//	                            10.244.(k-1).0/24 (made by the CNI bridge plugin), default
//	                            route to the hub so Service IPs are routable before DNAT
//
// Pod CIDRs are routed node to node over the LAN. The host's own routes and firewall are
// never touched; the hub has no uplink, so nothing leaves the cluster.
func setupNetwork(ctx context.Context, l layout) error {
	hub := l.hubNetns()
	if err := ipCmd(ctx, "netns", "add", hub); err != nil {
		return err
	}
	steps := [][]string{
		{"-n", hub, "link", "set", "lo", "up"},
		{"-n", hub, "link", "add", "lan0", "type", "bridge"},
		{"-n", hub, "addr", "add", hubIP().String() + "/24", "dev", "lan0"},
		{"-n", hub, "link", "set", "lan0", "up"},
	}
	for k := 1; k <= l.nodes; k++ {
		n := l.nodeNetns(k)
		if err := ipCmd(ctx, "netns", "add", n); err != nil {
			return err
		}
		veth := fmt.Sprintf("vn%d", k)
		steps = append(steps,
			[]string{"-n", hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", n},
			[]string{"-n", hub, "link", "set", veth, "master", "lan0", "up"},
			[]string{"-n", n, "link", "set", "lo", "up"},
			[]string{"-n", n, "addr", "add", nodeIP(k).String() + "/24", "dev", "eth0"},
			[]string{"-n", n, "link", "set", "eth0", "up"},
			[]string{"-n", n, "route", "add", "default", "via", hubIP().String()},
			[]string{"-n", hub, "route", "add", podCIDR(k), "via", nodeIP(k).String()},
		)
		for j := 1; j <= l.nodes; j++ {
			if j != k {
				steps = append(steps, []string{"-n", n, "route", "add", podCIDR(j), "via", nodeIP(j).String()})
			}
		}
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return err
		}
	}
	for k := 1; k <= l.nodes; k++ {
		// Per-namespace sysctls: nodes forward pod traffic, and bridged pod-to-pod traffic
		// passes iptables so kube-proxy's DNAT is undone on replies from the same bridge.
		err := netns.Do(l.nodeNetnsPath(k), func() error {
			for _, s := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/bridge/bridge-nf-call-iptables"} {
				if err := os.WriteFile(s, []byte("1"), 0o644); err != nil {
					return fmt.Errorf("set %s in %s: %w", s, l.nodeNetns(k), err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// deleteNetns removes the cluster's namespaces (their veths and bridges go with them).
func deleteNetns(ctx context.Context, l layout) error {
	var errs []string
	for _, n := range clusterNetns(l) {
		if err := ipCmd(ctx, "netns", "del", n); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("delete network namespaces: %s", strings.Join(errs, "; "))
	}
	return nil
}

// clusterNetns lists the existing namespaces that belong to cluster l.name (any node count).
func clusterNetns(l layout) []string {
	ents, _ := os.ReadDir(netns.Dir)
	var out []string
	for _, e := range ents {
		n := e.Name()
		if n == l.hubNetns() || isNodeNetnsOf(n, l.hubNetns()+"-n") {
			out = append(out, n)
		}
	}
	return out
}

func isNodeNetnsOf(n, prefix string) bool {
	if !strings.HasPrefix(n, prefix) {
		return false
	}
	rest := n[len(prefix):]
	if rest == "" {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
