package experiments

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/mesh"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
	wlmanifests "github.com/meshchaos/meshchaos/workloads/manifests"
)

// Incident 5: the app container started before its sidecar had its configuration; its first
// call (through the sidecar) was refused and it exited; kubelet restarted it until the proxy
// was ready. The control plane's injection webhook sets the start order; the app is the
// incident's (one call, exit 1) or a resilient one (retries with backoff).

// startupModes are the start modes in the order history found them.
var startupModes = []string{"none", "hold", "native", "resilient"}

// The app the experiment deploys (workloads/manifests' app, workloads/startupapp).
const (
	startupApp       = "startup-app"
	startupAppPort   = 8080
	startupAdminPort = 15000
)

func init() {
	register(kit.Definition{
		Name:    "sidecar-startup",
		Summary: "app pods start before their injected sidecar has its config (incident 5: first call refused, exit 1, restarts); start modes none / hold / native / resilient side by side",
		// The start orders are the injecting control plane's: meshchaos's proxy injected, by
		// the control plane's own webhook, in each mode as that control plane spells it (the
		// reference's start annotation; istiod's template "meshchaos", nativeSidecar and
		// holdApplicationUntilProxyStarts).
		Needs: func(cp subject.ControlPlane) error {
			if _, ok := cp.(subject.ProxyInjector); !ok {
				return errors.New("needs a control plane whose webhook can inject meshchaos's proxy with its start modes (the reference or istiod); an external descriptor declares no injection template")
			}
			return nil
		},
		Params: params.Set{
			params.EnumParam("mode", "all", append(append([]string{}, startupModes...), "all"),
				"how the sidecar starts: none (app first: the incident), hold (postStart hook waits for the proxy), native (native sidecar with a startup probe), resilient (app first, the app retries), all (each in turn)"),
			params.IntParam("replicas", 20, 1, 500, "", "app pods per mode"),
			params.IntParam("serviceEntries", 1000, 1, 20000, "", "ServiceEntries preloaded: every new sidecar gets all of them, so its first config takes time"),
			params.CPCPU.WithDefault("200m"),
			params.CPMemory,
			params.IntParam("attempts", 60, 1, 1000, "", "the resilient app's start-up calls before it gives up"),
			params.DurationParam("retryInterval", 100*time.Millisecond, time.Millisecond, time.Minute, "the resilient app's first pause between calls (then doubling)"),
			params.DurationParam("retryMaxInterval", 2*time.Second, time.Millisecond, 5*time.Minute, "the resilient app's longest pause"),
			params.DurationParam("upTimeout", 4*time.Minute, 10*time.Second, time.Hour, "how long every app pod of a mode has to become Ready"),
			params.Rate.WithDefault("5"), params.Length.WithDefault("20s"), params.Steady.WithDefault("2s"),
			params.Nodes.WithDefault("2"),
		},
		Validate: func(v params.Values) error {
			if v.Duration("retryMaxInterval") < v.Duration("retryInterval") {
				return fmt.Errorf("retryMaxInterval=%s: at least retryInterval (%s)", v.String("retryMaxInterval"), v.String("retryInterval"))
			}
			return nil
		},
		Mesh: func(v params.Values) mesh.Spec {
			// The control plane on node 1; the apps and their dependency on the last node.
			apps := v.Int("nodes")
			return mesh.Spec{
				Nodes:    v.Int("nodes"),
				CP:       subject.Placement{Node: 1},
				Backends: []mesh.Backend{{Name: "echo", Replicas: 1, Node: apps}},
				// The apps of each mode's namespace call them (istiod honours exportTo).
				ServiceEntries: mesh.ServiceEntries{Count: v.Int("serviceEntries"), Backend: "echo", ExportTo: modeNamespaces(v)},
				Gateway:        mesh.Gateway{Replicas: 1, Node: apps},
			}
		},
		Hosts:  func(params.Values) int { return 1 },
		Chaos:  startupChaos,
		Checks: startupChecks,
	})
}

// modeNamespaces are the namespaces the modes' apps run in, one per mode.
func modeNamespaces(v params.Values) []string {
	var out []string
	for _, m := range modesOf(v) {
		out = append(out, modeNamespace(m))
	}
	return out
}

// modeNamespace is where mode's apps run.
func modeNamespace(mode string) string { return "startup-" + mode }

// modesOf expands the mode parameter.
func modesOf(v params.Values) []string {
	if v.String("mode") == "all" {
		return startupModes
	}
	return []string{v.String("mode")}
}

func startupChecks(v params.Values) []runner.Check {
	var checks []runner.Check
	for _, mode := range modesOf(v) {
		checks = append(checks, runner.Metric(fmt.Sprintf("app restarts [%s]", mode), startupValue(mode, func(r results.Startup) float64 {
			return float64(r.AppRestarts)
		}), results.LE, 0, ""))
		failed := startupValue(mode, func(r results.Startup) float64 { return float64(r.FailedFirstCalls) })
		if mode == "resilient" {
			// Proof that the race happened: the resilient app did call before its proxy was
			// ready, and outlived it.
			checks = append(checks, runner.Metric("failed first calls, retried [resilient]", failed, results.GE, 1, ""))
			continue
		}
		checks = append(checks, runner.Metric(fmt.Sprintf("failed first calls [%s]", mode), failed, results.LE, 0, ""))
	}
	return checks
}

// startupValue reads a figure of one mode; a mode never measured is an error, never a pass.
func startupValue(mode string, f func(results.Startup) float64) func(*results.Summary) (float64, error) {
	return func(s *results.Summary) (float64, error) {
		for _, r := range s.Startup {
			if r.Mode == mode {
				if r.Started < r.Pods {
					return 0, fmt.Errorf("mode %s: only %d of %d pods reported their start-up", mode, r.Started, r.Pods)
				}
				return f(r), nil
			}
		}
		return 0, fmt.Errorf("mode %s was not measured", mode)
	}
}

func startupChaos(ctx context.Context, s *kit.State) error {
	for _, mode := range modesOf(s.Params) {
		if err := startupMode(ctx, s, mode); err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
	}
	recordInjections(s)
	return nil
}

// recordInjections puts the control plane's own count of sidecar injections on the timeline:
// evidence that its webhook, not the manifest, gave the pods their sidecars.
func recordInjections(s *kit.State) {
	sum := s.Summary()
	if sum.ControlPlaneStats == nil {
		return
	}
	count := func(m subject.Measure) (float64, bool) {
		ref, ok := s.CP.Metrics()[m]
		if !ok {
			return 0, false
		}
		total, found := 0.0, false
		for _, sr := range sum.ControlPlaneStats.Metrics {
			if ref.Matches(sr.Name, sr.Labels) {
				total, found = total+observe.CounterIncrease(sr.Samples), true
			}
		}
		return total, found
	}
	ok, found := count(subject.SidecarInjections)
	failed, _ := count(subject.SidecarInjectionFailures)
	if found {
		s.Event("cp.sidecar-injections", s.CP.Name(), fmt.Sprintf("%.0f pods injected, %.0f injection failures (the control plane's own counters)", ok, failed))
	}
}

// startupMode deploys the app in its own injected namespace, waits until every pod is Ready,
// measures, keeps one injected pod spec, and removes the namespace so the next mode starts on
// a quiet node.
func startupMode(ctx context.Context, s *kit.State, mode string) error {
	v, m := s.Params, s.Mesh
	ns := modeNamespace(mode)
	node := m.Spec.Gateway.Node
	if err := createInjectedNamespace(ctx, s, ns); err != nil {
		return err
	}
	inj := s.CP.(subject.ProxyInjector)
	meas := &observe.Startup{Client: m.Client, Namespace: ns, Selector: "app=" + startupApp, Mode: mode,
		Dial: m.Cluster.Dialer(node), AppPort: startupAppPort, AdminPort: startupAdminPort, AppContainer: "app", ProxyContainer: inj.ProxyContainer()}
	if err := s.Measure(meas); err != nil {
		return err
	}
	vals := wlmanifests.Values{Substrate: m.Workloads(), Namespace: ns, Name: startupApp, Replicas: v.Int("replicas"),
		Port: startupAppPort, Dependency: m.Expected.Hosts()[0], StartMode: mode}
	if mode == "resilient" {
		vals.StartMode, vals.Attempts = "none", v.Int("attempts")
		vals.RetryInterval, vals.RetryMaxInterval = v.Duration("retryInterval"), v.Duration("retryMaxInterval")
	}
	vals.InjectAnnotations = inj.ProxyAnnotations(vals.StartMode, m.Workloads().ImageRef("xdsproxy"))
	y, err := wlmanifests.Render("app", vals)
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := kube.Apply(ctx, m.Cluster.RESTConfig(), y, kube.Owned(m.Cluster.Name()), kube.PinToNode(cluster.NodeLabel, fmt.Sprint(node))); err != nil {
		return fmt.Errorf("deploy the app (the injection webhook must admit its pods): %w", err)
	}
	s.Event("app.deployed", ns+"/"+startupApp, fmt.Sprintf("%d replicas, sidecar start mode %s", v.Int("replicas"), mode))
	if err := kube.WaitDeploymentReady(ctx, m.Client, ns, startupApp, v.Duration("upTimeout")); err != nil {
		return err
	}
	s.Event("app.ready", ns+"/"+startupApp, fmt.Sprintf("every pod Ready %.1f s after the deployment", time.Since(start).Seconds()))
	if err := meas.Collect(ctx); err != nil {
		return err
	}
	if r := meas.Result(); r != nil {
		s.Event("app.measured", ns+"/"+startupApp, fmt.Sprintf("%d pods: %d app restarts, %d failed first calls, first success P50 %.0f ms / P99 %.0f ms, proxy first config P50 %.0f ms",
			r.Pods, r.AppRestarts, r.FailedFirstCalls, r.FirstSuccessMs.P50, r.FirstSuccessMs.P99, r.ProxyFirstConfigMs.P50))
	}
	if path, err := savePodSpec(ctx, s, ns, mode); err != nil {
		s.Logf("keep the injected pod spec of %s: %v", mode, err)
	} else {
		meas.SetPodSpec(path)
	}
	return removeNamespace(ctx, s, ns)
}

// savePodSpec writes one injected pod's metadata and spec to startup/<mode>-pod.yaml.
func savePodSpec(ctx context.Context, s *kit.State, ns, mode string) (string, error) {
	pods, err := s.Mesh.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + startupApp, Limit: 1})
	if err != nil {
		return "", err
	}
	if len(pods.Items) == 0 {
		return "", errors.New("no pod")
	}
	p := pods.Items[0]
	out := map[string]any{"metadata": map[string]any{"name": p.Name, "namespace": p.Namespace, "annotations": p.Annotations}, "spec": p.Spec}
	b, err := yaml.Marshal(out)
	if err != nil {
		return "", err
	}
	rel := filepath.Join("startup", mode+"-pod.yaml")
	if err := os.MkdirAll(filepath.Join(s.Dir(), "startup"), 0o755); err != nil {
		return "", err
	}
	return rel, os.WriteFile(filepath.Join(s.Dir(), rel), b, 0o644)
}

// removeNamespace deletes ns and waits (at most two minutes) until it is gone. Its pods go
// first with a grace period of 1 s: measured already, they need no drain (the proxy's takes 5 s,
// which made four modes wait 20 s), and the next mode still starts on a node without them. Their
// Deployment and ReplicaSet go before them, orphaning them, so that none is replaced.
func removeNamespace(ctx context.Context, s *kit.State, ns string) error {
	orphan, grace := metav1.DeletePropagationOrphan, int64(1)
	apps, all := s.Mesh.Client.AppsV1(), metav1.ListOptions{}
	// In this order: a Deployment left alone makes a new ReplicaSet.
	if err := apps.Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &orphan}, all); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the Deployments of namespace %s: %w", ns, err)
	}
	if err := apps.ReplicaSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &orphan}, all); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the ReplicaSets of namespace %s: %w", ns, err)
	}
	if err := s.Mesh.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, all); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the pods of namespace %s: %w", ns, err)
	}
	c := s.Mesh.Client.CoreV1().Namespaces()
	if err := c.Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := kube.Poll(ctx, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := c.Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s not gone after two minutes: %w", ns, err)
	}
	return nil
}
