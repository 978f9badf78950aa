package experiments

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshchaos/meshchaos/harness/chaos"
	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/mesh"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
)

// Incident 1: the control plane is OOM-killed and restarted at once while kube-proxy on the
// proxies' node is CPU-throttled, so the proxies reconnect to the restarted process before it
// has synced. An ungated control plane hands them an incomplete config: 503 NC / 404 NR.
func init() {
	register(kit.Definition{
		Name:    "cp-oom-restart",
		Summary: "control plane OOM-killed by the kernel while kube-proxy on the proxies' node is CPU-throttled (incident 1: 503 NC/NR from an unsynced restart)",
		Params: params.Set{
			params.Rate, params.Length, params.Steady,
			params.IntParam("hosts", 4, 1, 10000, "", "ServiceEntry hosts the traffic targets: spread over the order the API server lists them in, the last-listed included (dataPlane=grpc: the last-listed)"),
			params.IntParam("gateways", 3, 1, 20, "", "gateway replicas; each reconnects on its own jittered backoff, as a fleet of Envoys does"),
			params.IntParam("serviceEntries", 3000, 1, 20000, "", "ServiceEntries preloaded (a fresh control plane needs seconds to sync them)"),
			params.CPMemory.WithDefault("256Mi"),
			// Under this limit a restarted control plane needs seconds to work through its
			// initial state, as istiod did in the incident.
			params.CPCPU.WithDefault("100m"),
			params.FloatParam("kubeProxyCPU", 0.002, 0.001, 4, "CPUs", "kube-proxy's CPU quota on the gateways' node while throttled"),
			params.DurationParam("throttleWindow", 30*time.Second, time.Second, time.Hour, "how long kube-proxy stays throttled"),
			params.Nodes.WithDefault("2"),
			params.EnumParam("dataPlane", dataPlaneXDSProxy, []string{dataPlaneXDSProxy, dataPlaneGRPC},
				"the proxies that reconnect: xdsproxy gateways (HTTP traffic through them), or grpc, proxyless grpc-go clients (xds:/// with grpc-go's own resolver and balancers; one per gateway, a channel per host, rate RPCs a second in all)"),
		},
		Validate: func(v params.Values) error {
			if v.Int("hosts") > v.Int("serviceEntries") {
				return fmt.Errorf("hosts=%d: at most serviceEntries (%d)", v.Int("hosts"), v.Int("serviceEntries"))
			}
			if v.Bytes("cpMemoryLimit") == 0 {
				return fmt.Errorf("cpMemoryLimit: the OOM kill needs a memory limit")
			}
			return nil
		},
		Mesh: func(v params.Values) mesh.Spec {
			// The control plane on node 1, the gateways and backends on the last node: the
			// gateways reach the control plane through kube-proxy's rules on their node.
			gw := v.Int("nodes")
			if v.String("dataPlane") == dataPlaneGRPC {
				return mesh.Spec{
					Nodes:          v.Int("nodes"),
					CP:             subject.Placement{Node: 1, Ballast: true},
					Backends:       []mesh.Backend{{Name: "echo", Replicas: 2, Node: gw}},
					ServiceEntries: mesh.ServiceEntries{Count: v.Int("serviceEntries"), Backend: "echo"},
					// No gateway runs; its node is where the clients are, whose kube-proxy the
					// chaos throttles.
					Gateway: mesh.Gateway{Node: gw},
					// The hosts a restarted control plane loads last, as istio's proxies found
					// theirs missing (the gateways lose their routes either way).
					GRPC: mesh.GRPCClients{Clients: v.Int("gateways"), Node: gw, Hosts: v.Int("hosts"), Rate: v.Int(params.Rate.Name), LastListed: true},
				}
			}
			return mesh.Spec{
				Nodes:          v.Int("nodes"),
				CP:             subject.Placement{Node: 1, Ballast: true},
				Backends:       []mesh.Backend{{Name: "echo", Replicas: 2, Node: gw}},
				ServiceEntries: mesh.ServiceEntries{Count: v.Int("serviceEntries"), Backend: "echo"},
				// The traffic's hosts spread over the order the API server lists the
				// ServiceEntries in, the last-listed included: a control plane that serves
				// while it loads its initial state has some and lacks others, as the
				// incident's proxies found some clusters and not others.
				Gateway: mesh.Gateway{Replicas: v.Int("gateways"), Node: gw, Spread: true},
			}
		},
		Hosts: func(v params.Values) int { return v.Int("hosts") },
		Chaos: cpOOMChaos,
		NodeAccess: []string{
			"kube-proxy CPU throttle on the gateways' node (its cgroup's CPU quota)",
			"kube-proxy's iptables rules on that node (when the killed pod's endpoint leaves them)",
			"the control plane's memory cgroup (working set before the OOM kill)",
		},
		CPFaults: []string{"OOM-kills it (a memory hog in its container's cgroup, or its ballast hook)"},
		Checks: func(v params.Values) []runner.Check {
			if v.String("dataPlane") == dataPlaneGRPC {
				return []runner.Check{
					// Every RPC of the proxyless clients must succeed, as every request
					// through the gateways must: a channel handed a config without its
					// listener, cluster or endpoints fails its RPCs (UNAVAILABLE).
					runner.GRPCFailedRPCs(results.LE, 0),
					runner.GRPCNoConfig(results.LE, 0),
					runner.OOMKills(results.GE, 1),
					runner.Restarts(results.GE, 1),
				}
			}
			return []runner.Check{
				runner.StatusRate("5xx", results.LE, 0),
				// Also 404 NR (an emptied route table) and transport errors.
				runner.ErrorRate(results.LE, 0),
				runner.ErrorWindow(results.LE, 0),
				// Proof that the chaos happened: without a kernel OOM kill and a restart, a
				// clean run would mean nothing.
				runner.OOMKills(results.GE, 1),
				runner.Restarts(results.GE, 1),
			}
		},
	})
}

// cp-oom-restart's data planes (parameter dataPlane).
const (
	dataPlaneXDSProxy = "xdsproxy"
	dataPlaneGRPC     = "grpc"
)

func cpOOMChaos(ctx context.Context, s *kit.State) error {
	v, m, pod := s.Params, s.Mesh, s.CPPod
	gwNode := m.Spec.Gateway.Node
	kp, err := m.Cluster.KubeProxyCgroup(gwNode)
	if err != nil {
		return err
	}
	throttledAt := time.Now()
	if err := s.Inject(ctx, &chaos.CPUThrottle{Target: fmt.Sprintf("kube-proxy/node%d", gwNode), Group: kp, CPUs: v.Float("kubeProxyCPU")}); err != nil {
		return err
	}
	_, killedAt, err := oomKillControlPlane(ctx, s)
	if err != nil {
		return err
	}

	// The old endpoint leaves the proxies' node's rules only when kube-proxy gets to it.
	lagCtx, cancel := context.WithTimeout(ctx, v.Duration("throttleWindow"))
	gone, lagErr := chaos.ProxyRules{Cluster: m.Cluster, Node: gwNode}.WaitGone(lagCtx, pod.Status.PodIP, 50*time.Millisecond)
	cancel()
	if lagErr == nil {
		s.Event("kube-proxy.endpoint-removed", pod.Status.PodIP, fmt.Sprintf("%.1f s after the kill", gone.Sub(killedAt).Seconds()))
	} else {
		s.Event("kube-proxy.endpoint-kept", pod.Status.PodIP, "still in the rules at the end of the throttle window")
	}
	if _, err := waitControlPlaneReady(ctx, s, killedAt); err != nil {
		return err
	}
	return kit.Sleep(ctx, time.Until(throttledAt.Add(v.Duration("throttleWindow"))))
}

// oomKillControlPlane drives the control plane over its memory limit (its ballast hook, else a
// generic memory hog) until
// the kernel kills it (the harness does not: an OOM kill is the fault), and returns the ballast
// (to clear) and when the container ended. Only a kill after this call counts.
func oomKillControlPlane(ctx context.Context, s *kit.State) (*chaos.Ballast, time.Time, error) {
	v, m, pod := s.Params, s.Mesh, s.CPPod
	if s.Memory == nil {
		return nil, time.Time{}, fmt.Errorf("the control plane's memory cgroup is not readable on substrate %s: the ballast's effect cannot be proven", m.Cluster.Name())
	}
	since := time.Now().Add(-time.Second) // container timestamps have whole seconds
	// The pod as it is now, not as the setup saw it: after an earlier OOM kill (a soak's cycle)
	// its container has another id, by which the generic hog finds the container's cgroup.
	pod, err := m.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("the control plane's pod: %w", err)
	}
	// A control plane without a ballast hook gets the generic memory hog in its container's cgroup.
	limitMiB := int(v.Bytes("cpMemoryLimit") >> 20)
	b := &chaos.Ballast{Target: "control-plane", Usage: func() (int64, error) {
		u, err := s.Memory.ReadMemory()
		return u.WorkingSet, err
	}}
	if ballast, ok := s.CP.(subject.Ballaster); ok {
		b.URL, b.Dial = ballast.BallastURL(pod, 2*limitMiB), m.Cluster.Dialer(m.Spec.CP.Node)
	} else {
		b.MemoryHog = &chaos.MemoryHog{Cluster: m.Cluster, Pod: pod, Container: s.CP.Container(), MiB: 2 * limitMiB}
	}
	if err := s.Inject(ctx, b); err != nil {
		return nil, time.Time{}, err
	}
	killed, err := kube.WaitPod(ctx, m.Client, pod.Namespace, pod.Name, 2*time.Minute, func(p *corev1.Pod) (bool, error) {
		t := kube.LastTermination(p, s.CP.Container())
		return t != nil && t.Reason == "OOMKilled" && !t.FinishedAt.Time.Before(since), nil
	})
	if err != nil {
		return b, time.Time{}, fmt.Errorf("the control plane was not OOM-killed (memory limit %s): the chaos did not take effect: %w", v.String("cpMemoryLimit"), err)
	}
	// At the API's time of the kill (as the ready event after it), so that the time between
	// the two is the control plane's, not the harness's polling.
	killedAt, now := kube.LastTermination(killed, s.CP.Container()).FinishedAt.Time, time.Now().UTC()
	s.RecordEvent(results.Event{At: killedAt.UTC(), ObservedAt: &now, Kind: results.EventCPOOMKilled, Object: pod.Name,
		Detail: "the kernel OOM-killed the control plane (container status OOMKilled)"})
	return b, killedAt, nil
}

// waitControlPlaneReady waits for the control plane's pod to be Ready again after a kill at
// killedAt and puts the time it took on the timeline.
func waitControlPlaneReady(ctx context.Context, s *kit.State, killedAt time.Time) (time.Time, error) {
	pod := s.CPPod
	ready, err := kube.WaitPod(ctx, s.Mesh.Client, pod.Namespace, pod.Name, 3*time.Minute, func(p *corev1.Pod) (bool, error) {
		ok, at := kube.PodReady(p)
		return ok && at.After(killedAt), nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("the restarted control plane was not ready: %w", err)
	}
	_, readyAt := kube.PodReady(ready)
	now := time.Now().UTC()
	s.RecordEvent(results.Event{At: readyAt.UTC(), ObservedAt: &now, Kind: results.EventCPReady, Object: pod.Name,
		Detail: fmt.Sprintf("ready %.1f s after the kill", readyAt.Sub(killedAt).Seconds())})
	return readyAt, nil
}
