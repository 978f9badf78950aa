package experiments

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/mesh"
	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/oracle"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
)

// Incident 4: 5000 ServiceEntries × 10 endpoints took istiod 1.6 to ≈ 12 GB (≈ 250 KB per
// endpoint): a per-service scope grew O(n²), found with pprof. On the way two correctness bugs
// turned up: endpoint ports wrong after an endpoint delete when the ServiceEntry port differs
// from the endpoint port (istio #25309), and a relabelled WorkloadEntry staying behind its old
// ServiceEntry, even after its deletion (istio #25678).
//
// The experiment grows the config in steps. At each step a full-mesh xDS client must hold
// exactly what the generators say it should (every cluster, every endpoint address and port);
// then the incident's two scenarios run as incremental changes (endpoints deleted from
// ServiceEntries whose endpoints have their own ports; a WorkloadEntry relabelled out of its
// ServiceEntry's selector, then deleted) and the client is compared again; then the control
// plane's heap (after forced GCs), RSS, push time and the apiserver's memory are measured.
// Heap above the step-0 baseline is fitted against endpoints on log-log axes: the baseline (the
// runtime, informers, the kube services) does not grow with the config and would flatten the
// exponent at small scales.
func init() {
	register(kit.Definition{
		Name:    "serviceentry-scale",
		Summary: "ServiceEntries in steps: control-plane heap per endpoint, growth exponent, correctness oracles, capacity (incident 4: O(n²) memory, #25309, #25678)",
		Params: params.Set{
			params.IntListParam("steps", "500,1000,2500,5000", 1, maxScaleSEs, "ServiceEntries", "total ServiceEntries after each step"),
			params.IntParam("endpoints", 10, 1, 100, "", "endpoints per ServiceEntry"),
			params.IntParam("proxies", 0, 0, 10000, "", "adsload ADS clients connected through the steps, each watching the whole mesh (0: none, the oracle client only): the figures then include the control plane's per-proxy cost and the fleet's convergence"),
			params.IntParam("maxBytesPerEndpoint", 2048, 1, 1<<30, "B", "heap per endpoint above the baseline the check allows"),
			params.FloatParam("maxExponent", 1.15, 0.5, 3, "", "heap growth exponent the check allows"),
			params.QuantityParam("memoryBudget", "", "16Mi", "1Ti", "memory budget to project capacity for (then verified by a step at that size)").OrNone(),
			params.DurationParam("convergeTimeout", 5*time.Minute, 5*time.Second, 2*time.Hour, "how long a step may take to reach the oracle client"),
			params.IntParam("mismatchesShown", 20, 1, 10000, "", "mismatches listed in the report"),
			params.CPMemory.WithDefault("4Gi"),
			params.CPCPU,
		},
		Mesh: func(v params.Values) mesh.Spec {
			// No data plane: the oracle client is the proxy, and memory is the measure; with
			// proxies, a fleet of ADS clients holds the whole mesh beside it.
			return mesh.Spec{Nodes: 1, CP: subject.Placement{Node: 1}, ADSLoad: mesh.ADSLoad{Clients: v.Int("proxies"), Node: 1}}
		},
		Chaos:      scaleSteps,
		CPFaults:   []string{"loads it with ServiceEntries up to the size projected to fill its memory budget"},
		NodeAccess: []string{"the control plane's memory cgroup (RSS per step)"},
		Checks: func(v params.Values) []runner.Check {
			checks := []runner.Check{
				runner.GrowthExponent(results.LE, v.Float("maxExponent")),
				runner.BytesPerEndpoint(results.LE, float64(v.Int("maxBytesPerEndpoint"))),
				runner.OracleMismatches(scenarioConfig, results.LE, 0),
				runner.OracleMismatches(scenarioPort, results.LE, 0),
				runner.OracleMismatches(scenarioWorkload, results.LE, 0),
				runner.OOMKills(results.LE, 0),
			}
			if b := v.Bytes("memoryBudget"); b > 0 {
				checks = append(checks, runner.CapacityVerified(results.LE, float64(b)/(1<<20)))
			}
			return checks
		},
	})
}

const (
	maxScaleSEs = 50000
	// The oracle's scenarios: every generated cluster, and the incident's two bugs.
	scenarioConfig   = "config"
	scenarioPort     = "endpoint-port"
	scenarioWorkload = "workload-entry"
)

// scaleRun is one run's step state.
type scaleRun struct {
	s       *kit.State
	cfg     *rest.Config
	rec     *observe.ScaleSteps
	client  *oracle.Client
	exp     mesh.Expected
	kind    map[string]string // host → scenario
	eps     int
	shown   int
	timeout time.Duration
	cpHTTP  *http.Client
	apiHTTP *http.Client
	prev    int
	// fleetBase is the fleet's cluster count at the baseline (the kube services' clusters, a
	// few a client), which the steps' counts are read above.
	fleetBase int64
}

func scaleSteps(ctx context.Context, s *kit.State) error {
	v, m := s.Params, s.Mesh
	if s.Profiles == nil || s.Memory == nil {
		return fmt.Errorf("serviceentry-scale needs the control plane's pprof and memory cgroup (control plane %s)", s.CP.Name())
	}
	apiHTTP, err := rest.HTTPClientFor(m.Cluster.RESTConfig())
	if err != nil {
		return fmt.Errorf("apiserver metrics client: %w", err)
	}
	dial := m.Cluster.Dialer(m.Spec.CP.Node)
	_, xdsPort, err := net.SplitHostPort(m.XDSAddress())
	if err != nil {
		return fmt.Errorf("control plane xDS address %q: %w", m.XDSAddress(), err)
	}
	// The oracle speaks as a sidecar of the mesh's namespace: on the secure port (the default
	// where the control plane serves one) with that namespace's token.
	xdsOpts, err := m.HostXDSDialOptions(ctx, m.Namespace)
	if err != nil {
		return err
	}
	r := &scaleRun{s: s, cfg: m.Cluster.RESTConfig(), rec: &observe.ScaleSteps{}, exp: mesh.Expected{}, kind: map[string]string{},
		eps: v.Int("endpoints"), shown: v.Int("mismatchesShown"), timeout: v.Duration("convergeTimeout"),
		cpHTTP: &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 10 * time.Second}, apiHTTP: apiHTTP,
		// The pod's own address, not the Service's: the client must not depend on kube-proxy.
		client: &oracle.Client{Addr: net.JoinHostPort(s.CPPod.Status.PodIP, xdsPort), Dial: dial, NodeID: oracle.SidecarID(m.Namespace), DialOptions: xdsOpts}}
	if err := s.Measure(r.rec); err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.client.Start(cctx)
	if !r.client.Wait(ctx, time.Minute, func(st oracle.State) bool { return st.Updates > 0 }) {
		return fmt.Errorf("the oracle xDS client received nothing from %s within 1 min (last error: %v)", r.client.Addr, r.client.Err())
	}
	base, err := r.measure(ctx, "baseline")
	if err != nil {
		return err
	}
	base.Proxies = m.Spec.ADSLoad.Clients
	if base.Proxies > 0 {
		st, err := r.fleetStats(ctx)
		if err != nil {
			return fmt.Errorf("the fleet's clusters at the baseline: %w", err)
		}
		r.fleetBase = st.Total.Resources["cds"]
	}
	r.rec.Update(func(sc *results.Scale) { sc.Baseline = base; sc.MismatchCount = map[string]int{} })
	s.Event("scale.baseline", "control-plane", fmt.Sprintf("heap %s, RSS %s", mib(base.HeapBytes), mib(base.RSSBytes)))

	for k, n := range v.Ints("steps") {
		if err := r.step(ctx, k, n, false); err != nil {
			return r.stopped(err)
		}
	}
	r.fit()
	if budget := v.Bytes("memoryBudget"); budget > 0 {
		if err := r.project(ctx, budget); err != nil {
			return r.stopped(err)
		}
	}
	return nil
}

// stopped ends the steps after a failure: an OOM-killed control plane is a finding the checks
// report (with the steps measured before it), anything else an error of the run.
func (r *scaleRun) stopped(err error) error {
	r.fit()
	if p, perr := r.s.Mesh.ControlPlanePod(context.Background()); perr == nil {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 || (cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.Reason == "OOMKilled") {
				r.s.Event("scale.stopped", "control-plane", fmt.Sprintf("steps stopped: the control plane restarted (%v)", err))
				return nil
			}
		}
	}
	return err
}

// step grows the config to n ServiceEntries (plus the step's scenario objects), waits until the
// oracle client holds all of it, runs the incident's scenarios and measures.
func (r *scaleRun) step(ctx context.Context, k, n int, verify bool) error {
	s := r.s
	push0, perr0 := r.pushes(ctx)
	quiet := func(string, ...any) {}
	// The scenarios' objects first, new at every step: each step shows its own bugs, and the
	// ServiceEntries that follow bring the full pushes that give every control plane — buggy ones
	// too, whose incremental WorkloadEntry adds may carry the wrong port — the complete config.
	// In the mesh's namespace, as the oracle claims to be: on a shared cluster that is the run's.
	ns := r.s.Mesh.Namespace
	port := mesh.ServiceEntries{Count: 2, Prefix: fmt.Sprintf("port%d", k), Endpoints: 3, EndpointPort: 9000, Namespace: ns}
	got, err := port.Create(ctx, r.cfg, nil, quiet)
	if err != nil {
		return fmt.Errorf("step %d: %w", n, err)
	}
	r.add(got, scenarioPort)
	wl := mesh.SelectedWorkloads{Name: fmt.Sprintf("wl%d", k), Count: 3, Net: 64 + k%64, Namespace: ns}
	got = mesh.Expected{}
	if err := wl.Create(ctx, r.cfg, got); err != nil {
		return fmt.Errorf("step %d: %w", n, err)
	}
	r.add(got, scenarioWorkload)
	start := time.Now()
	bulk := mesh.ServiceEntries{Count: n - r.prev, From: r.prev, Endpoints: r.eps, Workers: 64, Namespace: ns}
	if got, err = bulk.Create(ctx, r.cfg, nil, quiet); err != nil {
		return fmt.Errorf("step %d: %w", n, err)
	}
	r.add(got, scenarioConfig)
	apply := time.Since(start)
	r.prev = n

	applied := time.Now()
	converged := r.client.Wait(ctx, r.timeout, func(st oracle.State) bool { return len(oracle.Compare(r.want(), st)) == 0 })
	conv := time.Since(applied)
	if converged {
		s.Event("scale.converged", fmt.Sprintf("%d ServiceEntries", n), fmt.Sprintf("applied %d ServiceEntries in %.1f s (%.0f/s); the oracle client held all of it %.1f s after the last object", bulk.Count, apply.Seconds(), float64(bulk.Count)/apply.Seconds(), conv.Seconds()))
	} else {
		s.Event("scale.not-converged", fmt.Sprintf("%d ServiceEntries", n), fmt.Sprintf("the oracle client did not hold the expected config within %s", r.timeout))
	}
	mism := r.record(n, r.client.Compare(r.want()))
	fleet := r.fleetConverge(ctx, n, applied)

	if err := r.scenarios(ctx, n, port, wl); err != nil {
		return err
	}
	mism += r.record(n, r.client.Compare(r.want()))

	st, err := r.measure(ctx, fmt.Sprintf("step-%d", n))
	if err != nil {
		return fmt.Errorf("step %d: %w", n, err)
	}
	push1, perr1 := r.pushes(ctx)
	st.ServiceEntries, st.Endpoints, st.Verify = n, r.exp.Endpoints(), verify
	st.ApplySeconds, st.ApplyPerSecond = apply.Seconds(), float64(bulk.Count)/apply.Seconds()
	st.ConvergeSeconds, st.Converged = conv.Seconds(), converged
	if err := errors.Join(perr0, perr1); err != nil {
		s.Logf("step %d: full pushes not measured: %v", n, err)
	} else {
		st.PushMeasured, st.PushCount, st.PushSeconds = true, int(push1.count-push0.count), push1.sum-push0.sum
		st.PushP99Ms = observe.BucketQuantile(0.99, observe.BucketsIncrease(push0.buckets, push1.buckets))
	}
	st.Proxies, st.FleetMeasured, st.FleetConverged, st.FleetConvergeSeconds = fleet.proxies, fleet.measured, fleet.converged, fleet.seconds
	st.Mismatches = mism
	r.rec.Update(func(sc *results.Scale) {
		st.BytesPerEndpoint = float64(st.HeapBytes-sc.Baseline.HeapBytes) / float64(st.Endpoints)
		sc.Steps = append(sc.Steps, st)
	})
	s.Event("scale.step", fmt.Sprintf("%d ServiceEntries", n), fmt.Sprintf("%d endpoints: heap %s (%.0f B/endpoint above the baseline), RSS %s, %d mismatches",
		st.Endpoints, mib(st.HeapBytes), st.BytesPerEndpoint, mib(st.RSSBytes), mism))
	return nil
}

// scenarios re-creates the incident's correctness bugs as incremental changes and waits for the
// client to see them (positive signals, whatever the ports say), then gives a correct control
// plane a moment to settle.
func (r *scaleRun) scenarios(ctx context.Context, n int, port mesh.ServiceEntries, wl mesh.SelectedWorkloads) error {
	// #25309: an endpoint deleted from a ServiceEntry whose endpoints have their own ports.
	for i := port.From; i < port.From+port.Count; i++ {
		if err := port.RemoveEndpoint(ctx, r.cfg, r.exp, i, 0); err != nil {
			return err
		}
	}
	// #25678: a WorkloadEntry relabelled out of the selector, then deleted; then one more
	// entry, whose arrival proves the two events before it were applied (one kind's events are
	// applied in order).
	if err := wl.Relabel(ctx, r.cfg, r.exp, 0); err != nil {
		return err
	}
	if err := wl.Delete(ctx, r.cfg, r.exp, 0); err != nil {
		return err
	}
	if err := wl.Add(ctx, r.cfg, r.exp, wl.Count); err != nil {
		return err
	}
	sentinel, _, _ := net.SplitHostPort(wl.Endpoint(wl.Count))
	seen := r.client.Wait(ctx, time.Minute, func(st oracle.State) bool {
		for i := port.From; i < port.From+port.Count; i++ {
			if len(st.Endpoints[oracle.IstioCluster(port.HostOf(i), 80)]) != port.Endpoints-1 {
				return false
			}
		}
		for _, e := range st.Endpoints[oracle.IstioCluster(wl.Host(), 80)] {
			if strings.HasPrefix(e, sentinel+":") {
				return true
			}
		}
		return false
	})
	if !seen {
		r.s.Event("scale.scenario-unseen", fmt.Sprintf("%d ServiceEntries", n), "the client never saw the endpoint deletes or the new WorkloadEntry within 1 min")
	}
	r.client.Wait(ctx, 5*time.Second, func(st oracle.State) bool { return len(oracle.Compare(r.want(), st)) == 0 })
	return nil
}

// fleetResult is the fleet's convergence at one step.
type fleetResult struct {
	proxies             int
	measured, converged bool
	seconds             float64
}

// fleetConverge waits until every client of the adsload fleet holds the generated clusters the
// oracle expects, and returns the time from applied. Clusters, not endpoints: a CDS response
// carries the whole set (adsload's count per client is exact), an EDS response may carry only
// the assignments that changed (its count is the last response's, not what the client holds).
// The fleet's count is a sum over its clients, read above its baseline: the clusters outside
// the generated config (the kube services, 6 a client) would otherwise stand in for a few
// clients' missing ones (at 1000 clients and a 500-ServiceEntry step, 12 clients' worth). It is
// read after the oracle client converged, so it is never below the oracle's time.
func (r *scaleRun) fleetConverge(ctx context.Context, n int, applied time.Time) fleetResult {
	m := r.s.Mesh
	res := fleetResult{proxies: m.Spec.ADSLoad.Clients}
	if res.proxies == 0 || m.Fleet == nil {
		return res
	}
	clusters := int64(len(r.want().Clusters))
	p := int64(res.proxies)
	var lastErr error
	// What the fleet held and cost at its last read of the step: the summary's fleet.
	var last mesh.FleetStats
	defer func() {
		if res.measured {
			r.s.RecordFleet(m.Fleet.Result(last, time.Now()))
		}
	}()
	// Bounded below the step's own wait: a fleet that never converges costs a step 2 min, not 5.
	deadline := time.Now().Add(min(r.timeout, 2*time.Minute))
	for {
		var st mesh.FleetStats
		if st, lastErr = r.fleetStats(ctx); lastErr == nil {
			res.measured, last = true, st
			if st.Total.Resources["cds"]-r.fleetBase >= p*clusters {
				res.converged, res.seconds = true, time.Since(applied).Seconds()
				r.s.Event("scale.fleet-converged", fmt.Sprintf("%d ServiceEntries", n), fmt.Sprintf("%d ADS clients held the step's clusters %.1f s after the last object", res.proxies, res.seconds))
				return res
			}
		}
		if time.Now().After(deadline) || kit.Sleep(ctx, 250*time.Millisecond) != nil {
			break
		}
	}
	res.seconds = time.Since(applied).Seconds()
	r.s.Event("scale.fleet-not-converged", fmt.Sprintf("%d ServiceEntries", n), fmt.Sprintf("the %d ADS clients held %d generated clusters of %d within %s (last error: %v)",
		res.proxies, last.Total.Resources["cds"]-r.fleetBase, p*clusters, min(r.timeout, 2*time.Minute), lastErr))
	return res
}

// fleetStats reads the adsload fleet (every pod's figures, and their sum: mesh.Fleet).
func (r *scaleRun) fleetStats(ctx context.Context) (mesh.FleetStats, error) {
	st, err := r.s.Mesh.Fleet.Stats(ctx)
	if err != nil {
		return mesh.FleetStats{}, fmt.Errorf("adsload stats: %w", err)
	}
	return st, nil
}

func (r *scaleRun) add(e mesh.Expected, scenario string) {
	r.exp.Add(e)
	for h := range e {
		r.kind[h] = scenario
	}
}

func (r *scaleRun) want() oracle.Want {
	return oracle.FromHosts(r.exp, 80, func(h string) bool { return strings.HasSuffix(h, ".mesh.test") })
}

// record counts mismatches by scenario and keeps the first few.
func (r *scaleRun) record(n int, ms []oracle.Mismatch) int {
	if len(ms) == 0 {
		return 0
	}
	r.rec.Update(func(sc *results.Scale) {
		for _, m := range ms {
			scen := r.kind[oracle.HostOf(m.Cluster)]
			if scen == "" {
				scen = scenarioConfig
			}
			sc.MismatchCount[scen]++
			if len(sc.Mismatches) < r.shown {
				sc.Mismatches = append(sc.Mismatches, results.Mismatch{Step: n, Scenario: scen, Cluster: m.Cluster, Want: m.Want, Got: m.Got})
			}
		}
	})
	r.s.Event("scale.mismatches", fmt.Sprintf("%d ServiceEntries", n), fmt.Sprintf("%d; first: %s want %s got %s", len(ms), ms[0].Cluster, ms[0].Want, ms[0].Got))
	return len(ms)
}

// measure takes the control plane's heap after forced GCs (a profile kept in pprof/), its RSS,
// and the apiserver's memory and etcd's database size.
func (r *scaleRun) measure(ctx context.Context, reason string) (results.ScaleStep, error) {
	var st results.ScaleStep
	p, err := r.s.Profiles.CaptureHeap(ctx, reason)
	if err != nil {
		return st, err
	}
	st.Profile, st.ProfileInUseBytes, st.Top = p.File, p.InUseBytes, p.Top
	// The profile's in-use total is a sampling estimate (one sample per 512 KiB allocated on
	// average): ±25 % at 10 MiB. The runtime's count of bytes in allocated heap objects, read
	// right after the profile's forced GCs, is the same quantity (live objects), exact; the
	// profile stays for where the bytes are.
	heap, err := r.cpMetric(ctx, subject.HeapLive)
	if err != nil {
		return st, fmt.Errorf("heap after the forced GCs: %w", err)
	}
	st.HeapBytes = int64(heap)
	if rss, err := r.s.Memory.ReadRSS(); err == nil {
		st.RSSBytes = rss
	} else {
		r.s.Logf("control plane RSS: %v", err)
	}
	if fams, err := observe.ScrapeOnce(ctx, r.apiHTTP, strings.TrimSuffix(r.cfg.Host, "/")+"/metrics"); err == nil {
		v, _ := fams.Value("process_resident_memory_bytes", nil)
		st.APIServerRSSBytes = int64(v)
		for _, name := range []string{"apiserver_storage_size_bytes", "apiserver_storage_db_total_size_in_bytes"} {
			if v, ok := fams.Value(name, nil); ok {
				st.EtcdDBBytes = int64(v)
				break
			}
		}
	} else {
		r.s.Logf("apiserver metrics: %v", err)
	}
	return st, nil
}

// cpMetric reads one gauge of the control plane's own metrics now.
func (r *scaleRun) cpMetric(ctx context.Context, m subject.Measure) (float64, error) {
	metric, ok := r.s.CP.Metrics()[m]
	if !ok {
		return 0, fmt.Errorf("the control plane maps no %s metric", m)
	}
	fams, err := observe.ScrapeOnce(ctx, r.cpHTTP, r.s.CP.AdminURL(r.s.CPPod)+r.s.CP.MetricsPath())
	if err != nil {
		return 0, err
	}
	v, ok := fams.Value(metric.Name, metric.Labels)
	if !ok {
		return 0, fmt.Errorf("no %s in the control plane's metrics", metric.Name)
	}
	return v, nil
}

type pushTotals struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64
}

// pushes reads the control plane's full-push histogram (its own measure of push time).
func (r *scaleRun) pushes(ctx context.Context) (pushTotals, error) {
	metric, ok := r.s.CP.Metrics()[subject.FullPushTime]
	if !ok {
		return pushTotals{}, errors.New("the control plane maps no full-push-time metric")
	}
	fams, err := observe.ScrapeOnce(ctx, r.cpHTTP, r.s.CP.AdminURL(r.s.CPPod)+r.s.CP.MetricsPath())
	if err != nil {
		return pushTotals{}, err
	}
	c, sum, _ := fams.Histogram(metric.Name, metric.Labels)
	return pushTotals{c, sum, fams.CumulativeBuckets(metric.Name, metric.Labels)}, nil
}

// heapJitterBytes is how much the reference control plane's heap, read after two forced GCs,
// moves between runs at the same config, rounded up: on 2026-11-24 its baseline measured 7.3 to
// 7.6 MiB in eight runs and its 50-ServiceEntry step 8.4 to 8.8 MiB in three.
const heapJitterBytes = 512 << 10

// fit fits heap and RSS above their baselines against endpoints over the steps measured (not
// the verification step).
func (r *scaleRun) fit() {
	r.rec.Update(func(sc *results.Scale) {
		var xs, heap, rss []float64
		for _, st := range sc.Steps {
			if !st.Verify {
				xs = append(xs, float64(st.Endpoints))
				heap = append(heap, float64(st.HeapBytes-sc.Baseline.HeapBytes))
				rss = append(rss, float64(st.RSSBytes-sc.Baseline.RSSBytes))
			}
		}
		sc.Fit, sc.RSSFit = nil, nil
		if f, err := results.FitPower(xs, heap); err == nil {
			f.Resolution = results.ExponentResolution(xs, heap, heapJitterBytes)
			sc.Fit = &f
		} else {
			r.s.Logf("heap growth fit: %v", err)
		}
		if f, err := results.FitPower(xs, rss); err == nil {
			sc.RSSFit = &f
		}
	})
}

// project extrapolates the largest config under budget from the fit and verifies it with a step
// at that size.
func (r *scaleRun) project(ctx context.Context, budget int64) error {
	var sc results.Scale
	r.rec.Update(func(x *results.Scale) { sc = *x })
	if sc.RSSFit == nil || len(sc.Steps) == 0 {
		return errors.New("no RSS growth fit to project capacity from")
	}
	last := sc.Steps[len(sc.Steps)-1]
	p := projectCapacity(*sc.RSSFit, sc.Baseline.RSSBytes, budget, r.eps, maxScaleSEs)
	r.s.Event("scale.projection", "control-plane", fmt.Sprintf("%s holds about %d endpoints (%d ServiceEntries)", mib(budget), p.Endpoints, p.ServiceEntries))
	if p.ServiceEntries > r.prev {
		if err := r.step(ctx, len(sc.Steps), p.ServiceEntries, true); err != nil {
			return err
		}
		r.rec.Update(func(x *results.Scale) { last = x.Steps[len(x.Steps)-1] })
		p.Verified = true
	} else {
		// Already measured at or above that size: the largest step is the verification.
		p.Verified = last.ServiceEntries >= p.ServiceEntries
	}
	p.VerifiedHeapBytes, p.VerifiedRSSBytes, p.WithinBudget = last.HeapBytes, last.RSSBytes, last.RSSBytes <= budget
	r.rec.Update(func(x *results.Scale) { x.Projection = &p })
	return nil
}

// projectCapacity solves baseline + fit(endpoints) = budget for the resident memory: the budget
// is for the container, and Go holds more than its live heap (GOGC, memory not yet returned), a
// share that grows with the garbage each push makes — a heap fit scaled by one step's RSS/heap
// ratio proved optimistic (1 GiB projected, 1084 MiB measured at that size).
func projectCapacity(f results.PowerFit, baseline, budget int64, eps, maxSEs int) results.Projection {
	p := results.Projection{BudgetBytes: budget}
	room := float64(budget - baseline)
	if room <= 0 {
		return p
	}
	x := f.Inverse(room)
	ses := int(math.Floor(x / float64(eps)))
	if ses > maxSEs || math.IsInf(x, 0) || math.IsNaN(x) {
		ses, p.Capped = maxSEs, true
	}
	p.ServiceEntries, p.Endpoints = ses, ses*eps
	return p
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
