package experiments

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/meshchaos/meshchaos/harness/chaos"
	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/mesh"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/traffic"
	"github.com/meshchaos/meshchaos/results"
)

// Incident 2: a service with a single pod that kept flipping between Ready and NotReady. Every
// 0→1 of its endpoints made istiod (≤ 1.15.0) see "service accounts changed" and push everything
// to every proxy; push time P99 reached ≈ 5 s. The fix keeps such changes incremental (EDS).
func init() {
	register(kit.Definition{
		Name:    "endpoint-flap",
		Summary: "a single-pod service flaps Ready/NotReady under a fleet of proxies (incident 2: a full push on every 0→1)",
		Params: params.Set{
			params.Rate, params.Length.WithDefault("120s"), params.Steady, params.Nodes.WithDefault("1"),
			params.CPMemory, params.CPCPU,
			params.EnumParam("flap", flapReadiness, []string{flapReadiness, flapCrash, flapEvict}, "how the pod flaps: its readiness probe fails and recovers, its container crashes and is restarted, or it is deleted (evicted) and recreated"),
			params.DurationParam("unready", 2*time.Second, time.Second, time.Minute, "how long the pod stays NotReady in each flap (readiness)"),
			params.DurationParam("ready", 4*time.Second, 2*time.Second, 10*time.Minute, "how long the pod stays Ready between flaps"),
			params.DurationParam("flapFor", 60*time.Second, 5*time.Second, time.Hour, "how long the pod flaps"),
			params.IntParam("proxies", 200, 1, 20000, "", "adsload ADS clients standing in for sidecars, each watching the whole mesh (at most 5000 a pod)"),
			params.IntParam("adsloadPods", 1, 1, 100, "", "adsload pods the proxies are spread over, round-robin over every node (the data plane's first)"),
			params.IntParam("serviceEntries", 1000, 1, 20000, "", "background ServiceEntries, so that a full push costs something"),
			params.IntParam("hosts", 4, 1, 10000, "", "ServiceEntry hosts under traffic (the other services)"),
			params.IntParam("gateways", 1, 1, 20, "", "gateway replicas carrying the traffic"),
			params.DurationParam("convergenceP99", time.Second, time.Millisecond, time.Hour, "the largest allowed P99 of endpoint-change convergence at the proxies"),
			params.IntParam("flapRate", 20, 1, 5000, "rps", "requests per second to the flapping service through the gateways (an attack of its own, measured separately)"),
			params.DurationParam("flapGrace", 2*time.Second, 0, time.Minute, "errors to the flapping service this close to one of its unready windows count as inside it (the change's way to the gateways, and 1 s series)"),
		},
		Validate: func(v params.Values) error {
			if pods, proxies := v.Int("adsloadPods"), v.Int("proxies"); pods > proxies {
				return fmt.Errorf("adsloadPods=%d: at most proxies (%d), each pod at least one proxy", pods, proxies)
			} else if per := (proxies + pods - 1) / pods; per > maxProxiesPerPod {
				return fmt.Errorf("proxies=%d on %d adsload pod(s) is %d a pod: at most %d (raise adsloadPods to %d or more)",
					proxies, pods, per, maxProxiesPerPod, (proxies+maxProxiesPerPod-1)/maxProxiesPerPod)
			}
			if v.Int("hosts") > v.Int("serviceEntries") {
				return fmt.Errorf("hosts=%d: at most serviceEntries (%d)", v.Int("hosts"), v.Int("serviceEntries"))
			}
			// The traffic covers the flapping and the last change's convergence.
			if need := v.Duration(params.Steady.Name) + v.Duration("flapFor") + 15*time.Second; v.Duration(params.Length.Name) < need {
				return fmt.Errorf("duration=%s: at least steady + flapFor + 15s (%s)", v.String(params.Length.Name), need)
			}
			return nil
		},
		Mesh: func(v params.Values) mesh.Spec {
			dp := v.Int("nodes") // the data plane on the last node, the control plane on the first
			return mesh.Spec{
				Nodes: v.Int("nodes"),
				CP:    subject.Placement{Node: 1},
				Backends: []mesh.Backend{
					{Name: "echo", Replicas: 2, Node: dp},
					{Name: flapService, Replicas: 1, Node: dp},
				},
				ServiceEntries: mesh.ServiceEntries{Count: v.Int("serviceEntries"), Backend: "echo"},
				Gateway:        mesh.Gateway{Replicas: v.Int("gateways"), Node: dp, Services: []string{flapService}},
				// Convergence of the flapping Service's endpoints, in the mesh's namespace
				// ("default", or the run's own on a shared cluster).
				ADSLoad: fleet(v.Int("proxies"), v.Int("adsloadPods"), dp, flapService),
			}
		},
		Hosts: func(v params.Values) int { return v.Int("hosts") },
		Chaos: endpointFlapChaos,
		Checks: func(v params.Values) []runner.Check {
			return []runner.Check{
				// The incident: no flap may cost a full push (counted while the pod flaps: proxies
				// that finish connecting after the setup get a full config, from istiod a CDS each).
				runner.ChaosFullPushes(results.LE, 0),
				runner.Metric("endpoint convergence p99 at the proxies", convergence(func(c *results.Convergence) float64 { return c.Latency.P99Ms }),
					results.LE, float64(v.Duration("convergenceP99").Milliseconds()), "ms"),
				// The other services keep serving.
				runner.ErrorRate(results.LE, 0),
				// Proof that the chaos happened and was seen: the pod's endpoint came back at
				// least once, every readiness transition of the pod became an endpoint change, and
				// every proxy received every change.
				runner.Metric("flaps (endpoints 0→1 in the API)", convergence(func(c *results.Convergence) float64 { return float64(c.Flaps()) }), results.GE, 1, ""),
				runner.Metric("pod readiness transitions not seen as endpoint changes", unseenTransitions, results.LE, 0, ""),
				runner.Metric("endpoint changes missed by proxies", convergence(func(c *results.Convergence) float64 { return float64(c.Missed) }), results.LE, 0, ""),
				// The flapping service fails only while it has no ready endpoint.
				flapErrorsOutsideWindows(v.Duration("flapGrace")),
			}
		},
	})
}

// maxProxiesPerPod bounds one adsload pod's clients (5000, what one pod was allowed before a
// fleet could be spread): a larger fleet takes several pods.
const maxProxiesPerPod = 5000

// fleet is the adsload fleet of proxies clients tracking service: one pod on the data plane's
// node dp, or pods spread round-robin over every node from dp down to node 1.
func fleet(proxies, pods, dp int, service string) mesh.ADSLoad {
	a := mesh.ADSLoad{Clients: proxies, Node: dp, TrackService: service}
	if pods > 1 {
		a.Pods = pods
		for k := dp; k >= 1; k-- {
			a.Nodes = append(a.Nodes, k)
		}
	}
	return a
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

// flapAttack names the attack on the flapping service in the summary's attacks.
const flapAttack = "flap"

// flapErrorsOutsideWindows checks that the errors of the traffic to the flapping service fall
// inside its unready windows: from an endpoint change to 0 ready to the next change to ≥ 1 (as
// the API's EndpointSlices showed them), widened by grace on both sides (the change still has to
// reach the gateways; the traffic series is per second). A second with errors that touches no
// widened window counts; the detail gives the codes and response flags of every error.
func flapErrorsOutsideWindows(grace time.Duration) runner.Check {
	return func(s *results.Summary) (results.Check, error) {
		name := fmt.Sprintf("errors to the flapping service outside its unready windows (±%s)", grace)
		t := s.Attacks[flapAttack]
		if t == nil || t.Requests == 0 {
			return results.Check{}, fmt.Errorf("check %q: the traffic to the flapping service was not measured", name)
		}
		if s.Convergence == nil {
			return results.Check{}, fmt.Errorf("check %q: the flapping service's endpoint changes were not followed", name)
		}
		windows := unreadyWindows(s.Convergence.Changes)
		var outside int64
		var seconds []int
		for _, sec := range t.Series {
			if sec.Errors == 0 {
				continue
			}
			from := t.StartedAt.Add(time.Duration(sec.T) * time.Second)
			in := false
			for _, w := range windows {
				if from.Before(w[1].Add(grace)) && from.Add(time.Second).After(w[0].Add(-grace)) {
					in = true
					break
				}
			}
			if !in {
				outside += sec.Errors
				seconds = append(seconds, sec.T)
			}
		}
		c := results.NewCheck(name, float64(outside), results.LE, 0, "")
		c.Detail = fmt.Sprintf("%d of %d requests failed, %d unready windows; by code %v; by response flag %v", t.Errors, t.Requests, len(windows), t.ByCode, t.ByFlag)
		if outside > 0 {
			c.Detail += fmt.Sprintf("; outside the windows in seconds %v of the attack", seconds)
		}
		return c, nil
	}
}

// unreadyWindows are the spans in which the service had no ready endpoint: [change to 0, next
// change to ≥ 1); one still open at the end lasts for ever.
func unreadyWindows(changes []results.EndpointChange) [][2]time.Time {
	var out [][2]time.Time
	var start time.Time
	for _, ch := range changes {
		switch {
		case ch.Ready == 0 && start.IsZero():
			start = ch.At
		case ch.Ready > 0 && !start.IsZero():
			out = append(out, [2]time.Time{start, ch.At})
			start = time.Time{}
		}
	}
	if !start.IsZero() {
		out = append(out, [2]time.Time{start, time.Now().Add(24 * time.Hour)})
	}
	return out
}

func endpointFlapChaos(ctx context.Context, s *kit.State) error {
	v, m := s.Params, s.Mesh
	ns := m.Namespace
	sel := "app=" + flapService
	// Traffic to the flapping service itself, through every gateway, from before the first flap
	// to past the last change's convergence.
	targets := m.HostTargets(m.ServiceHost(flapService))
	if err := m.WaitRoutes(ctx, targets, time.Minute); err != nil {
		return err
	}
	if err := s.Measure(&observe.Attack{As: flapRole, Options: traffic.Options{Name: flapAttack, Targets: targets,
		Rate: v.Int("flapRate"), Duration: v.Duration("flapFor") + 10*time.Second,
		DialContext: m.Cluster.Dialer(m.Spec.Gateway.Node), ResultsFile: filepath.Join(s.Dir(), results.TrafficDir, "flap-results.json")}}); err != nil {
		return err
	}
	// After the control plane's metrics: it attributes their pushes to each change.
	conv := &observe.Convergence{Client: m.Client, Namespace: ns, Service: flapService, Receipts: m.Fleet.Tracked,
		As: "adsload", Pushes: s.CP.Metrics()}
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
	// What the fleet holds and costs, pod by pod (RSS per node): a pod out of reach is an
	// error, never a fleet measured without it.
	st, err := m.Fleet.Stats(ctx)
	if err != nil {
		return fmt.Errorf("read the adsload fleet: %w", err)
	}
	s.Event(eventFleetStats, "adsload", m.Fleet.Summary(st))
	s.RecordFleet(m.Fleet.Result(st, time.Now()))
	return nil
}

// eventFleetStats is the timeline kind of the adsload fleet's figures at the end of the chaos.
const eventFleetStats = "adsload.stats"

// flapPod makes the pod flap the chosen way for flapFor.
func flapPod(ctx context.Context, s *kit.State, kind, ns, sel string) error {
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
			if err := kit.Sleep(ctx, min(v.Duration("ready"), time.Until(until))); err != nil {
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
		if err := kit.Sleep(ctx, v.Duration("flapFor")); err != nil {
			return err
		}
		return s.Clear(ctx, flap)
	}
}
