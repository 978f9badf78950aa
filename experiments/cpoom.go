package experiments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cpmanifests "github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/harness/chaos"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/traffic"
	"github.com/meshchaos/meshchaos/results"
	wlmanifests "github.com/meshchaos/meshchaos/workloads/manifests"
)

func init() {
	register(Definition{
		Name:        "cp-oom-restart",
		Description: "control plane OOM-killed by the kernel while kube-proxy on the proxies' node is CPU-throttled (incident 1: 503 NC/NR from an unsynced restart)",
		Params: []Param{
			{Name: "rate", Default: "50", Kind: "int", Help: "requests per second through the gateway"},
			{Name: "duration", Default: "60s", Kind: "duration", Help: "traffic duration (steady state, chaos, recovery)"},
			{Name: "steady", Default: "10s", Kind: "duration", Help: "clean traffic before the chaos"},
			{Name: "hosts", Default: "4", Kind: "int", Help: "ServiceEntry hosts the traffic targets"},
			{Name: "gateways", Default: "3", Kind: "int", Help: "gateway replicas; each reconnects to the restarted control plane on its own jittered backoff, as a fleet of Envoys does"},
			{Name: "serviceEntries", Default: "3000", Kind: "int", Help: "ServiceEntries preloaded (a fresh control plane needs seconds to sync them)"},
			{Name: "cpMemoryLimit", Default: "256Mi", Kind: "quantity", Help: "the control plane's memory limit"},
			{Name: "cpCPULimit", Default: "100m", Kind: "string", Help: "the control plane's CPU limit: under it a restarted control plane needs seconds to work through its initial state, as istiod did in the incident (\"\" for none)"},
			{Name: "kubeProxyCPU", Default: "0.002", Kind: "float", Help: "CPU quota of kube-proxy on the gateway's node while throttled"},
			{Name: "throttleWindow", Default: "30s", Kind: "duration", Help: "how long kube-proxy stays throttled"},
			{Name: "nodes", Default: "2", Kind: "int", Help: "cluster nodes: the control plane on node 1, gateway and backends on node 2"},
		},
		Build: buildCPOOM,
	})
}

// cpoom is one run of cp-oom-restart.
type cpoom struct {
	env     Env
	p       Values
	gate    bool
	regress []string

	cluster    *local.Cluster
	cs         kubernetes.Interface
	cpNode     int
	gwNode     int
	cpNS       string
	cpPod      *corev1.Pod
	adminURL   string
	gatewayIPs []string
}

func buildCPOOM(env Env, p Values) (runner.Experiment, error) {
	gate, sw, err := controlPlaneFlags(env.ControlPlane)
	if err != nil {
		return runner.Experiment{}, err
	}
	if _, err := regress.Parse(sw); err != nil {
		return runner.Experiment{}, fmt.Errorf("--cp %s: %w", env.ControlPlane, err)
	}
	if env.Substrate != "local" {
		return runner.Experiment{}, fmt.Errorf("--substrate %s: cp-oom-restart runs on the local substrate (kind support comes with the kind substrate)", env.Substrate)
	}
	if n := p.Int("nodes"); n < 1 || n > local.MaxNodes {
		return runner.Experiment{}, fmt.Errorf("--set nodes=%d: choose 1 to %d", n, local.MaxNodes)
	}
	if p.Int("hosts") < 1 || p.Int("hosts") > p.Int("serviceEntries") {
		return runner.Experiment{}, fmt.Errorf("--set hosts=%d: choose 1 to serviceEntries (%d)", p.Int("hosts"), p.Int("serviceEntries"))
	}
	if p.Int("gateways") < 1 {
		return runner.Experiment{}, errors.New("--set gateways: at least 1")
	}
	if p.Duration("steady") >= p.Duration("duration") {
		return runner.Experiment{}, errors.New("--set steady must be shorter than duration")
	}
	x := &cpoom{env: env, p: p, gate: gate, regress: sw, cpNS: "meshchaos-system", cpNode: 1, gwNode: 2}
	if p.Int("nodes") == 1 {
		x.gwNode = 1
	}
	params := map[string]string{}
	for k, v := range p {
		params[k] = v
	}
	return runner.Experiment{
		Name: "cp-oom-restart", Substrate: env.Substrate, ControlPlane: env.ControlPlane, Params: params,
		Setup:    x.setup,
		Phases:   []runner.Phase{{Name: "chaos", Do: x.chaos}, {Name: "recovery", Do: x.recovery}},
		Teardown: x.teardown,
		Checks: []runner.Check{
			runner.StatusRate("5xx", results.LE, 0),
			// Also 404 NR (an emptied route table) and transport errors.
			runner.ErrorRate(results.LE, 0),
			runner.ErrorWindow(results.LE, 0),
			// Proof that the chaos happened: without a kernel OOM kill and a restart, a clean
			// run would mean nothing.
			runner.OOMKills(results.GE, 1),
			runner.Restarts(results.GE, 1),
		},
	}, nil
}

func (x *cpoom) setup(ctx context.Context, r *runner.Run) error {
	name := fmt.Sprintf("oom%d", os.Getpid()%100000)
	r.Logf("cluster %s: %d node(s)", name, x.p.Int("nodes"))
	if x.p.Int("nodes") == 1 {
		r.Event("note", "cluster", "1 node: control plane and gateway share it (the incident had them on different nodes)")
	}
	c, err := local.Up(ctx, local.Config{Name: name, Nodes: x.p.Int("nodes"), Home: x.env.Home, ImagesDir: x.env.ImagesDir, Logf: r.Logf})
	if err != nil {
		return fmt.Errorf("bring the cluster up: %w", err)
	}
	x.cluster = c
	r.Event("cluster.up", name, fmt.Sprintf("%d node(s)", x.p.Int("nodes")))
	cfg := c.RESTConfig()
	if x.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := cpmanifests.InstallCRDs(ctx, cfg); err != nil {
		return fmt.Errorf("install Istio CRDs: %w", err)
	}

	// Backends and their ServiceEntries.
	echo, err := wlmanifests.Render("echo", wlmanifests.Values{Substrate: wlmanifests.Local(), Replicas: 2})
	if err != nil {
		return err
	}
	if err := applyPinned(ctx, cfg, echo, x.gwNode); err != nil {
		return fmt.Errorf("deploy echo: %w", err)
	}
	if err := local.WaitDeploymentReady(ctx, x.cs, "default", "echo", 2*time.Minute); err != nil {
		return err
	}
	ips, err := podIPs(ctx, x.cs, "default", "app=echo")
	if err != nil {
		return err
	}
	if err := createServiceEntries(ctx, cfg, "default", x.p.Int("serviceEntries"), ips, r.Logf); err != nil {
		return err
	}
	r.Event("config.loaded", "serviceentries", fmt.Sprintf("%d ServiceEntries, %d endpoints each", x.p.Int("serviceEntries"), len(ips)))

	// The control plane, with the memory limit the chaos drives it over.
	cpYAML, err := cpmanifests.ControlPlane(cpmanifests.Params{Namespace: x.cpNS, SyncGate: x.gate, Regress: x.regress, MemoryLimit: x.p["cpMemoryLimit"]})
	if err != nil {
		return err
	}
	start := time.Now()
	if err := applyPinned(ctx, cfg, cpYAML, x.cpNode, cpuLimit("meshchaos-controlplane", x.p["cpCPULimit"])); err != nil {
		return fmt.Errorf("deploy the control plane: %w", err)
	}
	if err := local.WaitDeploymentReady(ctx, x.cs, x.cpNS, "meshchaos-controlplane", 3*time.Minute); err != nil {
		return err
	}
	r.Event("cp.ready", "meshchaos-controlplane", fmt.Sprintf("first start ready in %s with %d ServiceEntries", time.Since(start).Round(100*time.Millisecond), x.p.Int("serviceEntries")))
	svc, err := x.cs.CoreV1().Services(x.cpNS).Get(ctx, "meshchaos-controlplane", metav1.GetOptions{})
	if err != nil {
		return err
	}

	// The gateway on the other node reaches the control plane through its Service, so through
	// kube-proxy's rules on that node: the path the incident's Envoys took.
	gw, err := wlmanifests.Render("gateway", wlmanifests.Values{Substrate: wlmanifests.Local(), Replicas: x.p.Int("gateways"),
		XDSAddress: net.JoinHostPort(svc.Spec.ClusterIP, "15010")})
	if err != nil {
		return err
	}
	if err := applyPinned(ctx, cfg, gw, x.gwNode); err != nil {
		return fmt.Errorf("deploy the gateway: %w", err)
	}
	if err := local.WaitDeploymentReady(ctx, x.cs, "default", "gateway", 2*time.Minute); err != nil {
		return err
	}
	// Traffic goes to every gateway pod: through the Service, kept-alive connections could all
	// stick to one replica and miss another that lost its routes.
	if x.gatewayIPs, err = podIPs(ctx, x.cs, "default", "app=gateway"); err != nil {
		return err
	}
	if x.cpPod, err = x.controlPlanePod(ctx); err != nil {
		return err
	}
	x.adminURL = "http://" + net.JoinHostPort(x.cpPod.Status.PodIP, "15014")
	if err := x.waitRoutes(ctx); err != nil {
		return err
	}
	r.Event("gateway.ready", "gateway", fmt.Sprintf("%d replica(s) route %d hosts", len(x.gatewayIPs), x.p.Int("hosts")))
	return nil
}

// waitRoutes waits until the gateway answers 200 for every target host.
func (x *cpoom) waitRoutes(ctx context.Context) error {
	client := &http.Client{Transport: &http.Transport{DialContext: x.cluster.Dialer(x.gwNode)}, Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(2 * time.Minute)
	for _, t := range x.targets() {
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
			req.Host = t.Header.Get("Host")
			resp, err := client.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("gateway %s never routed %s: %v", t.URL, req.Host, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// targets are every (gateway pod, host) pair, round robin.
func (x *cpoom) targets() []traffic.Target {
	var out []traffic.Target
	for i := 0; i < x.p.Int("hosts"); i++ {
		for _, ip := range x.gatewayIPs {
			out = append(out, traffic.Target{Method: http.MethodGet, URL: "http://" + net.JoinHostPort(ip, "80") + "/",
				Header: http.Header{"Host": []string{seHost(i)}}})
		}
	}
	return out
}

func (x *cpoom) controlPlanePod(ctx context.Context) (*corev1.Pod, error) {
	pods, err := x.cs.CoreV1().Pods(x.cpNS).List(ctx, metav1.ListOptions{LabelSelector: "app=meshchaos-controlplane"})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) != 1 {
		return nil, fmt.Errorf("want 1 control-plane pod, found %d", len(pods.Items))
	}
	return &pods.Items[0], nil
}

func (x *cpoom) chaos(ctx context.Context, r *runner.Run) error {
	if err := r.StartTraffic(traffic.Options{Name: "gateway", Targets: x.targets(), Rate: x.p.Int("rate"),
		Duration: x.p.Duration("duration"), DialContext: x.cluster.Dialer(x.gwNode)}); err != nil {
		return err
	}
	if err := r.WatchPods(x.cs, x.cpNS, "app=meshchaos-controlplane"); err != nil {
		return err
	}
	r.Profile(x.adminURL, x.cluster.Dialer(x.cpNode), 0, false)
	r.ScrapeMetrics(x.adminURL+"/metrics", x.cluster.Dialer(x.cpNode), 500*time.Millisecond, keepCPMetric)
	g, err := x.cluster.PodCgroup(x.cpPod)
	if err != nil {
		return err
	}
	mem, err := observe.OpenCgroupMemory(filepath.Join("/sys/fs/cgroup/memory", g.Path))
	if err != nil {
		return fmt.Errorf("control plane memory cgroup: %w", err)
	}
	// 70 % leaves the profiler time to capture the heap under the CPU limit before the kill.
	r.WatchMemory(mem, 0.7)
	gw := &gatewayWatch{ips: x.gatewayIPs, dial: x.cluster.Dialer(x.gwNode), every: 100 * time.Millisecond}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); gw.run(watchCtx, r) }()
	defer func() { stopWatch(); <-watchDone }()

	if err := sleep(ctx, x.p.Duration("steady")); err != nil {
		return err
	}
	kp, err := x.cluster.KubeProxyCgroup(x.gwNode)
	if err != nil {
		return err
	}
	throttle := &chaos.KubeProxyThrottle{Node: x.cluster.Nodes()[x.gwNode-1], Group: kp, CPUs: x.p.Float("kubeProxyCPU")}
	ev, err := throttle.Inject(ctx)
	if err != nil {
		return err
	}
	throttledAt := time.Now()
	r.Event("chaos.injected", throttle.Name(), ev.Summary)
	defer func() {
		if ev, err := throttle.Clear(context.Background()); err == nil {
			r.Event("chaos.cleared", throttle.Name(), ev.Summary)
		} else {
			r.Event("chaos.error", throttle.Name(), err.Error())
		}
	}()

	// Drive the control plane over its limit: the kernel, not us, must kill it.
	limitMiB, _ := parseQuantityMiB(x.p["cpMemoryLimit"])
	// 40 MiB/s: fast enough to kill within seconds, slow enough that the heap profile taken at
	// 70 % of the limit completes before the kernel strikes.
	if err := x.post(ctx, fmt.Sprintf("%s/debug/ballast?mb=%d&step=4&every=100ms", x.adminURL, 2*limitMiB)); err != nil {
		return fmt.Errorf("start the memory ballast: %w", err)
	}
	r.Event("chaos.injected", "cp-memory", fmt.Sprintf("ballast growing towards %d MiB against a %s limit", 2*limitMiB, x.p["cpMemoryLimit"]))
	killedAt, err := x.waitOOMKilled(ctx, 2*time.Minute)
	if err != nil {
		return err
	}
	r.Event("cp.oomkilled", x.cpPod.Name, "the kernel OOM-killed the control plane (container status OOMKilled)")

	// The old endpoint leaves the proxies' node's rules only when kube-proxy gets to it.
	rules := chaos.ProxyRules{Netns: x.cluster.NodeNetns(x.gwNode)}
	lagCtx, cancel := context.WithTimeout(ctx, x.p.Duration("throttleWindow"))
	gone, lagErr := rules.WaitGone(lagCtx, x.cpPod.Status.PodIP, 50*time.Millisecond)
	cancel()
	if lagErr == nil {
		r.Event("kube-proxy.endpoint-removed", x.cpPod.Status.PodIP, fmt.Sprintf("%.1f s after the kill", gone.Sub(killedAt).Seconds()))
	} else {
		r.Event("kube-proxy.endpoint-kept", x.cpPod.Status.PodIP, "still in the rules at the end of the throttle window")
	}
	readyAt, err := x.waitReady(ctx, killedAt, 3*time.Minute)
	if err != nil {
		return err
	}
	r.Event("cp.ready", x.cpPod.Name, fmt.Sprintf("ready %.1f s after the kill", readyAt.Sub(killedAt).Seconds()))
	return sleep(ctx, time.Until(throttledAt.Add(x.p.Duration("throttleWindow"))))
}

func (x *cpoom) recovery(ctx context.Context, r *runner.Run) error {
	err := r.WaitTraffic(ctx)
	recordCPCounters(r)
	return err
}

func (x *cpoom) teardown(ctx context.Context, r *runner.Run) error {
	if x.cluster == nil {
		return nil
	}
	return x.cluster.Down(ctx)
}

func (x *cpoom) post(ctx context.Context, url string) error {
	client := &http.Client{Transport: &http.Transport{DialContext: x.cluster.Dialer(x.cpNode)}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: HTTP %d: %s", url, resp.StatusCode, b)
	}
	return nil
}

// waitOOMKilled waits for the container's last termination to be the kernel's OOM kill and
// returns when it happened (from the API).
func (x *cpoom) waitOOMKilled(ctx context.Context, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		p, err := x.cs.CoreV1().Pods(x.cpNS).Get(ctx, x.cpPod.Name, metav1.GetOptions{})
		if err == nil && len(p.Status.ContainerStatuses) > 0 {
			st := p.Status.ContainerStatuses[0]
			for _, t := range []*corev1.ContainerStateTerminated{st.LastTerminationState.Terminated, st.State.Terminated} {
				if t != nil && t.Reason == "OOMKilled" {
					return t.FinishedAt.Time, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the control plane was not OOM-killed within %s (memory limit %s): the chaos did not take effect", timeout, x.p["cpMemoryLimit"])
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// waitReady waits until the restarted control plane is Ready again.
func (x *cpoom) waitReady(ctx context.Context, after time.Time, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		p, err := x.cs.CoreV1().Pods(x.cpNS).Get(ctx, x.cpPod.Name, metav1.GetOptions{})
		if err == nil {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && c.LastTransitionTime.After(after) {
					return c.LastTransitionTime.Time, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the restarted control plane was not ready within %s", timeout)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
