// Package mesh stands a mesh up from a declarative Spec: a cluster from any substrate, the
// control plane under test, backends, generated ServiceEntries (with the configuration they
// should produce, for correctness oracles), gateways, and the route waits that prove traffic can
// flow. Every experiment describes its mesh; none builds one by hand.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/traffic"
	"github.com/meshchaos/meshchaos/internal/crds"
	"github.com/meshchaos/meshchaos/results"
	wlmanifests "github.com/meshchaos/meshchaos/workloads/manifests"
)

// Spec describes a mesh.
type Spec struct {
	// Name prefixes the cluster's name (a process-unique suffix is added) unless ClusterName
	// is set.
	Name string
	// ClusterName, when set, is the cluster's name exactly (meshchaos run --name).
	ClusterName string
	// Nodes is the cluster's size.
	Nodes int
	// ControlPlane is the control plane under test and CP where and how it runs.
	ControlPlane subject.ControlPlane
	CP           subject.Placement
	// Backends are deployed first (echo servers).
	Backends []Backend
	// ServiceEntries are generated for a backend's pod addresses before the control plane starts.
	ServiceEntries ServiceEntries
	// Gateway is the ingress data plane; Replicas 0 deploys none.
	Gateway Gateway
	// ADSLoad is a fleet of ADS clients standing in for sidecars; Clients 0 deploys none.
	ADSLoad ADSLoad
	// GRPC is grpc-go as a data plane, proxyless gRPC clients; Clients 0 deploys none.
	GRPC GRPCClients
	// XDS is how the mesh's xDS clients reach the control plane: XDSAuto (the secure port
	// when it serves one), XDSSecure or XDSPlaintext.
	XDS string
}

// GRPCClients is one pod of proxyless gRPC clients (workloads/grpcclient): Clients xDS clients,
// each with its own ADS stream, as proxyless pods of a fleet, and one xds:///HOST:80 channel
// for each of the first Hosts generated ServiceEntry hosts, making Rate RPCs a second in all
// from the moment they start. Their RPCs reach echo's gRPC health service on its HTTP port.
type GRPCClients struct {
	Clients int
	Node    int
	Hosts   int
	Rate    int
	// LastListed calls the Hosts whose ServiceEntries the API server lists last (by name), not
	// the first generated: the ones a control plane that serves while it loads its initial
	// state has last.
	LastListed bool
}

// ADSLoad is a fleet of adsload pods (workloads/adsload) whose Clients each connect to the
// control plane as a sidecar would and subscribe to the whole mesh: one pod on Node, or Pods
// pods sharing the clients (as evenly as can be, each client a distinct proxy as in one pod),
// pinned round-robin over Nodes, so that a large fleet runs on several nodes.
type ADSLoad struct {
	Clients int
	Node    int
	// Pods is how many adsload pods share the clients (0 or 1: one pod, as adsload).
	Pods int
	// Nodes are the nodes the pods are pinned to, round-robin (pod k on Nodes[k%len]); none:
	// every pod on Node.
	Nodes []int
	// TrackService makes every client record its receipts of the cluster of this Service of
	// the mesh's namespace (adsload --track with Istio's cluster name, outbound|PORT||HOST),
	// for convergence measured at the proxies.
	TrackService string
}

// serviceCluster is the part of Istio's cluster names (outbound|PORT||HOST) that names Service
// svc of namespace ns on any port.
func serviceCluster(svc, ns string) string { return "||" + svc + "." + ns + ".svc." }

// Backend is a Deployment of echo servers.
type Backend struct {
	Name     string // "echo"
	Replicas int
	Node     int // pin to node k (0: anywhere)
}

// Gateway is a Deployment of gateway proxies connected to the control plane's xDS address,
// the Gateway that selects them and the VirtualServices of the hosts they route (routes.go).
type Gateway struct {
	Replicas int
	Node     int
	// Hosts is how many generated ServiceEntry hosts the gateways route: the first ones
	// generated, or with Spread, ones spread over the order the API server lists them in.
	Hosts int
	// Spread picks the Hosts evenly over the ServiceEntries' list order (by name: se-0, se-1,
	// se-10, …, se-999), the last-listed one included: a control plane that serves while it
	// loads its initial state (which it lists and applies in that order) has some of them and
	// lacks the last, as the incident's proxies found some clusters and not others. Without
	// it, the first generated hosts are also among the first listed.
	Spread bool
	// Services are backends (by name) whose Kubernetes Service the gateways route too.
	Services []string
}

// Recorder is where a mesh reports its steps: the run's timeline and log.
type Recorder interface {
	Event(kind, object, detail string)
	Logf(format string, args ...any)
}

// Mesh is a running mesh.
type Mesh struct {
	Spec    Spec
	Cluster cluster.Cluster
	Client  kubernetes.Interface
	// BackendIPs are each backend's ready pod IPs.
	BackendIPs map[string][]string
	// Expected is the configuration the generated ServiceEntries should produce.
	Expected Expected
	// GatewayIPs are the gateway pods' IPs: traffic goes to each directly, since kept-alive
	// connections through a Service could all stick to one replica and miss another's failure.
	GatewayIPs []string
	// wl is the workload substrate the mesh deploys with.
	wl wlmanifests.Substrate
	// Fleet is the adsload pods, read as one fleet (their /stats and /tracked summed and
	// merged); nil without one.
	Fleet *Fleet
	// GRPCClientURL is the gRPC clients' pod's HTTP base URL (/stats, /ready); "" without one.
	GRPCClientURL string
	// Namespace holds the mesh's workloads and generated config: "default" on a cluster of the
	// run's own, a namespace the run creates on a shared one (cluster.Shared).
	Namespace string
	// Namespaces are the namespaces the run created or owns (its workloads' and its control
	// plane's; not an installed control plane's): the only ones whose pods the run reads.
	Namespaces []string
	// Attached names the namespace of an installed control plane (subject.Attached): not the
	// run's, so never read.
	Attached string
	// logf reports progress (the run's recorder).
	logf func(format string, args ...any)
	// crds is set once the mesh installed the Istio CRDs.
	crds bool
	// secure is the control plane's secure xDS endpoint when the mesh's clients use it.
	secure *subject.SecureXDS
}

// installCRDs installs the Istio CRDs as the run's own; a cluster that has them keeps its own
// (kube.Apply), and the log says how they differ.
func (m *Mesh) installCRDs(ctx context.Context) error {
	if m.crds {
		return nil
	}
	if _, ok := m.Spec.ControlPlane.(subject.Attached); ok {
		// An installed control plane's CRDs are its installation's: used, never applied.
		err := kube.HaveCRDs(ctx, m.Cluster.RESTConfig(), crds.Istio)
		if err != nil {
			err = fmt.Errorf("%s is installed already and the harness installs no CRD beside it: %w", m.Spec.ControlPlane.Name(), err)
		}
		m.crds = err == nil
		return err
	}
	rep, err := kube.InstallCRDs(ctx, m.Cluster.RESTConfig(), crds.Istio, kube.Owned(m.Cluster.Name()))
	for _, k := range rep.Kept {
		m.logf("%s", k)
	}
	m.crds = err == nil
	return err
}

// Workloads is the workload substrate the mesh deploys with (images, pull policy, data plane),
// for experiments that deploy workloads of their own.
func (m *Mesh) Workloads() wlmanifests.Substrate { return m.wl }

// Validate checks a spec before anything starts.
func (s Spec) Validate() error {
	var errs []error
	if s.Nodes < 1 {
		errs = append(errs, fmt.Errorf("nodes=%d: want at least 1", s.Nodes))
	}
	node := func(what string, k int) {
		if k < 0 || k > s.Nodes {
			errs = append(errs, fmt.Errorf("%s on node %d: the cluster has %d node(s)", what, k, s.Nodes))
		}
	}
	node("control plane", s.CP.Node)
	node("gateway", s.Gateway.Node)
	node("adsload", s.ADSLoad.Node)
	for _, k := range s.ADSLoad.Nodes {
		node("adsload", k)
	}
	if a := s.ADSLoad; a.Clients < 0 {
		errs = append(errs, fmt.Errorf("adsload clients %d: want 0 or more", a.Clients))
	} else if a.Clients > 0 && (a.Pods < 0 || a.Pods > a.Clients) {
		errs = append(errs, fmt.Errorf("adsload pods %d: want 1 to the clients' number (%d), each pod at least one client", a.Pods, a.Clients))
	}
	if g := s.GRPC; g.Clients > 0 {
		node("grpc clients", g.Node)
		if g.Hosts < 1 || g.Hosts > s.ServiceEntries.Count || g.Rate < 1 {
			errs = append(errs, fmt.Errorf("grpc clients: %d hosts of %d ServiceEntries at %d RPCs/s: want 1 to the ServiceEntries' count, and a rate", g.Hosts, s.ServiceEntries.Count, g.Rate))
		}
	}
	names := map[string]bool{}
	for _, b := range s.Backends {
		node("backend "+b.Name, b.Node)
		names[b.Name] = true
	}
	if s.ControlPlane == nil {
		errs = append(errs, errors.New("no control plane under test"))
	}
	if err := s.checkXDS(); err != nil {
		errs = append(errs, err)
	}
	if s.ServiceEntries.Count > 0 && !names[s.ServiceEntries.Backend] {
		errs = append(errs, fmt.Errorf("ServiceEntries point at backend %q, which the mesh does not deploy", s.ServiceEntries.Backend))
	}
	return errors.Join(errs...)
}

// Up brings the mesh up on a cluster from provider, in dependency order: cluster, backends,
// ServiceEntries, control plane, gateways. On failure the returned Mesh (when non-nil) still
// holds the cluster, for Down.
func Up(ctx context.Context, provider cluster.Substrate, spec Spec, rec Recorder) (*Mesh, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	name := spec.ClusterName
	if name == "" {
		name = fmt.Sprintf("%s%d", spec.Name, os.Getpid()%100000)
	}
	rec.Logf("cluster %s: %d node(s) on the %s substrate", name, spec.Nodes, provider.Name())
	ns := metav1.NamespaceDefault
	if sh, ok := provider.(cluster.Shared); ok {
		ns = sh.WorkloadNamespace()
	}
	namespaces := []string{ns, spec.ControlPlane.Namespace()}
	attached := ""
	if _, ok := spec.ControlPlane.(subject.Attached); ok {
		// The installed control plane's namespace is its own: the run neither claims nor
		// deletes it.
		namespaces, attached = namespaces[:1], spec.ControlPlane.Namespace()
	} else if namespaces[1] == ns {
		namespaces = namespaces[:1]
	}
	c, err := provider.Up(ctx, cluster.Spec{Name: name, Nodes: spec.Nodes, Logf: rec.Logf, Namespaces: namespaces})
	if err != nil {
		return nil, fmt.Errorf("bring the cluster up: %w", err)
	}
	m := &Mesh{Spec: spec, Cluster: c, BackendIPs: map[string][]string{}, Namespace: ns, Namespaces: namespaces, Attached: attached, logf: rec.Logf}
	object, detail := name, fmt.Sprintf("%d node(s)", spec.Nodes)
	if l, ok := c.(cluster.Lent); ok {
		var reused bool
		object, reused = l.LentFrom()
		if reused {
			detail += ", lent to this run after an earlier run gave it back clean"
		} else {
			detail += ", brought up for a series of runs and lent to this one first"
		}
	}
	rec.Event("cluster.up", object, detail)
	if m.Client, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		return m, err
	}
	wl, why, err := workloadSubstrate(ctx, c)
	if err != nil {
		return m, err
	}
	m.wl = wl
	rec.Event("note", "data plane", why)
	if _, shared := provider.(cluster.Shared); !shared {
		if err := m.OwnNamespace(ctx, ns); err != nil {
			return m, err
		}
	}
	// The CRDs go in while the backends start: neither waits on the other.
	crdsDone := make(chan error, 1)
	if spec.ServiceEntries.Count > 0 {
		go func() { crdsDone <- m.installCRDs(ctx) }()
	} else {
		crdsDone <- nil
	}
	for _, b := range spec.Backends {
		if err := m.deploy(ctx, "echo", wlmanifests.Values{Substrate: wl, Namespace: ns, Name: b.Name, Replicas: b.Replicas}, b.Node, deployWait); err != nil {
			return m, errors.Join(fmt.Errorf("deploy backend %s: %w", b.Name, err), <-crdsDone)
		}
		if m.BackendIPs[b.Name], err = kube.PodIPs(ctx, m.Client, ns, "app="+b.Name); err != nil {
			return m, errors.Join(err, <-crdsDone)
		}
	}
	if err := <-crdsDone; err != nil {
		return m, err
	}
	if se := spec.ServiceEntries; se.Count > 0 {
		if se.Namespace == "" {
			se.Namespace = ns
		}
		if m.Expected, err = se.Create(ctx, c.RESTConfig(), m.BackendIPs[se.Backend], rec.Logf); err != nil {
			return m, err
		}
		rec.Event("config.loaded", "serviceentries", fmt.Sprintf("%d ServiceEntries, %d endpoints each", se.Count, len(m.BackendIPs[se.Backend])))
	}
	if g := spec.Gateway; g.Replicas > 0 {
		if err := m.createRoutes(ctx); err != nil {
			return m, err
		}
		rec.Event("config.loaded", "gateway routes", fmt.Sprintf("Gateway %s, %d VirtualServices", GatewayName, min(g.Hosts, len(m.Expected))+len(g.Services)))
	}
	start := time.Now()
	spec.CP.Logf = rec.Logf
	if err := spec.ControlPlane.Deploy(ctx, c, spec.CP); err != nil {
		return m, fmt.Errorf("deploy the control plane %s: %w", spec.ControlPlane.Name(), err)
	}
	if a, ok := spec.ControlPlane.(subject.Attached); ok {
		rec.Event("cp.attached", spec.ControlPlane.Name(), a.Found())
	} else {
		rec.Event(results.EventCPReady, spec.ControlPlane.Name(), fmt.Sprintf("first start ready in %s with %d ServiceEntries", time.Since(start).Round(100*time.Millisecond), spec.ServiceEntries.Count))
	}
	if err := m.chooseXDS(rec); err != nil {
		return m, err
	}
	if spec.Gateway.Replicas > 0 || spec.ADSLoad.Clients > 0 || spec.GRPC.Clients > 0 {
		if err := m.WaitRootCert(ctx, ns); err != nil {
			return m, err
		}
	}
	if g := spec.Gateway; g.Replicas > 0 {
		// The gateway reaches the control plane through its Service, so through kube-proxy's
		// rules on its node: the path the incidents' Envoys took.
		v := wlmanifests.Values{Substrate: wl, Namespace: ns, Replicas: g.Replicas}
		m.xdsValues(&v)
		if err := m.deploy(ctx, "gateway", v, g.Node, deployWait); err != nil {
			return m, fmt.Errorf("deploy the gateway: %w", err)
		}
		if m.GatewayIPs, err = kube.PodIPs(ctx, m.Client, ns, "app=gateway"); err != nil {
			return m, err
		}
	}
	if spec.ADSLoad.Clients > 0 {
		if err := m.deployFleet(ctx, rec); err != nil {
			return m, err
		}
	}
	if g := spec.GRPC; g.Clients > 0 {
		if err := m.deployGRPCClients(ctx, rec); err != nil {
			return m, err
		}
	}
	return m, nil
}

// targets are the HOST:80 the clients call: the first Hosts generated, or the Hosts listed last.
func (g GRPCClients) targets(exp Expected) []string {
	hosts := exp.Hosts()
	if g.LastListed {
		slices.Sort(hosts) // se-N.mesh.test sorts as its ServiceEntry's name se-N does
		slices.Reverse(hosts)
	}
	var targets []string
	for _, h := range hosts[:min(g.Hosts, len(hosts))] {
		targets = append(targets, net.JoinHostPort(h, "80"))
	}
	return targets
}

// deployFleet deploys the adsload pods, all at once, and waits until every one is Ready: every
// client has been served. A control plane admits new streams at a bounded rate (istiod's 15 + 5
// per core a second, burst 1), so a large fleet takes a while by design, however many pods it
// is spread over: the fleet gets 100 ms per client beyond deployWait.
func (m *Mesh) deployFleet(ctx context.Context, rec Recorder) error {
	a := m.Spec.ADSLoad
	track := ""
	if a.TrackService != "" {
		track = serviceCluster(a.TrackService, m.Namespace)
	}
	f := &Fleet{Pods: fleetPods(a)}
	deployed := time.Now()
	deadline := deployed.Add(deployWait + time.Duration(a.Clients)*100*time.Millisecond)
	for _, p := range f.Pods {
		v := wlmanifests.Values{Substrate: m.wl, Namespace: m.Namespace, Name: p.Name, Clients: p.Clients, FirstClient: p.First, Track: track, Port: fleetPort}
		m.xdsValues(&v)
		if err := m.apply(ctx, "adsload", v, p.Node); err != nil {
			return fmt.Errorf("deploy adsload pod %s: %w", p.Name, err)
		}
	}
	pctx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	go m.fleetProgress(pctx, rec, slices.Clone(f.Pods), deployed, fleetProgressEvery)
	for i, p := range f.Pods {
		if err := kube.WaitDeploymentReady(ctx, m.Client, m.Namespace, p.Name, max(time.Until(deadline), time.Second)); err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			r := m.controlPlaneRestarts(rctx)
			cancel()
			if r.oomKilled() {
				err = fmt.Errorf("%w (%s: give it more memory, the experiment's cpMemoryLimit)", err, r)
			} else if r.count > 0 {
				err = fmt.Errorf("%w (%s)", err, r)
			}
			return fmt.Errorf("deploy adsload pod %s (%d clients, Ready once every one has been served): %w", p.Name, p.Clients, err)
		}
		var err error
		if f.Pods[i].URL, f.Pods[i].Dial, err = m.fleetPodAddress(ctx, p); err != nil {
			return err
		}
	}
	m.Fleet = f
	rec.Event("adsload.ready", "adsload", fmt.Sprintf("%d ADS clients on %d pod(s), every one served, %s after their deployments were applied",
		a.Clients, len(f.Pods), time.Since(deployed).Round(100*time.Millisecond)))
	return nil
}

// deployGRPCClients deploys the gRPC clients' pod and waits until it is Ready: every channel
// has made a successful RPC, proof that the control plane configured every client.
func (m *Mesh) deployGRPCClients(ctx context.Context, rec Recorder) error {
	const port = 8080
	g := m.Spec.GRPC
	targets := g.targets(m.Expected)
	v := wlmanifests.Values{Substrate: m.wl, Namespace: m.Namespace, Clients: g.Clients, GRPCTargets: targets, GRPCRate: g.Rate, Port: port}
	m.xdsValues(&v)
	if err := m.deploy(ctx, "grpc-client", v, g.Node, deployWait); err != nil {
		return fmt.Errorf("deploy the gRPC clients (every channel must make a successful RPC to be ready): %w", err)
	}
	ips, err := kube.PodIPs(ctx, m.Client, m.Namespace, "app=grpc-client")
	if err != nil {
		return err
	}
	if len(ips) != 1 {
		return fmt.Errorf("want 1 grpc-client pod, found %d", len(ips))
	}
	m.GRPCClientURL = "http://" + net.JoinHostPort(ips[0], fmt.Sprint(port))
	rec.Event("grpc-client.ready", "grpc-client", fmt.Sprintf("%d xDS clients × %d hosts (xds:///HOST:80), %d RPCs/s, every channel served", g.Clients, len(targets), g.Rate))
	return nil
}

// EnvoyImageEnv names the Envoy image the kind substrate's data plane runs (default
// wlmanifests.DefaultEnvoyImage).
const EnvoyImageEnv = "MESHCHAOS_ENVOY_IMAGE"

// workloadSubstrate picks the data plane and says why: Envoy only on a cluster whose nodes can
// be given its image from the host (kind, when Docker has it); everywhere else xdsproxy (the
// local and existing substrates run our images, which an existing cluster must hold: see
// harness/cluster/existing). Nothing is ever pulled: without the image (no registry here, or not
// pulled yet) the data plane is xdsproxy, and the run says how to get Envoy.
func workloadSubstrate(ctx context.Context, c cluster.Cluster) (wlmanifests.Substrate, string, error) {
	h, ok := c.(cluster.ImageHolder)
	if !ok {
		return wlmanifests.Local(), "xdsproxy (meshchaos's xDS data plane)", nil
	}
	envoy := os.Getenv(EnvoyImageEnv)
	if envoy == "" {
		envoy = wlmanifests.DefaultEnvoyImage
	}
	held, err := h.HoldImage(ctx, envoy)
	if err != nil {
		return wlmanifests.Substrate{}, "", fmt.Errorf("give the nodes the Envoy image %s: %w", envoy, err)
	}
	if !held {
		return wlmanifests.Local(), fmt.Sprintf("xdsproxy: the host has no Envoy image %s and meshchaos never pulls one ('docker pull %s', or set %s, to run Envoy)", envoy, envoy, EnvoyImageEnv), nil
	}
	return wlmanifests.Kind(envoy), "Envoy " + envoy, nil
}

// deploy applies a workload's manifest (owned by the run, pinned to node when > 0) and waits up to
// wait for its Deployment to be Ready.
func (m *Mesh) deploy(ctx context.Context, manifest string, v wlmanifests.Values, node int, wait time.Duration) error {
	if err := m.apply(ctx, manifest, v, node); err != nil {
		return err
	}
	name := v.Name
	if name == "" {
		name = manifest
	}
	return kube.WaitDeploymentReady(ctx, m.Client, m.Namespace, name, wait)
}

// apply applies a workload's manifest, owned by the run and pinned to node when > 0.
func (m *Mesh) apply(ctx context.Context, manifest string, v wlmanifests.Values, node int) error {
	y, err := wlmanifests.Render(manifest, v)
	if err != nil {
		return err
	}
	muts := []kube.Mutator{kube.Owned(m.Cluster.Name())}
	if node > 0 {
		muts = append(muts, kube.PinToNode(cluster.NodeLabel, fmt.Sprint(node)))
	}
	_, err = kube.Apply(ctx, m.Cluster.RESTConfig(), y, muts...)
	return err
}

// deployWait is how long a workload's Deployment may take to be Ready.
const deployWait = 2 * time.Minute

// ControlPlanePod returns the control plane's pod (the first by name when it has replicas).
func (m *Mesh) ControlPlanePod(ctx context.Context) (*corev1.Pod, error) {
	cp := m.Spec.ControlPlane
	pods, err := m.Client.CoreV1().Pods(cp.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: cp.Selector()})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) == 0 {
		return nil, fmt.Errorf("no control-plane pod (%s in %s)", cp.Selector(), cp.Namespace())
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	return &pods.Items[0], nil
}

// Targets are every (gateway pod, host) pair for hosts of the generated ServiceEntries: the
// first generated, or spread over their list order (Gateway.Spread).
func (m *Mesh) Targets(hosts int) []traffic.Target {
	return m.HostTargets(m.gatewayHosts(hosts)...)
}

// gatewayHosts are n of the generated hosts: the first generated, or with Gateway.Spread ones
// spread over their list order.
func (m *Mesh) gatewayHosts(n int) []string {
	hosts := m.Expected.Hosts()
	if m.Spec.Gateway.Spread {
		return spreadOverListOrder(hosts, n)
	}
	return hosts[:min(n, len(hosts))]
}

// spreadOverListOrder picks n of hosts at even steps of the order the API server lists their
// ServiceEntries in (by name), the last-listed included, and returns them in that order.
func spreadOverListOrder(hosts []string, n int) []string {
	listed := slices.Clone(hosts)
	slices.Sort(listed) // se-N.mesh.test sorts as its ServiceEntry's name se-N does
	if n >= len(listed) {
		return listed
	}
	out := make([]string, 0, n)
	for k := 1; k <= n; k++ {
		out = append(out, listed[(k*len(listed)+n-1)/n-1]) // the last of the k-th n-th
	}
	return out
}

// HostTargets are GET / on port 80 of every gateway pod for each of hosts (any host the gateways
// route, e.g. a backend's Service name).
func (m *Mesh) HostTargets(hosts ...string) []traffic.Target {
	var out []traffic.Target
	for _, h := range hosts {
		for _, ip := range m.GatewayIPs {
			out = append(out, traffic.Target{Method: http.MethodGet, URL: "http://" + net.JoinHostPort(ip, "80") + "/",
				Header: http.Header{"Host": []string{h}}})
		}
	}
	return out
}

// WaitRoutes waits until every target answers 200 through the gateway: proof that the control
// plane configured the data plane.
func (m *Mesh) WaitRoutes(ctx context.Context, targets []traffic.Target, timeout time.Duration) error {
	client := &http.Client{Transport: &http.Transport{DialContext: m.Cluster.Dialer(m.Spec.Gateway.Node)}, Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, t := range targets {
		var last error
		err := kube.Poll(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
			if err != nil {
				return false, err
			}
			req.Host = t.Header.Get("Host")
			resp, err := client.Do(req)
			if err != nil {
				last = err
				return false, nil
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			last = fmt.Errorf("HTTP %d", resp.StatusCode)
			return resp.StatusCode == http.StatusOK, nil
		})
		if err != nil {
			return fmt.Errorf("gateway %s never routed %s within %s (last: %v): is the control plane serving its config?", t.URL, t.Header.Get("Host"), timeout, last)
		}
	}
	return nil
}

// Keep leaves the cluster and everything in it running past this process (the control plane
// is not removed either) and says how to reach it; a substrate whose clusters cannot outlive
// the process is an error, and the caller takes it down.
func (m *Mesh) Keep(ctx context.Context) (cluster.Kept, error) {
	k, ok := m.Cluster.(cluster.Keeper)
	if !ok {
		return cluster.Kept{}, fmt.Errorf("a cluster of this substrate cannot be kept")
	}
	return k.Keep(ctx)
}

// Down removes the cluster and everything in it.
func (m *Mesh) Down(ctx context.Context) error {
	if m == nil || m.Cluster == nil {
		return nil
	}
	var removeErr error
	if r, ok := m.Spec.ControlPlane.(subject.Remover); ok {
		if err := r.Remove(ctx, m.Cluster); err != nil {
			removeErr = fmt.Errorf("remove the control plane: %w", err)
		}
	}
	return errors.Join(removeErr, m.Cluster.Down(ctx))
}

// Expected maps each generated host to the endpoints ("IP:port") the control plane should give
// its cluster.
type Expected map[string][]string

// Hosts lists the hosts in generation order (se-0, se-1, …).
func (e Expected) Hosts() []string {
	out := make([]string, 0, len(e))
	for h := range e {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return hostIndex(out[i]) < hostIndex(out[j]) })
	return out
}

// Add copies o's hosts into e.
func (e Expected) Add(o Expected) {
	for h, eps := range o {
		e[h] = eps
	}
}

// Endpoints counts the endpoints e expects.
func (e Expected) Endpoints() int {
	n := 0
	for _, eps := range e {
		n += len(eps)
	}
	return n
}
