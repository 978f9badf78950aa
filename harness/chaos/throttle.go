package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster"
)

// CPUThrottle limits a cgroup to a CPU quota: kube-proxy (the control-plane OOM incident: a
// throttled kube-proxy keeps a dead endpoint in its rules for seconds), a pod, or every pod of a
// node (CPU starvation). Its evidence is the quota read back from the kernel and, on Clear, how
// often the kernel actually throttled the group.
type CPUThrottle struct {
	// Target names what is throttled in reports, e.g. "kube-proxy/node2".
	Target string
	// Group is the cgroup (cluster.Cluster's KubeProxyCgroup, PodCgroup or PodsCgroup).
	Group *cgroup.Group
	// CPUs is the quota, e.g. 0.02 for 2 % of one CPU.
	CPUs float64

	before cgroup.CPUStat
	prev   float64
}

// Name implements Injector.
func (k *CPUThrottle) Name() string { return "cpu-throttle/" + k.Target }

// Inject sets the quota and reads it back from the kernel.
func (k *CPUThrottle) Inject(_ context.Context) (Evidence, error) {
	if k.CPUs <= 0 {
		return Evidence{}, errors.New("cpu throttle: CPUs must be > 0")
	}
	st, err := k.Group.CPUStat()
	if err != nil {
		return Evidence{}, fmt.Errorf("cpu throttle %s: %w", k.Target, err)
	}
	k.before = st
	if k.prev, err = k.Group.CPUQuota(); err != nil {
		return Evidence{}, fmt.Errorf("cpu throttle %s: %w", k.Target, err)
	}
	if err := k.Group.SetCPUQuota(k.CPUs); err != nil {
		return Evidence{}, fmt.Errorf("cpu throttle %s: set quota: %w", k.Target, err)
	}
	got, err := k.Group.CPUQuota()
	if err != nil {
		return Evidence{}, err
	}
	if got <= 0 || got > k.CPUs*1.01+0.01 {
		return Evidence{}, fmt.Errorf("cpu throttle %s: quota reads back as %.3f CPUs, wanted %.3f", k.Target, got, k.CPUs)
	}
	return Evidence{At: time.Now(), Summary: fmt.Sprintf("%s limited to %.3f CPU", k.Target, got),
		Values: map[string]float64{"quotaCPUs": got}}, nil
}

// Clear restores the quota the group had and reports how often the kernel throttled it meanwhile.
func (k *CPUThrottle) Clear(_ context.Context) (Evidence, error) {
	st, serr := k.Group.CPUStat()
	if err := k.Group.SetCPUQuota(k.prev); err != nil {
		return Evidence{}, fmt.Errorf("cpu throttle %s: restore quota: %w", k.Target, err)
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
		Summary: fmt.Sprintf("%s throttled in %d of %d periods (%s)", k.Target, d.ThrottledPeriods, d.Periods, d.ThrottledTime.Round(time.Millisecond)),
		Values: map[string]float64{
			"periods": float64(d.Periods), "throttledPeriods": float64(d.ThrottledPeriods),
			"throttledSeconds": d.ThrottledTime.Seconds(),
		}}, nil
}

// ProxyRules reads the Service rules kube-proxy (iptables mode) programmed on a node, to tell
// when an endpoint really left the data path.
type ProxyRules struct {
	Cluster cluster.Cluster
	Node    int
}

// Endpoints returns the set of "IP:PORT" DNAT targets in the nat table's KUBE-SEP chains.
func (r ProxyRules) Endpoints(ctx context.Context) (map[string]bool, error) {
	out, err := cluster.Query(ctx, r.Cluster, r.Node, "iptables-save", "-t", "nat")
	if err != nil {
		return nil, fmt.Errorf("read kube-proxy's rules: %w", err)
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
