package experiments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshchaos/meshchaos/experiments/soak"
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

// The soak: a nightly harness must hold up for hours. Steady traffic for an hour with a fault
// every few minutes, cycling through the catalog's injectors; the control plane and the harness
// must not grow (memory trend, goroutines) and every fault must recover.
func init() {
	register(kit.Definition{
		Name:    "soak",
		Summary: "an hour of steady traffic with a fault every 5 minutes (backend crash, pod kill, kube-proxy throttle, control-plane OOM kill under a kube-proxy throttle, endpoint flap): no memory growth, no goroutine leak, every fault recovered",
		Params: params.Set{
			params.Rate.WithDefault("20"), params.Length.WithDefault("60m"), params.Steady.WithDefault("30s"),
			params.Nodes.WithDefault("2"),
			// The OOM kill needs a limit; small, so the ballast reaches it in seconds.
			params.CPMemory.WithDefault("256Mi"), params.CPCPU,
			params.DurationParam("faultEvery", 5*time.Minute, 30*time.Second, time.Hour, "the period of the fault cycle (each fault must recover within it)"),
			params.DurationParam("faultFor", 45*time.Second, 5*time.Second, 30*time.Minute, "how long the throttle and the flapping last"),
			params.IntParam("serviceEntries", 200, 1, 20000, "", "ServiceEntries preloaded"),
			params.IntParam("hosts", 4, 1, 10000, "", "ServiceEntry hosts the traffic targets"),
			params.QuantityParam("maxCPHeapGrowth", "4Mi", "0", "64Gi", "the largest allowed growth of the control plane's live heap per hour (fitted)"),
			params.QuantityParam("maxHarnessHeapGrowth", "16Mi", "0", "64Gi", "the largest allowed growth of the harness's live heap per hour (fitted; it keeps the run's series)"),
			params.IntParam("maxGoroutineGrowth", 10, 0, 100000, "", "the most goroutines the control plane or the harness may gain from the first fault to the end"),
		},
		// As cp-oom-restart's: its throttle and its OOM kill are the same faults.
		NodeAccess: []string{
			"kube-proxy CPU throttle on the gateway's node (its cgroup's CPU quota)",
			"the control plane's memory cgroup (working set before the OOM kill)",
		},
		CPFaults: []string{"OOM-kills it once per fault cycle"},
		Validate: func(v params.Values) error {
			if v.Int("hosts") > v.Int("serviceEntries") {
				return fmt.Errorf("hosts=%d: at most serviceEntries (%d)", v.Int("hosts"), v.Int("serviceEntries"))
			}
			if v.Bytes("cpMemoryLimit") == 0 {
				return errors.New("cpMemoryLimit: the OOM kill needs a memory limit")
			}
			if v.Duration("faultFor") >= v.Duration("faultEvery") {
				return fmt.Errorf("faultFor=%s: shorter than faultEvery (%s)", v.String("faultFor"), v.String("faultEvery"))
			}
			if soakFaults(v) < 2 {
				return fmt.Errorf("duration=%s: room for at least two faults of the cycle after steady=%s (one every %s)", v.String(params.Length.Name), v.String(params.Steady.Name), v.String("faultEvery"))
			}
			return nil
		},
		Mesh: func(v params.Values) mesh.Spec {
			dp := v.Int("nodes")
			return mesh.Spec{
				Nodes: v.Int("nodes"),
				CP:    subject.Placement{Node: 1, Ballast: true},
				Backends: []mesh.Backend{
					{Name: "echo", Replicas: 2, Node: dp},
					{Name: flapService, Replicas: 1, Node: dp},
				},
				ServiceEntries: mesh.ServiceEntries{Count: v.Int("serviceEntries"), Backend: "echo"},
				Gateway:        mesh.Gateway{Replicas: 1, Node: dp},
			}
		},
		Hosts: func(v params.Values) int { return v.Int("hosts") },
		Chaos: soakChaos,
		// An hour at the default 500 ms would keep 7200 scrapes of every series in the summary.
		MetricsInterval: 5 * time.Second,
		Checks: func(v params.Values) []runner.Check {
			return []runner.Check{
				runner.Metric("soak faults injected", soakFigure(func(s *results.Soak) (float64, error) { return float64(len(s.Faults)), nil }),
					results.GE, float64(soakFaults(v)), ""),
				runner.Metric("soak faults not recovered", soakFigure(func(s *results.Soak) (float64, error) {
					n := 0
					for _, f := range s.Faults {
						if !f.Recovered {
							n++
						}
					}
					return float64(n), nil
				}), results.LE, 0, ""),
				// Recovered means serving as before: no error in the minute before each fault and
				// before the end.
				runner.Metric("traffic errors in the minute before each fault and the end", soakFigure(func(s *results.Soak) (float64, error) {
					if len(s.Settled) == 0 {
						return 0, errors.New("no settled samples")
					}
					var n int64
					for _, x := range s.Settled {
						if x.RecentRequests == 0 {
							return 0, fmt.Errorf("no traffic in the minute before %s", x.At.Format(time.RFC3339))
						}
						n += x.RecentErrors
					}
					return float64(n), nil
				}), results.LE, 0, ""),
				runner.Metric("control-plane live heap growth", soakFigure(func(s *results.Soak) (float64, error) {
					return heapGrowth(s.ControlPlaneHeap, "the control plane's", "settled samples", v.Bytes("maxCPHeapGrowth"))
				}), results.LE, float64(v.Bytes("maxCPHeapGrowth"))/(1<<20), "MiB/h"),
				runner.Metric("harness live heap growth", soakFigure(func(s *results.Soak) (float64, error) {
					return heapGrowth(s.HarnessHeap, "the harness's", "samples", v.Bytes("maxHarnessHeapGrowth"))
				}), results.LE, float64(v.Bytes("maxHarnessHeapGrowth"))/(1<<20), "MiB/h"),
				runner.Metric("control-plane goroutine growth", soakFigure(func(s *results.Soak) (float64, error) {
					return goroutineGrowth(s.ControlPlaneGoroutines)
				}), results.LE, float64(v.Int("maxGoroutineGrowth")), ""),
				runner.Metric("harness goroutine growth", soakFigure(func(s *results.Soak) (float64, error) {
					return goroutineGrowth(s.HarnessGoroutines)
				}), results.LE, float64(v.Int("maxGoroutineGrowth")), ""),
			}
		},
	})
}

// heapGrowth is a fitted heap trend in MiB/h. A fit whose two standard errors are wider than
// the growth allowed cannot tell growth from noise (a short soak: istiod's heap rose 2.5 MiB in
// its first 100 s, then stayed flat, and four samples fitted 27.8 ± 15.3 MiB/h): an error, not
// a verdict, saying to soak longer. points names what the trend was fitted to.
func heapGrowth(t *results.Growth, whose, points string, allowed int64) (float64, error) {
	if t == nil {
		return 0, fmt.Errorf("too few %s of %s heap", points, whose)
	}
	slope, se, limit := t.SlopePerHour/(1<<20), t.StdErr/(1<<20), float64(allowed)/(1<<20)
	if 2*se > limit {
		return 0, fmt.Errorf("%s heap grew %.1f ± %.1f MiB/h over %d %s: too few to judge growth against %.1f MiB/h; soak longer (more faults)",
			whose, slope, se, t.Points, points, limit)
	}
	return slope, nil
}

// soakFaults is how many faults the cycle injects: one every faultEvery from the end of the
// steady period while at least half a period of traffic remains (for the last one to recover).
func soakFaults(v params.Values) int {
	room := v.Duration(params.Length.Name) - v.Duration(params.Steady.Name) - v.Duration("faultEvery")/2
	if room < 0 {
		return 0
	}
	return int(room/v.Duration("faultEvery")) + 1
}

func soakFigure(f func(s *results.Soak) (float64, error)) func(s *results.Summary) (float64, error) {
	return func(s *results.Summary) (float64, error) {
		if s.Soak == nil {
			return 0, errors.New("the soak was not recorded")
		}
		return f(s.Soak)
	}
}

func goroutineGrowth(d *results.GoroutineDelta) (float64, error) {
	if d == nil {
		return 0, errors.New("no goroutine profiles at the start and the end")
	}
	return float64(d.End - d.Start), nil
}

// soakFault is one fault of the cycle: inject, wait for its own sign of recovery, clear.
type soakFault struct {
	name string
	run  func(ctx context.Context, s *kit.State) error
}

// soakCycle is the order the faults come in.
func soakCycle() []soakFault {
	// The mesh's workloads are in its namespace: "default" on a cluster of the run's own, the
	// run's own on a shared one (never someone else's pods labelled app=echo).
	return []soakFault{
		// The ServiceEntries' endpoints are the echo pods' addresses, written once: a killed echo
		// pod's replacement (a new address) would never serve them again. So echo's containers
		// crash (kubelet restarts them in place), and the pod killed is the flapping service's,
		// whose endpoints follow its pods.
		{"container-crash/echo", func(ctx context.Context, s *kit.State) error {
			crash := &chaos.ContainerCrash{Cluster: s.Mesh.Cluster, Client: s.Mesh.Client, Namespace: s.Mesh.Namespace, Selector: "app=echo"}
			if err := s.Inject(ctx, crash); err != nil {
				return err
			}
			return s.Clear(ctx, crash)
		}},
		{"pod-kill/" + flapService, func(ctx context.Context, s *kit.State) error {
			ns, sel := s.Mesh.Namespace, "app="+flapService
			kill := &chaos.PodKill{Client: s.Mesh.Client, Namespace: ns, Selector: sel}
			if err := s.Inject(ctx, kill); err != nil {
				return err
			}
			if _, err := kube.WaitPodsReady(ctx, s.Mesh.Client, ns, sel, 1, 3*time.Minute); err != nil {
				return fmt.Errorf("%s back to 1 ready pod: %w", flapService, err)
			}
			return s.Clear(ctx, kill)
		}},
		{"kube-proxy-throttle", func(ctx context.Context, s *kit.State) error {
			node := s.Mesh.Spec.Gateway.Node
			g, err := s.Mesh.Cluster.KubeProxyCgroup(node)
			if err != nil {
				return err
			}
			th := &chaos.CPUThrottle{Target: fmt.Sprintf("kube-proxy/node%d", node), Group: g, CPUs: 0.002}
			if err := s.Inject(ctx, th); err != nil {
				return err
			}
			if err := kit.Sleep(ctx, s.Params.Duration("faultFor")); err != nil {
				return err
			}
			return s.Clear(ctx, th)
		}},
		// Incident 1's conditions, as cp-oom-restart's: the control plane is OOM-killed while
		// kube-proxy on the gateways' node is throttled, so the gateways reconnect to the
		// restarted process as soon as it answers (alone, the kill lets them find it only once
		// its endpoint is back, by when an ungated restart has mostly synced).
		{"cp-oom-kill", func(ctx context.Context, s *kit.State) error {
			node := s.Mesh.Spec.Gateway.Node
			g, err := s.Mesh.Cluster.KubeProxyCgroup(node)
			if err != nil {
				return err
			}
			th := &chaos.CPUThrottle{Target: fmt.Sprintf("kube-proxy/node%d", node), Group: g, CPUs: 0.002}
			throttledAt := time.Now()
			if err := s.Inject(ctx, th); err != nil {
				return err
			}
			b, killedAt, err := oomKillControlPlane(ctx, s)
			if err != nil {
				return err
			}
			if _, err := waitControlPlaneReady(ctx, s, killedAt); err != nil {
				return err
			}
			if err := s.Clear(ctx, b); err != nil {
				return err
			}
			if err := kit.Sleep(ctx, time.Until(throttledAt.Add(s.Params.Duration("faultFor")))); err != nil {
				return err
			}
			return s.Clear(ctx, th)
		}},
		{"endpoint-flap", func(ctx context.Context, s *kit.State) error {
			ns, sel := s.Mesh.Namespace, "app="+flapService
			flap := &chaos.EndpointFlap{Cluster: s.Mesh.Cluster, Client: s.Mesh.Client, Namespace: ns, Selector: sel, Up: 4 * time.Second, Down: 2 * time.Second}
			if err := s.Inject(ctx, flap); err != nil {
				return err
			}
			if err := kit.Sleep(ctx, s.Params.Duration("faultFor")); err != nil {
				return err
			}
			if err := s.Clear(ctx, flap); err != nil {
				return err
			}
			_, err := kube.WaitPodsReady(ctx, s.Mesh.Client, ns, sel, 1, 2*time.Minute)
			return err
		}},
	}
}

func soakChaos(ctx context.Context, s *kit.State) error {
	v, m := s.Params, s.Mesh
	if s.Profiles == nil {
		return fmt.Errorf("control plane %s serves no pprof: the soak needs its goroutine and heap profiles", s.CP.Name())
	}
	every := v.Duration("faultEvery")
	rec := &soak.Recorder{MetricsURL: s.CP.AdminURL(s.CPPod) + s.CP.MetricsPath(), Dial: m.Cluster.Dialer(max(m.Spec.CP.Node, 1)), FaultEvery: every}
	if err := s.Measure(rec); err != nil {
		return err
	}
	// A heap profile with ?gc=1 makes the control plane collect: the heap read after it is live.
	settle := func(ctx context.Context, n int) {
		rec.Settle(ctx, func(ctx context.Context) error {
			_, err := s.Profiles.Capture(ctx, observe.Heap, fmt.Sprintf("soak-%02d", n))
			return err
		}, s.Summary().Traffic)
	}
	cpStart, hStart, err := soakGoroutines(ctx, s, "soak-start")
	if err != nil {
		return err
	}
	targets := m.Targets(v.Int("hosts"))
	cycle := soakCycle()
	start := time.Now()
	for i := 0; i < soakFaults(v); i++ {
		if err := kit.Sleep(ctx, time.Until(start.Add(time.Duration(i)*every))); err != nil {
			return err
		}
		settle(ctx, i)
		f := cycle[i%len(cycle)]
		at := time.Now().UTC()
		fctx, cancel := context.WithTimeout(ctx, every)
		ferr := f.run(fctx, s)
		if ferr == nil {
			// Recovered means serving again: every target answers through the gateway.
			ferr = m.WaitRoutes(fctx, targets, every)
		}
		cancel()
		rf := results.SoakFault{Name: f.name, InjectedAt: at}
		if ferr != nil {
			rf.Error = ferr.Error()
			s.Event("soak.unrecovered", f.name, ferr.Error())
		} else {
			done := time.Now().UTC()
			rf.Recovered, rf.RecoveredAt, rf.RecoverySeconds = true, &done, done.Sub(at).Seconds()
			s.Event("soak.recovered", f.name, fmt.Sprintf("%.1f s after the injection", rf.RecoverySeconds))
		}
		rec.Fault(rf)
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
	settle(ctx, soakFaults(v))
	cpEnd, hEnd, err := soakGoroutines(ctx, s, "soak-end")
	if err != nil {
		return err
	}
	cpD, cpErr := observe.CompareGoroutines(s.Dir(), cpStart, cpEnd)
	hD, hErr := observe.CompareGoroutines(s.Dir(), hStart, hEnd)
	if err := errors.Join(cpErr, hErr); err != nil {
		return err
	}
	cpD.Restarted = s.Summary().ControlPlaneStats != nil && s.Summary().ControlPlaneStats.Restarts > 0
	rec.Goroutines(&cpD, &hD)
	return nil
}

// soakGoroutines saves the goroutine profiles of the control plane and of the harness.
func soakGoroutines(ctx context.Context, s *kit.State, reason string) (cp, harness string, err error) {
	p, err := s.Profiles.Capture(ctx, observe.Goroutine, reason)
	if err != nil {
		return "", "", fmt.Errorf("control-plane goroutine profile (%s): %w", reason, err)
	}
	h, err := observe.SaveOwnGoroutines(s.Dir(), reason)
	return p.File, h, err
}
