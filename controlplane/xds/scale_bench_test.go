package xds

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/results/stats"
)

// ackFunc sees one EDS response a client has ACKed: how many CLAs it carried, whether it carried
// the named one, and when the ACK was sent.
type ackFunc func(client, count int, has func(name string) bool, at time.Time)

// connectEDSFleet connects n ADS clients (SotW or Delta) to addr, each subscribed to wildcard CDS
// and to EDS for names, as an Envoy with those clusters; acked sees every EDS response each one
// has ACKed.
func connectEDSFleet(b testing.TB, addr string, n int, delta bool, names []string, acked ackFunc) {
	for c := 0; c < n; c++ {
		id := fmt.Sprintf("sidecar~10.1.%d.%d~p-%d.bench~bench.svc.cluster.local", c/256, c%256, c)
		if delta {
			cl, err := adsclient.DialDelta(context.Background(), addr, id)
			require.NoError(b, err)
			cl.OnAcked = func(r adsclient.DeltaResponse, at time.Time) {
				if r.TypeURL != resourcev3.EndpointType {
					return
				}
				acked(c, len(r.Resources), func(name string) bool {
					for _, res := range r.Resources {
						if res.GetName() == name {
							return true
						}
					}
					return false
				}, at)
			}
			require.NoError(b, cl.Subscribe(resourcev3.ClusterType))
			require.NoError(b, cl.Subscribe(resourcev3.EndpointType, names...))
			go cl.Run()
			b.Cleanup(cl.Close)
			continue
		}
		cl, err := adsclient.Dial(context.Background(), addr, id)
		require.NoError(b, err)
		cl.OnResponse = func(adsclient.Response) {}
		cl.OnAcked = func(r adsclient.Response, at time.Time) {
			if r.TypeURL != resourcev3.EndpointType {
				return
			}
			acked(c, len(r.Resources), func(name string) bool {
				for _, a := range r.Resources {
					var cla endpoint.ClusterLoadAssignment
					if a.UnmarshalTo(&cla) == nil && cla.GetClusterName() == name {
						return true
					}
				}
				return false
			}, at)
		}
		require.NoError(b, cl.SetNames(resourcev3.ClusterType, nil))
		require.NoError(b, cl.SetNames(resourcev3.EndpointType, names))
		go cl.Run()
		b.Cleanup(cl.Close)
	}
}

// percentileMs is the q-quantile of sorted durations (stats.Percentile, as the harness's
// figures), in milliseconds.
func percentileMs(sorted []time.Duration, q float64) float64 {
	return float64(stats.Percentile(sorted, q).Microseconds()) / 1000
}

// edsFleet is the clients of an endpoint-change measurement, each subscribed to wildcard CDS
// and to EDS for every cluster: it says when every client holds every CLA (ready), is told the
// CLA the next change is to before it is made (arm), and then gives the time each client
// ACKed it (acks).
type edsFleet struct {
	services int
	mu       sync.Mutex
	target   string
	seen     []string // per client: the target it ACKed last
	initial  []int    // per client: the CLAs of its first responses
	ready    chan struct{}
	acks     chan time.Time
}

func newEDSFleet(clients, services int) *edsFleet {
	return &edsFleet{services: services, seen: make([]string, clients), initial: make([]int, clients),
		ready: make(chan struct{}, clients), acks: make(chan time.Time, clients)}
}

// acked is connectEDSFleet's ackFunc.
func (f *edsFleet) acked(c, count int, has func(string) bool, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.initial[c] < f.services {
		if f.initial[c] += count; f.initial[c] >= f.services {
			f.ready <- struct{}{}
		}
		return
	}
	if f.target == "" || f.seen[c] == f.target || !has(f.target) {
		return
	}
	f.seen[c] = f.target
	f.acks <- at
}

// arm sets the CLA the next change is to; every client has ACKed the previous one (a change
// of the same service again counts again).
func (f *edsFleet) arm(target string) {
	f.mu.Lock()
	f.target = target
	clear(f.seen)
	f.mu.Unlock()
}

// endpointChangeRig is a control plane with 1000 ServiceEntries × 10 endpoints (the rig's
// limits), and the EDS names of their clusters.
func endpointChangeRig(b *testing.B, limits Limits) (*rig, []string) {
	const services = 1000
	r := newRigLimited(b, limits, 100*time.Millisecond, 10*time.Second)
	fill(b, r.m, services, 10)
	r.start(b)
	return r, benchClusters(services)
}

// benchClusters are the EDS names of fill's first n services.
func benchClusters(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = model.ClusterName(fmt.Sprintf("se-%d.bench.test", i), 80)
	}
	return names
}

// endpointChangeLatencies connects clients ADS clients (SotW, or Delta) to a control plane with
// wildcard CDS and EDS for every cluster of 1000 ServiceEntries × 10 endpoints, waits until each
// holds every CLA, then b.N times changes one service's endpoints and measures, per client, the
// change entering the control plane → the client has ACKed the new CLA, with the default 100 ms
// debounce in the path. It returns the latencies sorted.
func endpointChangeLatencies(b *testing.B, clients int, delta bool, timeout time.Duration) []time.Duration {
	// No new-stream admission: istiod's (15 + 5·GOMAXPROCS a second, burst 1) refuses most of a
	// fleet that connects at once, and what is measured is a connected fleet's ACKs.
	r, names := endpointChangeRig(b, Limits{NewStreamsPerSecond: -1, MaxStreams: -1})
	f := newEDSFleet(clients, len(names))
	connectEDSFleet(b, r.addr, clients, delta, names, f.acked)
	for c := 0; c < clients; c++ {
		select {
		case <-f.ready:
		case <-time.After(5 * time.Minute):
			b.Fatalf("only %d of %d clients hold every CLA", c, clients)
		}
	}
	return measureEndpointChanges(b, r, names, clients, timeout, func(target string) error { f.arm(target); return nil }, f.acks)
}

// measureEndpointChanges changes one service's endpoints b.N times: arm tells the fleet of
// clients the CLA about to change, acks gives the time each client ACKed it. It returns every
// client's change → ACK latencies, sorted.
func measureEndpointChanges(b *testing.B, r *rig, names []string, clients int, timeout time.Duration,
	arm func(target string) error, acks <-chan time.Time) []time.Duration {
	rng := rand.New(rand.NewSource(1))
	lat := make([]time.Duration, 0, b.N*clients)
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		svc := rng.Intn(len(names))
		conv := movedEndpoints(b, svc, i)
		require.NoError(b, arm(names[svc]))
		t0 := time.Now()
		r.pusher.Enqueue(r.m.SetServiceEntry("bench", fmt.Sprintf("se-%d", svc), time.Unix(0, 0), conv))
		for c := 0; c < clients; c++ {
			select {
			case at := <-acks:
				lat = append(lat, at.Sub(t0))
			case <-time.After(timeout):
				b.Fatalf("iteration %d: only %d of %d clients ACKed the change", i, c, clients)
			}
		}
	}
	b.StopTimer()
	// The CPU this process spent per change: less at the mercy of the machine's load than the
	// latencies (with the fleet in this process, its clients' CPU too).
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/change")
	require.NoError(b, arm(""))
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat
}

// reportLatencies reports P50, P99 and max of sorted latencies.
func reportLatencies(b *testing.B, lat []time.Duration) {
	b.ReportMetric(percentileMs(lat, 0.5), "p50-ms")
	b.ReportMetric(percentileMs(lat, 0.99), "p99-ms")
	b.ReportMetric(percentileMs(lat, 1), "max-ms")
}

// BenchmarkEndpointChangeACKed1000: endpointChangeLatencies with 1000 clients, SotW and Delta
// (-benchtime 20x: 20 000 samples each).
func BenchmarkEndpointChangeACKed1000(b *testing.B) {
	for _, mode := range []string{"sotw", "delta"} {
		b.Run(mode, func(b *testing.B) {
			reportLatencies(b, endpointChangeLatencies(b, 1000, mode == "delta", 60*time.Second))
		})
	}
}

// BenchmarkFullPush1000Proxies: 1000 proxies (wildcard CDS) in 10 namespaces (10 scopes of 100
// proxies) on 5000 ServiceEntries × 10 endpoints. Each iteration is a full push, timed per proxy
// from the push's start until it has received its new CDS. Reports P50 and P99 over every proxy
// and iteration, the CDS bytes sent per push, and the scope generations per push divided by the
// scopes: 1 when config is generated once per scope, 100 if it were once per proxy.
func BenchmarkFullPush1000Proxies(b *testing.B) {
	const services, proxies, scopes = 5000, 1000, 10
	r := newRigLimited(b, fleetLimits, 100*time.Millisecond, 10*time.Second)
	fill(b, r.m, services, 10)
	r.start(b)
	var mu sync.Mutex
	var lat []time.Duration
	var bytes int64
	var start time.Time
	measuring := false
	wait := cdsFleet(b, r.addr, proxies, scopes, func(resp adsclient.Response) {
		mu.Lock()
		if measuring {
			lat = append(lat, resp.At.Sub(start))
			bytes += int64(resp.Size)
		}
		mu.Unlock()
	})
	wait() // the initial fetch
	require.Len(b, r.caches.Scopes(), scopes)
	gens := r.generations
	before := gens()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		mu.Lock()
		start, measuring = time.Now(), true
		mu.Unlock()
		r.pusher.Push(model.Change{Full: true})
		wait()
		mu.Lock()
		measuring = false
		mu.Unlock()
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(percentileMs(lat, 0.5), "p50-ms")
	b.ReportMetric(percentileMs(lat, 0.99), "p99-ms")
	b.ReportMetric(float64(bytes)/float64(b.N)/(1<<20), "MiB-sent/push")
	b.ReportMetric(float64(gens()-before)/float64(b.N)/scopes, "generations/scope")
}

// BenchmarkEndpointChangeACKed10000: endpointChangeLatencies' measurement with 10 000 clients,
// SotW and Delta (-benchtime 20x: 200 000 samples each). The clients run in a child process
// (childFleet): a process may hold 20 000 descriptors here, and the fleet's RSS is then its
// own. The fleet connects at once, so the stream cap and the accept rate (there for a fleet's
// reconnects) are off: what is measured is the push to 10 000 proxies. Also reports the RSS of
// the fleet (adsclient clients in callback mode: they keep no resources) and of this process
// (the control plane, with its caches and 10 000 streams).
func BenchmarkEndpointChangeACKed10000(b *testing.B) {
	const clients = 10000
	for _, mode := range []string{"sotw", "delta"} {
		b.Run(mode, func(b *testing.B) {
			r, names := endpointChangeRig(b, Limits{NewStreamsPerSecond: -1, MaxStreams: -1})
			f := startChildFleet(b, r.addr, clients, mode, len(names))
			stop := cpuProfile(b, mode+"-cp")
			lat := measureEndpointChanges(b, r, names, clients, 2*time.Minute, f.arm, f.acks)
			stop()
			reportLatencies(b, lat)
			fleetRSS, err := f.rss()
			require.NoError(b, err)
			b.ReportMetric(float64(fleetRSS)/(1<<20), fmt.Sprintf("fleet-rss-MiB/%d-clients", clients))
			b.ReportMetric(float64(procRSS(b, "self"))/(1<<20), "cp-rss-MiB")
		})
	}
}

// BenchmarkFullPush10000Proxies: BenchmarkFullPush1000Proxies' measurement with 10 000 proxies
// (wildcard CDS, SotW) in 10 namespaces (10 scopes of 1000 proxies) on 1000 ServiceEntries × 10
// endpoints, the fleet in a child process as BenchmarkEndpointChangeACKed10000's (and, as there,
// no new-stream admission and no stream cap: the fleet connects at once). Each iteration is a
// full push, timed per proxy from the push's start until it has received its new CDS.
//
// The slow-consumer limits are off too (send timeout, stalled sends, unanswered responses): a
// push here is 10 000 responses of ≈ 135 KiB, each past gRPC's 64 KiB window, read by one
// process on the same 2 cores, so most sends block in flow control for a while, as a slow
// consumer's would. What is measured is the fan-out to a fleet that stays, not whether the
// limits (100 sends stalled at once, 30 s) take this one for slow; a push that does not reach
// every proxy says what the limits ended.
//
// 1000 SE, not 5000: the CDS sent per push is services × proxies (≈ 136 B per cluster), 6.6 GB
// a push at 5000 SE and 1.3 GB at 1000, which keeps a push to a few seconds of loopback
// traffic on this 2-core machine, and matches BenchmarkEndpointChangeACKed10000's rig. 10 scopes,
// as at 1000 proxies: only the proxies per scope change, so what grows is the fan-out, not the
// generation (100 scopes would be 100 generations per push, BenchmarkFullPushScopes' 100 ms
// each at 1000 SE).
//
// Reports P50, P99 and max over every proxy and iteration, the CDS MiB sent per push, the scope
// generations per push divided by the scopes (1 when config is generated once per scope, 1000 if
// it were once per proxy), this process's CPU per push, and the RSS of the control plane (this
// process) and of the fleet.
func BenchmarkFullPush10000Proxies(b *testing.B) {
	const services, proxies, scopes = 1000, 10000, 10
	limits := fleetLimits
	limits.SendTimeout, limits.MaxStalledSends = -1, -1
	r := newRigLimited(b, limits, 100*time.Millisecond, 10*time.Second)
	fill(b, r.m, services, 10)
	r.start(b)
	f := startChildFleet(b, r.addr, proxies, "cds", scopes)
	require.Len(b, r.caches.Scopes(), scopes)
	gens := r.generations
	before := gens()
	stop := cpuProfile(b, "cds-cp")
	lat := make([]time.Duration, 0, b.N*proxies)
	var bytes int64
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		require.NoError(b, f.arm("push"))
		t0 := time.Now()
		r.pusher.Push(model.Change{Full: true})
		for c := 0; c < proxies; c++ {
			select {
			case got := <-f.cds:
				lat = append(lat, got.at.Sub(t0))
				bytes += int64(got.size)
			case <-time.After(5 * time.Minute):
				b.Fatalf("push %d: only %d of %d proxies got their CDS (streams the limits ended: %s)", i, c, proxies, limitedStreams(r))
			}
		}
	}
	b.StopTimer()
	stop()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/1000/float64(b.N), "cp-cpu-ms/push")
	require.NoError(b, f.arm(""))
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	reportLatencies(b, lat)
	b.ReportMetric(float64(bytes)/float64(b.N)/(1<<20), "MiB-sent/push")
	b.ReportMetric(float64(gens()-before)/float64(b.N)/scopes, "generations/scope")
	fleetRSS, err := f.rss()
	require.NoError(b, err)
	b.ReportMetric(float64(fleetRSS)/(1<<20), fmt.Sprintf("fleet-rss-MiB/%d-proxies", proxies))
	b.ReportMetric(float64(procRSS(b, "self"))/(1<<20), "cp-rss-MiB")
}

// limitedStreams is what the server's limits cut off so far, by reason ("none" if nothing).
func limitedStreams(r *rig) string {
	var cut []string
	for _, reason := range []string{"new-streams", "streams", "requests", "names", "scopes", "send-timeout", "stalled", "unanswered"} {
		if n := testutil.ToFloat64(r.met.XDSLimited.WithLabelValues(reason)); n > 0 {
			cut = append(cut, fmt.Sprintf("%s %.0f", reason, n))
		}
	}
	if len(cut) == 0 {
		return "none"
	}
	return strings.Join(cut, ", ")
}

// profileEnv, when set, is the path prefix of CPU profiles of the measurement of
// BenchmarkEndpointChangeACKed10000 and BenchmarkFullPush10000Proxies: the control plane's (this
// process, MODE-cp.pprof) and the fleet's (MODE-fleet.pprof; MODE sotw, delta or cds), the two
// processes sharing the machine's cores.
const profileEnv = "MESHCHAOS_BENCH_CPUPROFILE"

// cpuProfile profiles this process into the profileEnv prefix + name + ".pprof" until the
// returned stop, when profileEnv is set.
func cpuProfile(b *testing.B, name string) (stop func()) {
	prefix := os.Getenv(profileEnv)
	if prefix == "" {
		return func() {}
	}
	out, err := os.Create(prefix + name + ".pprof")
	require.NoError(b, err)
	require.NoError(b, pprof.StartCPUProfile(out))
	return func() {
		pprof.StopCPUProfile()
		require.NoError(b, out.Close())
	}
}

// fleetEnv makes this test binary a fleet of EDS or CDS clients (runFleet) instead of running
// tests.
const fleetEnv = "MESHCHAOS_BENCH_EDS_FLEET"

func TestMain(m *testing.M) {
	if spec := os.Getenv(fleetEnv); spec != "" {
		os.Exit(runFleet(spec))
	}
	os.Exit(m.Run())
}

// childFleet is an edsFleet or a cdsReceipts in a child process, driven over its stdin and
// stdout (runFleet).
type childFleet struct {
	in   io.Writer
	ctl  chan string    // the child's answers: ready, armed, rss N
	acks chan time.Time // EDS: each client's ACK of the target
	cds  chan received  // CDS: each proxy's first CDS since armed
}

// received is one proxy's CDS response: when it arrived and its encoded size.
type received struct {
	at   time.Time
	size int
}

// fleetSpec is what the child fleet is (fleetEnv's value): mode sotw or delta (EDS clients of
// n services) or cds (wildcard CDS proxies in n scopes), and the CPU profile's path if any.
type fleetSpec struct {
	addr    string
	clients int
	mode    string
	n       int
	profile string
}

func (s fleetSpec) String() string {
	return strings.TrimSpace(fmt.Sprintf("%s %d %s %d %s", s.addr, s.clients, s.mode, s.n, s.profile))
}

// parseFleetSpec reads fleetSpec.String's "ADDR CLIENTS MODE N [PROFILE]".
func parseFleetSpec(spec string) (fleetSpec, error) {
	f := strings.Fields(spec)
	if len(f) != 4 && len(f) != 5 {
		return fleetSpec{}, fmt.Errorf("fleet spec %q: want ADDR CLIENTS MODE N [PROFILE]", spec)
	}
	s := fleetSpec{addr: f[0], mode: f[2]}
	var err error
	if s.clients, err = strconv.Atoi(f[1]); err != nil || s.clients <= 0 {
		return fleetSpec{}, fmt.Errorf("fleet spec %q: clients %q is not a positive number", spec, f[1])
	}
	if s.n, err = strconv.Atoi(f[3]); err != nil || s.n <= 0 {
		return fleetSpec{}, fmt.Errorf("fleet spec %q: N %q is not a positive number", spec, f[3])
	}
	switch s.mode {
	case "sotw", "delta", "cds":
	default:
		return fleetSpec{}, fmt.Errorf("fleet spec %q: mode %q is none of sotw, delta, cds", spec, s.mode)
	}
	if len(f) == 5 {
		s.profile = f[4]
	}
	return s, nil
}

// parseFleetEvent reads one of the child's per-client lines: "ack UNIXNANO" (an EDS client
// ACKed the target) or "cds UNIXNANO BYTES" (a proxy received its CDS); ok is false for any
// other line (the child's answers).
func parseFleetEvent(line string) (kind string, r received, ok bool) {
	f := strings.Fields(line)
	switch {
	case len(f) == 2 && f[0] == "ack":
	case len(f) == 3 && f[0] == "cds":
		size, err := strconv.Atoi(f[2])
		if err != nil {
			return "", received{}, false
		}
		r.size = size
	default:
		return "", received{}, false
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return "", received{}, false
	}
	r.at = time.Unix(0, ns)
	return f[0], r, true
}

// startChildFleet starts clients in a child process: mode sotw or delta, EDS clients each
// subscribed to every one of n services, waiting until each holds every CLA; mode cds, wildcard
// CDS proxies in n scopes, waiting until each has its first CDS.
func startChildFleet(b *testing.B, addr string, clients int, mode string, n int) *childFleet {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	spec := fleetSpec{addr: addr, clients: clients, mode: mode, n: n}
	if prefix := os.Getenv(profileEnv); prefix != "" {
		spec.profile = prefix + mode + "-fleet.pprof"
	}
	cmd.Env = append(os.Environ(), fleetEnv+"="+spec.String())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(b, err)
	out, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start(), "start the fleet's process")
	b.Cleanup(func() {
		in.Close() // the child ends at the end of its input
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	f := &childFleet{in: in, ctl: make(chan string, 1), acks: make(chan time.Time, clients), cds: make(chan received, clients)}
	go func() {
		defer close(f.ctl)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			switch kind, r, ok := parseFleetEvent(sc.Text()); {
			case !ok:
				f.ctl <- sc.Text()
			case kind == "ack":
				f.acks <- r.at
			default:
				f.cds <- r
			}
		}
	}()
	ready, err := f.answer(15 * time.Minute)
	require.NoError(b, err, "the fleet of %d clients", clients)
	require.Equal(b, "ready", ready)
	return f
}

// answer is the child's next answer.
func (f *childFleet) answer(timeout time.Duration) (string, error) {
	select {
	case s, ok := <-f.ctl:
		if !ok {
			return "", errors.New("the fleet's process ended (its stderr says why)")
		}
		return s, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("the fleet's process said nothing for %s", timeout)
	}
}

func (f *childFleet) call(cmd string) (string, error) {
	if _, err := fmt.Fprintln(f.in, cmd); err != nil {
		return "", fmt.Errorf("fleet: %s: %w", cmd, err)
	}
	return f.answer(time.Minute)
}

// arm is edsFleet.arm or cdsReceipts.arm in the child.
func (f *childFleet) arm(target string) error {
	got, err := f.call("target " + target)
	if err == nil && got != "armed" {
		err = fmt.Errorf("fleet: armed expected, got %q", got)
	}
	return err
}

// rss is the child's resident memory after a GC that returns the free memory, in bytes.
func (f *childFleet) rss() (int64, error) {
	got, err := f.call("rss")
	if err != nil {
		return 0, err
	}
	v, ok := strings.CutPrefix(got, "rss ")
	if !ok {
		return 0, fmt.Errorf("fleet: rss expected, got %q", got)
	}
	return strconv.ParseInt(v, 10, 64)
}

// runFleet is the child of startChildFleet: spec is fleetSpec's (PROFILE: a CPU profile from
// the first "target" to the end). It says "ready" once every client holds every CLA (sotw,
// delta) or has its first CDS (cds), then answers "target NAME" (arm) with "armed" and "rss"
// with "rss BYTES", and writes "ack UNIXNANO" for every client's ACK of the target (sotw, delta)
// or "cds UNIXNANO BYTES" for every proxy's first CDS since armed with a non-empty NAME (cds);
// it ends at the end of its input.
func runFleet(env string) int {
	spec, err := parseFleetSpec(env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", fleetEnv, err)
		return 2
	}
	var mu sync.Mutex
	say := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = os.Stdout.WriteString(line + "\n")
	}
	var arm func(string)
	var ready <-chan struct{}
	var report func()
	if spec.mode == "cds" {
		f := newCDSReceipts(spec.clients)
		connectCDSFleet(fleetTB{}, spec.addr, spec.clients, spec.n, f.received)
		arm, ready = f.arm, f.ready
		report = func() {
			for r := range f.got {
				say("cds " + strconv.FormatInt(r.at.UnixNano(), 10) + " " + strconv.Itoa(r.size))
			}
		}
	} else {
		f := newEDSFleet(spec.clients, spec.n)
		connectEDSFleet(fleetTB{}, spec.addr, spec.clients, spec.mode == "delta", benchClusters(spec.n), f.acked)
		arm, ready = f.arm, f.ready
		report = func() {
			for at := range f.acks {
				say("ack " + strconv.FormatInt(at.UnixNano(), 10))
			}
		}
	}
	for range spec.clients {
		<-ready
	}
	say("ready")
	go report()
	profile := spec.profile
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch cmd, arg, _ := strings.Cut(sc.Text(), " "); cmd {
		case "target":
			if profile != "" {
				if out, err := os.Create(profile); err == nil && pprof.StartCPUProfile(out) == nil {
					defer func() { pprof.StopCPUProfile(); out.Close() }()
				}
				profile = ""
			}
			arm(arg)
			say("armed")
		case "rss":
			debug.FreeOSMemory() // what the fleet holds, not the garbage of its initial fetch
			say("rss " + strconv.FormatInt(procRSS(fleetTB{}, "self"), 10))
		}
	}
	return 0
}

// cdsReceipts is the CDS proxies of a full-push measurement (runFleet's cds mode): it says when
// each has its first CDS (ready), is armed before a push, and then gives each proxy's first CDS
// since (got).
type cdsReceipts struct {
	mu    sync.Mutex
	armed bool
	first []bool // per proxy: it has had its first CDS
	seen  []bool // per proxy: its CDS since armed is reported
	ready chan struct{}
	got   chan received
}

func newCDSReceipts(proxies int) *cdsReceipts {
	return &cdsReceipts{first: make([]bool, proxies), seen: make([]bool, proxies),
		ready: make(chan struct{}, proxies), got: make(chan received, proxies)}
}

// received is connectCDSFleet's onCDS.
func (f *cdsReceipts) received(proxy int, resp adsclient.Response) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.first[proxy] {
		f.first[proxy] = true
		f.ready <- struct{}{}
		return
	}
	if !f.armed || f.seen[proxy] {
		return
	}
	f.seen[proxy] = true
	f.got <- received{at: resp.At, size: resp.Size}
}

// arm makes each proxy's next CDS reported once (target not empty: a push follows) or none
// (target empty).
func (f *cdsReceipts) arm(target string) {
	f.mu.Lock()
	f.armed = target != ""
	clear(f.seen)
	f.mu.Unlock()
}

// fleetTB lets connectEDSFleet run outside a test (runFleet): a failure ends the process.
type fleetTB struct{ testing.TB }

func (fleetTB) Helper()                   {}
func (fleetTB) Cleanup(func())            {}
func (fleetTB) Errorf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
func (fleetTB) FailNow()                  { os.Exit(2) }
func (t fleetTB) Fatalf(f string, a ...any) {
	t.Errorf(f, a...)
	t.FailNow()
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procRSS is a process's resident memory (VmRSS) in bytes; pid "self" for this one.
func procRSS(tb testing.TB, pid string) int64 {
	raw, err := os.ReadFile("/proc/" + pid + "/status")
	require.NoError(tb, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			require.NoError(tb, err)
			return kb << 10
		}
	}
	tb.Fatalf("no VmRSS in /proc/%s/status", pid)
	return 0
}
