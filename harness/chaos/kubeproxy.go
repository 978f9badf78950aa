package chaos

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/harness/cgroup"
)

// KubeProxyThrottle limits a node's kube-proxy to a CPU quota, as in the control-plane OOM
// incident: a throttled kube-proxy keeps a dead or unready endpoint in its rules for seconds.
type KubeProxyThrottle struct {
	// Node names the node in reports.
	Node string
	// Group is kube-proxy's cgroup (local.Cluster.KubeProxyCgroup).
	Group *cgroup.Group
	// CPUs is the quota, e.g. 0.02 for 2 % of one CPU.
	CPUs float64

	before cgroup.CPUStat
}

// Name implements Injector.
func (k *KubeProxyThrottle) Name() string { return "kube-proxy-throttle/" + k.Node }

// Inject sets the quota and reads it back from the kernel.
func (k *KubeProxyThrottle) Inject(_ context.Context) (Evidence, error) {
	if k.CPUs <= 0 {
		return Evidence{}, errors.New("kube-proxy throttle: CPUs must be > 0")
	}
	st, err := k.Group.CPUStat()
	if err != nil {
		return Evidence{}, fmt.Errorf("kube-proxy throttle: %w", err)
	}
	k.before = st
	if err := k.Group.SetCPUQuota(k.CPUs); err != nil {
		return Evidence{}, fmt.Errorf("kube-proxy throttle: set quota: %w", err)
	}
	got, err := k.Group.CPUQuota()
	if err != nil {
		return Evidence{}, err
	}
	if got <= 0 || got > k.CPUs*1.01+0.01 {
		return Evidence{}, fmt.Errorf("kube-proxy throttle: quota reads back as %.3f CPUs, wanted %.3f", got, k.CPUs)
	}
	return Evidence{At: time.Now(), Summary: fmt.Sprintf("kube-proxy on %s limited to %.3f CPU", k.Node, got),
		Values: map[string]float64{"quotaCPUs": got}}, nil
}

// Clear lifts the quota and reports how often the kernel throttled kube-proxy meanwhile.
func (k *KubeProxyThrottle) Clear(_ context.Context) (Evidence, error) {
	st, serr := k.Group.CPUStat()
	if err := k.Group.SetCPUQuota(0); err != nil {
		return Evidence{}, fmt.Errorf("kube-proxy throttle: clear quota: %w", err)
	}
	if serr != nil {
		return Evidence{}, serr
	}
	d := cgroup.CPUStat{
		Periods:          st.Periods - k.before.Periods,
		ThrottledPeriods: st.ThrottledPeriods - k.before.ThrottledPeriods,
		ThrottledTime:    st.ThrottledTime - k.before.ThrottledTime,
	}
	return Evidence{At: time.Now(),
		Summary: fmt.Sprintf("kube-proxy on %s throttled in %d of %d periods (%s)", k.Node, d.ThrottledPeriods, d.Periods, d.ThrottledTime.Round(time.Millisecond)),
		Values: map[string]float64{
			"periods": float64(d.Periods), "throttledPeriods": float64(d.ThrottledPeriods),
			"throttledSeconds": d.ThrottledTime.Seconds(),
		}}, nil
}

// ProxyRules reads the Service rules kube-proxy (iptables mode) programmed in a node's network
// namespace, to tell when an endpoint really left the data path.
type ProxyRules struct {
	// Netns is the node's network namespace path.
	Netns string
}

// Endpoints returns the set of "IP:PORT" DNAT targets in the nat table's KUBE-SEP chains.
func (r ProxyRules) Endpoints(ctx context.Context) (map[string]bool, error) {
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+r.Netns, "--", "iptables-save", "-t", "nat").Output()
	if err != nil {
		return nil, fmt.Errorf("iptables-save in %s: %w", r.Netns, err)
	}
	return parseDNATTargets(string(out)), nil
}

func parseDNATTargets(save string) map[string]bool {
	eps := map[string]bool{}
	for _, line := range strings.Split(save, "\n") {
		if !strings.HasPrefix(line, "-A KUBE-SEP-") {
			continue
		}
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "--to-destination" {
				eps[f[i+1]] = true
			}
		}
	}
	return eps
}

// WaitGone polls until no DNAT target has the given IP, and returns when that happened.
func (r ProxyRules) WaitGone(ctx context.Context, ip string, every time.Duration) (time.Time, error) {
	for {
		eps, err := r.Endpoints(ctx)
		if err != nil {
			return time.Time{}, err
		}
		present := false
		for ep := range eps {
			if strings.HasPrefix(ep, ip+":") {
				present = true
				break
			}
		}
		if !present {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("endpoint %s still in kube-proxy's rules: %w", ip, ctx.Err())
		case <-time.After(every):
		}
	}
}
