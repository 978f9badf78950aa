package experiments

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	istioapi "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshchaos/meshchaos/experiments/cpstarve"
	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/chaos"
	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/mesh"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
)

// Incident 3: a business pod on the node that also ran the control plane and the ingress
// gateways burnt the node's CPU. The control plane stayed Running while its xDS and webhook
// ports served nothing; the gateways lost their xDS stream; the validation webhook failed open
// and the injection webhook failed closed. Node 1 (the busy node) is confined to a CPU budget
// (its kubepods cgroup gets a quota), so the rest of the machine keeps running the harness;
// within it pods compete by cpu.shares, as on a real node.
//
// The incident's configuration is the default: no requests or limits on the control plane
// (BestEffort: 2 shares against the neighbour's request-derived shares), one replica, on the
// busy node with the gateways. The mitigations are parameters.

// starveNamespace is the injected namespace the admission probes create pods in.
const starveNamespace = "starve-apps"

func init() {
	register(kit.Definition{
		Name:    "cp-cpu-starvation",
		Summary: "a noisy neighbour exhausts the CPU of the node running the control plane and the gateways (incident 3: Running but serving nothing, webhooks fail open/closed)",
		// Its probes admit a pod through the control plane's injection webhook.
		Needs: func(cp subject.ControlPlane) error {
			if _, ok := cp.(subject.Injector); !ok {
				return errors.New("needs a control plane with an injection webhook (the reference, istiod): its probes admit pods through it")
			}
			return nil
		},
		Params: params.Set{
			params.Rate.WithDefault("20"), params.Length.WithDefault("70s"), params.Steady.WithDefault("8s"),
			params.Nodes.WithDefault("2"),
			params.IntParam("serviceEntries", 200, 1, 20000, "", "ServiceEntries preloaded (a fresh subscription receives all of them)"),
			params.IntParam("hosts", 2, 1, 10000, "", "ServiceEntry hosts the traffic targets"),
			params.IntParam("gateways", 2, 1, 20, "", "gateway replicas"),
			params.FloatParam("nodeCPU", 1, 0.1, 8, "CPUs", "CPU budget of the busy node's pods (a quota on its kubepods cgroup)"),
			// Two fully busy workers: the neighbour wants the whole (2-core) node; the budget
			// confines it. A fractional value duty-cycles the workers, and the control plane
			// runs in the gaps.
			params.FloatParam("neighbourCPUs", 2, 0.1, 8, "CPUs", "CPU the noisy neighbour burns and requests (its cpu.shares); whole numbers keep it busy without gaps"),
			params.EnumParam("neighbour", chaos.ShapeCPU, []string{chaos.ShapeCPU, chaos.ShapeDownload},
				"the neighbour's load: cpu (busy workers) or download (a server streaming 150 MiB files to a client pod, as in the incident)"),
			params.IntParam("downloadStreams", 8, 1, 256, "", "concurrent downloads the client keeps running (neighbour=download)"),
			params.DurationParam("window", 30*time.Second, 5*time.Second, time.Hour, "how long the neighbour saturates the node"),
			params.DurationParam("baseline", 5*time.Second, time.Second, time.Minute, "probing under the budget before the neighbour starts: what the availability in the window is held against"),
			params.DurationParam("recoveryWait", 20*time.Second, time.Second, 10*time.Minute, "longest wait after the window for the mesh to serve again"),
			params.DurationParam("xdsDeadline", time.Second, 50*time.Millisecond, time.Minute, "a new proxy's deadline for its first xDS response"),
			params.DurationParam("configEvery", 2*time.Second, 100*time.Millisecond, time.Minute, "a new ServiceEntry every so often during the window"),
			// Checks.
			params.FloatParam("minAvailability", 99, 0, 100, "%", "xDS availability (and injection) in the window at least, as a share of the baseline's"),
			params.DurationParam("maxStalenessP99", 5*time.Second, 0, time.Hour, "P99 time from a ServiceEntry's creation to every gateway serving it, at most"),
			params.DurationParam("maxRecovery", 10*time.Second, 0, time.Hour, "time from the window's end until xDS and traffic are clean again, at most"),
			// Mitigations; the defaults are the incident's configuration.
			params.EnumParam("cpQoS", "besteffort", []string{"besteffort", "burstable", "guaranteed"},
				"control plane resources: besteffort (none: the incident), burstable (its own 100m request), guaranteed (requests = limits = cpCPULimit, cpMemoryLimit)"),
			params.CPCPU.WithDefault("500m"), params.CPMemory.WithDefault("512Mi"),
			params.IntParam("cpReplicas", 1, 1, 8, "", "control-plane replicas (spread over nodes by pod anti-affinity)"),
			params.EnumParam("cpPriority", "false", []string{"false", "true"}, "give the control plane a high PriorityClass"),
			params.EnumParam("isolate", "false", []string{"false", "true"}, "run the control plane and the gateways on a node without business pods (the last node)"),
		},
		Validate: func(v params.Values) error {
			if v.String("cpQoS") == "guaranteed" && (v.String("cpCPULimit") == "" || v.String("cpMemoryLimit") == "") {
				return errors.New("cpQoS=guaranteed: needs cpCPULimit and cpMemoryLimit (requests are set to them)")
			}
			if v.String("isolate") == "true" && v.Int("nodes") < 2 {
				return errors.New("isolate=true: needs nodes=2 or more (the busy node and a mesh node)")
			}
			if v.Int("hosts") > v.Int("serviceEntries") {
				return fmt.Errorf("hosts=%d: at most serviceEntries (%d)", v.Int("hosts"), v.Int("serviceEntries"))
			}
			if need := v.Duration("steady") + v.Duration("baseline") + v.Duration("window") + 5*time.Second; v.Duration("duration") < need {
				return fmt.Errorf("duration=%s: at least steady + baseline + window + 5s (%s), so traffic covers the window and the recovery", v.String("duration"), need)
			}
			return nil
		},
		Mesh:   starveMesh,
		Hosts:  func(v params.Values) int { return v.Int("hosts") },
		Chaos:  starveChaos,
		Checks: starveChecks,
		NodeAccess: []string{
			"node 1's CPU budget (a CPU quota on its pods' cgroup)",
			"CPU use of node 1's pods and of the control plane (their cgroups)",
			"the noisy neighbour's cgroup (its CPU use)",
		},
		CPFaults: []string{"starves it of CPU (node 1's CPU budget, shared with a noisy neighbour)"},
	})
}

// busyNode is where the noisy neighbour runs.
const busyNode = 1

func starveMesh(v params.Values) mesh.Spec {
	nodes := v.Int("nodes")
	meshNode := busyNode
	if v.String("isolate") == "true" {
		meshNode = nodes
	}
	cp := subject.Placement{Node: meshNode, Replicas: v.Int("cpReplicas")}
	switch v.String("cpQoS") {
	case "besteffort":
		cp.QoS = subject.QoSBestEffort
	case "guaranteed":
		cp.QoS, cp.CPULimit, cp.MemoryLimit = subject.QoSGuaranteed, v.String("cpCPULimit"), v.String("cpMemoryLimit")
	default:
		cp.MemoryLimit = v.String("cpMemoryLimit")
	}
	if cp.Replicas > 1 {
		// More replicas may use every node the placement allows, one per node where they can.
		cp.Nodes = []int{meshNode}
		for k := 1; k <= nodes; k++ {
			if k != meshNode && (v.String("isolate") != "true" || k != busyNode) {
				cp.Nodes = append(cp.Nodes, k)
			}
		}
	}
	if v.String("cpPriority") == "true" {
		cp.PriorityClass = "meshchaos-control-plane"
	}
	return mesh.Spec{
		Nodes:          nodes,
		CP:             cp,
		Backends:       []mesh.Backend{{Name: "echo", Replicas: 2, Node: nodes}},
		ServiceEntries: mesh.ServiceEntries{Count: v.Int("serviceEntries"), Backend: "echo"},
		Gateway:        mesh.Gateway{Replicas: v.Int("gateways"), Node: meshNode},
	}
}

func starveChaos(ctx context.Context, s *kit.State) error {
	v, m := s.Params, s.Mesh
	pods, err := m.Cluster.PodsCgroup(busyNode)
	if err != nil {
		return err
	}
	if err := createInjectedNamespace(ctx, s, starveNamespace); err != nil {
		return err
	}
	// The xDS probe speaks as a new sidecar of the mesh's namespace: on the secure port (the
	// default where the control plane serves one) with that namespace's token.
	xdsOpts, err := m.HostXDSDialOptions(ctx, m.Namespace)
	if err != nil {
		return err
	}
	prober := &observe.Prober{As: observe.RoleControlPlane, Probes: starveProbes(s, pods, xdsOpts)}
	if err := s.Measure(prober); err != nil {
		return err
	}
	if err := s.Inject(ctx, &chaos.CPUThrottle{Target: fmt.Sprintf("pods/node%d", busyNode), Group: pods, CPUs: v.Float("nodeCPU")}); err != nil {
		return err
	}
	if err := kit.Sleep(ctx, v.Duration("baseline")); err != nil {
		return err
	}
	// The hog's own proof asks only 5 % of what it wants: it is confined to the node's budget,
	// and the node gets what the shared host leaves it (with its load in the tens, a fraction
	// of a CPU; the load is on the timeline). The proof that matters is relative: the check
	// on how the busy node's CPU was split.
	hog := &chaos.NoisyNeighbour{Cluster: m.Cluster, Client: m.Client, Node: busyNode, CPUs: v.Float("neighbourCPUs"), MinShare: 0.05,
		Shape: v.String("neighbour"), Streams: v.Int("downloadStreams")}
	if v.String("isolate") == "true" {
		// The last node is the mesh's own: the downloads' client stays on the busy node.
		hog.ClientNode = busyNode
	}
	hostLoad(s, "at the window's start")
	start := time.Now()
	prober.MarkStart(start)
	if err := s.Inject(ctx, hog); err != nil {
		return err
	}
	stale := &staleness{s: s, prober: prober}
	end := start.Add(v.Duration("window"))
	tick := time.NewTicker(v.Duration("configEvery"))
	for time.Now().Before(end) {
		stale.create(ctx)
		select {
		case <-ctx.Done():
			tick.Stop()
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
	tick.Stop()
	if err := s.Clear(ctx, hog); err != nil {
		return err
	}
	prober.MarkEnd(time.Now())
	hostLoad(s, "at the window's end")
	// Recovery: every change made in the window served, and the control plane serving new
	// proxies again, or recoveryWait.
	deadline := time.Now().Add(v.Duration("recoveryWait"))
	stale.wait(deadline)
	_ = kube.Poll(ctx, 500*time.Millisecond, func(context.Context) (bool, error) {
		return time.Now().After(deadline) || recovered(prober.Snapshot()), nil
	})
	// Give the probes a last sample after the recovery, then leave the budget (cleared with
	// the chaos phase).
	if err := kit.Sleep(ctx, time.Second); err != nil {
		return err
	}
	sum := s.Summary()
	if f, err := cpstarve.Measure(&sum); err == nil {
		s.Event("starvation.figures", "cp-cpu-starvation", fmt.Sprintf(
			"baseline: xDS availability %.1f %%, injection admitted %.1f %%; window: xDS availability %.1f %%, injection admitted %.1f %% (P99 %.0f ms), invalid config accepted %d (validation P99 %.0f ms), staleness P99 %.1f s; "+
				"lying: Running %.1f s / Ready %.1f s while not serving xDS; busy node's pods %.2f CPU (throttled %.0f %% of periods), control plane %.3f CPU; "+
				"gateway xDS disconnects %d",
			f.BaselineXDS, f.BaselineInject, f.XDSAvailability, f.InjectSuccess, f.InjectP99Ms, f.InvalidAccepted, f.ValidateP99Ms, f.StalenessP99, f.RunningNotServing, f.ReadyNotServing,
			f.NodeCPU, 100*f.NodeThrottled, f.CPCPU, f.GatewayDisconnects))
	}
	return nil
}

// hostLoad puts the host's load average on the timeline: the local substrate's nodes share the
// host, so a busy host gives the whole cluster less than its budget.
func hostLoad(s *kit.State, when string) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	s.Event("host.load", "host", fmt.Sprintf("load average %s %s (%d CPUs)", strings.Join(strings.Fields(string(b))[:3], " "), when, runtime.NumCPU()))
}

// recovered reports whether the last three xDS probes after the window succeeded.
func recovered(p *results.Probes) bool {
	if p == nil || p.Window == nil || p.Window.End == 0 {
		return false
	}
	var after []results.ProbeSample
	for _, x := range p.Series[cpstarve.SeriesXDS] {
		if x.T >= p.Window.End {
			after = append(after, x)
		}
	}
	if len(after) < 3 {
		return false
	}
	for _, x := range after[len(after)-3:] {
		if !x.OK {
			return false
		}
	}
	return true
}

// createInjectedNamespace creates a namespace of the run's whose pods the control plane's
// webhook injects (the run's label also has the reference publish its root certificate there).
func createInjectedNamespace(ctx context.Context, s *kit.State, name string) error {
	l := map[string]string{kube.OwnerLabel: s.Mesh.Cluster.Name()}
	for k, v := range s.CP.(subject.Injector).InjectionLabels() {
		l[k] = v
	}
	_, err := s.Mesh.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// starveProbes are the experiment's probes: xDS as a new proxy on the gateways' node sees it,
// both webhooks through the apiserver (dry runs: nothing is created, the webhooks are called),
// the control plane's pods as Kubernetes reports them, and the CPU of the busy node and of the
// control plane.
func starveProbes(s *kit.State, pods *cgroup.Group, xdsOpts []grpc.DialOption) []observe.Probe {
	v, m := s.Params, s.Mesh
	cs := m.Client
	ic, icErr := istioclient.NewForConfig(m.Cluster.RESTConfig())
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	probes := []observe.Probe{
		{Name: cpstarve.SeriesXDS, Timeout: v.Duration("xdsDeadline"),
			Run: observe.XDSProbe(m.XDSAddress(), m.Namespace, m.Cluster.Dialer(m.Spec.Gateway.Node), "type.googleapis.com/envoy.config.cluster.v3.Cluster", xdsOpts...)},
		{Name: cpstarve.SeriesInject, Timeout: 15 * time.Second, Run: func(ctx context.Context) (float64, error) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: starveNamespace},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "probe"}}}}
			got, err := cs.CoreV1().Pods(starveNamespace).Create(ctx, p, dry)
			if err != nil {
				return 0, err
			}
			if len(got.Spec.Containers)+len(got.Spec.InitContainers) < 2 {
				return 0, errors.New("admitted without a sidecar")
			}
			return 1, nil
		}},
		{Name: cpstarve.SeriesValidate, Timeout: 15 * time.Second, Run: func(ctx context.Context) (float64, error) {
			if icErr != nil {
				return 0, icErr
			}
			// Invalid for every validator, and for no schema: a STATIC endpoint that is not an IP
			// address (istiod: "endpoint address is not a valid IP address"; its 2026 builds only
			// warn of the partial wildcard this probe sent before).
			bad := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{GenerateName: "invalid-", Namespace: s.Mesh.Namespace},
				Spec: istioapi.ServiceEntry{Hosts: []string{"probe.invalid.test"}, Resolution: istioapi.ServiceEntry_STATIC,
					Ports:     []*istioapi.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
					Endpoints: []*istioapi.WorkloadEntry{{Address: "not-an-ip"}}}}
			_, err := ic.NetworkingV1().ServiceEntries(s.Mesh.Namespace).Create(ctx, bad, dry)
			if err == nil {
				return 0, errors.New("invalid ServiceEntry accepted (the validation webhook failed open)")
			}
			if strings.Contains(err.Error(), "denied the request") {
				return 1, nil
			}
			return 0, err
		}},
		{Name: cpstarve.SeriesCPStatus, Run: func(ctx context.Context) (float64, error) {
			list, err := cs.CoreV1().Pods(s.CP.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: s.CP.Selector()})
			if err != nil {
				return 0, err
			}
			running, ready := 0, 0
			for i := range list.Items {
				p := &list.Items[i]
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					running++
				}
				if ok, _ := kube.PodReady(p); ok {
					ready++
				}
			}
			if running == 0 {
				return float64(ready), errors.New("no control-plane pod Running")
			}
			return float64(ready), nil
		}},
		{Name: cpstarve.SeriesNodeCPU, Run: observe.CPURateProbe(pods)},
		{Name: cpstarve.SeriesNodeThrottle, Run: observe.ThrottleProbe(pods)},
	}
	if g, err := m.Cluster.PodCgroup(cpPodOn(s, busyNode)); err == nil {
		probes = append(probes, observe.Probe{Name: cpstarve.SeriesCPCPU, Run: observe.CPURateProbe(g)})
	} else {
		s.Logf("control plane cgroup: %v (its CPU is not followed)", err)
	}
	return probes
}

// cpPodOn is the control plane's pod on node k when one runs there (its CPU is the one the
// neighbour takes), else the pod the kit follows.
func cpPodOn(s *kit.State, k int) *corev1.Pod {
	list, err := s.Mesh.Client.CoreV1().Pods(s.CP.Namespace()).List(context.Background(), metav1.ListOptions{LabelSelector: s.CP.Selector()})
	if err != nil {
		return s.CPPod
	}
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == s.Mesh.Cluster.Nodes()[k-1] {
			return &list.Items[i]
		}
	}
	return s.CPPod
}

// staleness creates ServiceEntries (each with the VirtualService that routes it through the
// gateways) during the window and times each until every gateway serves its host: the staleness
// of a config change made while the control plane is starved.
type staleness struct {
	s      *kit.State
	prober *observe.Prober
	n      int
	wg     sync.WaitGroup
	stop   chan struct{}
	once   sync.Once
}

func (st *staleness) create(ctx context.Context) {
	st.once.Do(func() { st.stop = make(chan struct{}) })
	m := st.s.Mesh
	st.n++
	i := m.Spec.ServiceEntries.Count + st.n - 1 // after the preloaded se-0 … se-(Count-1)
	g := m.Spec.ServiceEntries
	g.Count = i + 1
	objs, _ := g.Objects(m.BackendIPs[g.Backend])
	se, host := objs[i], mesh.Host(i)
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		start := time.Now()
		sample := results.ProbeSample{}
		defer func() {
			sample.Ms = float64(time.Since(start).Milliseconds())
			st.prober.Add(cpstarve.SeriesStaleness, start, sample)
		}()
		ic, err := istioclient.NewForConfig(m.Cluster.RESTConfig())
		if err == nil {
			_, err = ic.NetworkingV1().ServiceEntries(se.Namespace).Create(ctx, se, metav1.CreateOptions{})
		}
		if err == nil {
			// A new host is served through the gateways once a VirtualService routes it there.
			err = m.RouteHosts(ctx, host)
		}
		if err != nil {
			sample.Error = "create: " + err.Error()
			return
		}
		client := &http.Client{Transport: &http.Transport{DialContext: m.Cluster.Dialer(m.Spec.Gateway.Node)}, Timeout: time.Second}
		defer client.CloseIdleConnections()
		pending := append([]string(nil), m.GatewayIPs...)
		for len(pending) > 0 {
			var left []string
			for _, ip := range pending {
				if !serves(ctx, client, ip, host) {
					left = append(left, ip)
				}
			}
			if pending = left; len(pending) == 0 {
				break
			}
			select {
			case <-ctx.Done():
				sample.Error = "run ended"
				return
			case <-st.stop:
				sample.Error = fmt.Sprintf("%d gateway(s) not serving %s at the end of the recovery wait", len(pending), host)
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		sample.OK = true
	}()
}

// wait waits until every change is served, or stops the waiting at deadline.
func (st *staleness) wait(deadline time.Time) {
	if st.stop == nil {
		return
	}
	done := make(chan struct{})
	go func() { st.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		close(st.stop)
		<-done
	}
}

// serves reports whether the gateway at ip answers 200 for host.
func serves(ctx context.Context, c *http.Client, ip, host string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ip, "80")+"/", nil)
	if err != nil {
		return false
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// relative is a window's figure as a percentage of the baseline's (at most 100); a baseline of 0
// (the control plane served nothing even without the neighbour) is an error: nothing to judge.
func relative(get func(cpstarve.Figures) (window, baseline float64)) func(*results.Summary) (float64, error) {
	return func(s *results.Summary) (float64, error) {
		f, err := cpstarve.Measure(s)
		if err != nil {
			return 0, err
		}
		w, b := get(f)
		if b == 0 {
			return 0, errors.New("no probe succeeded before the window: the control plane did not serve even without the neighbour")
		}
		return min(100, 100*w/b), nil
	}
}

func figure(get func(cpstarve.Figures) float64) func(*results.Summary) (float64, error) {
	return func(s *results.Summary) (float64, error) {
		f, err := cpstarve.Measure(s)
		return get(f), err
	}
}

func starveChecks(v params.Values) []runner.Check {
	return []runner.Check{
		// Availability is held against the same probes' before the window (same host, same
		// node budget, no neighbour): a busy host fails some probes of a healthy control plane
		// too (a mitigated run measured 93.8 % on a host loaded by other tests), and that is
		// not the starvation the experiment is about.
		runner.Metric("xDS availability in the window, of the baseline's", relative(func(f cpstarve.Figures) (float64, float64) { return f.XDSAvailability, f.BaselineXDS }),
			results.GE, v.Float("minAvailability"), "%"),
		runner.Metric("pod creations admitted by the injection webhook in the window, of the baseline's", relative(func(f cpstarve.Figures) (float64, float64) { return f.InjectSuccess, f.BaselineInject }),
			results.GE, v.Float("minAvailability"), "%"),
		runner.Metric("invalid config accepted in the window (validation failed open)", figure(func(f cpstarve.Figures) float64 { return float64(f.InvalidAccepted) }), results.LE, 0, ""),
		runner.Metric("config staleness P99", figure(func(f cpstarve.Figures) float64 { return f.StalenessP99 }), results.LE, v.Duration("maxStalenessP99").Seconds(), "s"),
		runner.StatusRate("5xx", results.LE, 0),
		runner.Metric("recovery after the window", figure(func(f cpstarve.Figures) float64 { return f.Recovery }), results.LE, v.Duration("maxRecovery").Seconds(), "s"),
		// Proof that the neighbour took the busy node: of the CPU its pods got in the window,
		// the control plane had next to nothing (the host's share of the budget varies with
		// its load, so the proof is the split, not an absolute figure).
		runner.Metric("busy node's pod CPU taken by others than the control plane", figure(func(f cpstarve.Figures) float64 { return f.NeighbourShare }), results.GE, 90, "%"),
	}
}
