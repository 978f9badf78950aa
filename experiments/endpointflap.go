package experiments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshchaos/meshchaos/harness/chaos"
	"github.com/meshchaos/meshchaos/harness/experiment"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/mesh"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
)

// Incident 2: a service with a single pod that kept flipping between Ready and NotReady. Every
// 0→1 of its endpoints made istiod (≤ 1.15.0) see "service accounts changed" and push everything
// to every proxy; push time P99 reached ≈ 5 s. The fix keeps such changes incremental (EDS).
func init() {
	register(experiment.Definition{
		Name:    "endpoint-flap",
		Summary: "a single-pod service flaps Ready/NotReady under a fleet of proxies (incident 2: a full push on every 0→1)",
		Params: params.Set{
			params.Rate, params.Length.WithDefault("120s"), params.Steady, params.Nodes.WithDefault("1"),
			params.CPMemory, params.CPCPU,
			params.EnumParam("flap", flapReadiness, []string{flapReadiness, flapCrash, flapEvict}, "how the pod flaps: its readiness probe fails and recovers, its container crashes and is restarted, or it is deleted (evicted) and recreated"),
			params.DurationParam("unready", 2*time.Second, time.Second, time.Minute, "how long the pod stays NotReady in each flap (readiness)"),
			params.DurationParam("ready", 4*time.Second, 2*time.Second, 10*time.Minute, "how long the pod stays Ready between flaps"),
			params.DurationParam("flapFor", 60*time.Second, 5*time.Second, time.Hour, "how long the pod flaps"),
			params.IntParam("proxies", 200, 1, 5000, "", "adsload ADS clients standing in for sidecars, each watching the whole mesh"),
			params.IntParam("serviceEntries", 1000, 1, 20000, "", "background ServiceEntries, so that a full push costs something"),
			params.IntParam("hosts", 4, 1, 10000, "", "ServiceEntry hosts under traffic (the other services)"),
			params.IntParam("gateways", 1, 1, 20, "", "gateway replicas carrying the traffic"),
			params.DurationParam("convergenceP99", time.Second, time.Millisecond, time.Hour, "the largest allowed P99 of endpoint-change convergence at the proxies"),
		},
		Validate: func(v params.Values) error {
			if v.Int("hosts") > v.Int("serviceEntries") {
				return fmt.Errorf("hosts=%d: at most serviceEntries (%d)", v.Int("hosts"), v.Int("serviceEntries"))
			}
			// The traffic covers the flapping and the last change's convergence.
			if need := v.Duration(params.Steady.Name) + v.Duration("flapFor") + 15*time.Second; v.Duration(params.Length.Name) < need {
				return fmt.Errorf("duration=%s: at least steady + flapFor + 15s (%s)", v[params.Length.Name], need)
			}
			return nil
		},
		Mesh: func(v params.Values) mesh.Spec {
			dp := v.Int("nodes") // the data plane on the last node, the control plane on the first
			return mesh.Spec{
				Nodes: v.Int("nodes"),
				CP:    subject.Placement{Node: 1, MemoryLimit: v["cpMemoryLimit"], CPULimit: v["cpCPULimit"]},
				Backends: []mesh.Backend{
					{Name: "echo", Replicas: 2, Node: dp},
					{Name: flapService, Replicas: 1, Node: dp},
				},
				ServiceEntries: mesh.ServiceEntries{Count: v.Int("serviceEntries"), Backend: "echo"},
				Gateway:        mesh.Gateway{Replicas: v.Int("gateways"), Node: dp},
				// Istio's cluster name for the flapping Service's port (outbound|80||HOST).
				ADSLoad: mesh.ADSLoad{Clients: v.Int("proxies"), Node: dp, Track: "||" + flapService + ".default.svc."},
			}
		},
		Hosts: func(v params.Values) int { return v.Int("hosts") },
		Chaos: endpointFlapChaos,
		Checks: func(v params.Values) []runner.Check {
			return []runner.Check{
				// The incident: no flap may cost a full push.
				runner.FullPushes(results.LE, 0),
				runner.Metric("endpoint convergence p99 at the proxies", convergence(func(c *results.Convergence) float64 { return c.Latency.P99Ms }),
					results.LE, float64(v.Duration("convergenceP99").Milliseconds()), "ms"),
				// The other services keep serving.
				runner.ErrorRate(results.LE, 0),
				// Proof that the chaos happened and was seen: the pod's endpoint came back at
				// least once, every readiness transition of the pod became an endpoint change, and
				// every proxy received every change.
				runner.Metric("flaps (endpoints 0→1 in the API)", convergence(func(c *results.Convergence) float64 {
					n := 0
					for i, ch := range c.Changes {
						if ch.Ready > 0 && (i == 0 || c.Changes[i-1].Ready == 0) {
							n++
						}
					}
					return float64(n)
				}), results.GE, 1, ""),
				runner.Metric("pod readiness transitions not seen as endpoint changes", unseenTransitions, results.LE, 0, ""),
				runner.Metric("endpoint changes missed by proxies", convergence(func(c *results.Convergence) float64 { return float64(c.Missed) }), results.LE, 0, ""),
			}
		},
	})
}

// Flap kinds.
const (
	flapReadiness = "readiness"
	flapCrash     = "crash"
	flapEvict     = "evict"
)

// flapService is the single-pod Deployment and Service that flaps.
const flapService = "flap"

// flapRole is the flapping pod's role in the summary's workloads.
const flapRole = "flap"

func convergence(f func(c *results.Convergence) float64) func(s *results.Summary) (float64, error) {
	return func(s *results.Summary) (float64, error) {
		if s.Convergence == nil {
			return 0, errors.New("convergence at the proxies was not measured")
		}
		return f(s.Convergence), nil
	}
}

// unseenTransitions is how many more readiness transitions the pod watcher saw than endpoint
// changes reached the API's EndpointSlices (a flap the endpoints controller or the harness lost).
func unseenTransitions(s *results.Summary) (float64, error) {
	w := s.Workloads[flapRole]
	if w == nil || s.Convergence == nil {
		return 0, errors.New("the flapping pod or its endpoints were not followed")
	}
	return float64(w.Ready + w.NotReady - len(s.Convergence.Changes)), nil
}

func endpointFlapChaos(ctx context.Context, s *experiment.State) error {
	v, m := s.Params, s.Mesh
	ns := m.Namespace
	sel := "app=" + flapService
	// After the control plane's metrics: it attributes their pushes to each change.
	conv := &observe.Convergence{Client: m.Client, Namespace: ns, Service: flapService, URL: m.ADSLoadURL + "/tracked",
		Dial: m.Cluster.Dialer(max(m.Spec.ADSLoad.Node, 1)), As: "adsload", Pushes: s.CP.Metrics()}
	if err := s.Measure(&observe.Pods{Client: m.Client, Namespace: ns, Selector: sel, As: flapRole}, conv); err != nil {
		return err
	}
	if err := flapPod(ctx, s, v.String("flap"), ns, sel); err != nil {
		return err
	}
	// The last change's receipts belong to the run: wait for them (a control plane that never
	// delivers it shows as missed receipts, not as a harness failure).
	if err := conv.WaitConverged(ctx, 2*time.Minute); err != nil {
		s.Event("convergence.incomplete", "adsload", err.Error())
	}
	return nil
}

// flapPod makes the pod flap the chosen way for flapFor.
func flapPod(ctx context.Context, s *experiment.State, kind, ns, sel string) error {
	v, m := s.Params, s.Mesh
	until := time.Now().Add(v.Duration("flapFor"))
	// repeat injects a fault that ends on its own until flapFor is over, leaving the pod Ready
	// for the ready period between two.
	repeat := func(fault func() chaos.Injector) error {
		for n := 1; time.Now().Before(until); n++ {
			inj := fault()
			if err := s.Inject(ctx, inj); err != nil {
				return err
			}
			if _, err := kube.WaitPodsReady(ctx, m.Client, ns, sel, 1, 2*time.Minute); err != nil {
				return fmt.Errorf("%s (flap %d): the pod was not Ready again: %w", inj.Name(), n, err)
			}
			if err := s.Clear(ctx, inj); err != nil {
				return err
			}
			if err := experiment.Sleep(ctx, min(v.Duration("ready"), time.Until(until))); err != nil {
				return err
			}
		}
		return nil
	}
	switch kind {
	case flapEvict:
		return repeat(func() chaos.Injector { return &chaos.PodKill{Client: m.Client, Namespace: ns, Selector: sel} })
	case flapCrash:
		// kubelet's crash-loop back-off (10 s, 20 s, 40 s …) sets the pace, not the ready period.
		return repeat(func() chaos.Injector {
			return &chaos.ContainerCrash{Cluster: m.Cluster, Client: m.Client, Namespace: ns, Selector: sel}
		})
	default:
		flap := &chaos.EndpointFlap{Cluster: m.Cluster, Client: m.Client, Namespace: ns, Selector: sel,
			Up: v.Duration("ready"), Down: v.Duration("unready")}
		if err := s.Inject(ctx, flap); err != nil {
			return err
		}
		// From the first transition on (the switch may take a while on a loaded machine).
		if err := experiment.Sleep(ctx, v.Duration("flapFor")); err != nil {
			return err
		}
		return s.Clear(ctx, flap)
	}
}
