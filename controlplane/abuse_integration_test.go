package controlplane_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	apinet "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/controlplane"
	"github.com/meshchaos/meshchaos/controlplane/internal/heapstat"
	"github.com/meshchaos/meshchaos/controlplane/xds"
	"github.com/meshchaos/meshchaos/controlplane/xds/watchcache"
	"github.com/meshchaos/meshchaos/workloads/adsload"
)

// The abusers run in a process of their own (this test binary, re-executed), so the control
// plane's heap, measured in this process, holds nothing of theirs.
const (
	envAbuseMode    = "MESHCHAOS_ABUSE_MODE"
	envAbuseXDS     = "MESHCHAOS_ABUSE_XDS"
	envAbuseClients = "MESHCHAOS_ABUSE_CLIENTS"
)

// The abuse test's server limits (lower than the defaults, so a short test reaches them) and
// how often a slow consumer reopens its stream.
const (
	maxStreams  = 600
	maxStalled  = 20
	sendTimeout = 3 * time.Second
	slowPeriod  = 8 * time.Second
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envAbuseMode); mode != "" {
		os.Exit(runAbuser(mode))
	}
	if spec := os.Getenv(envCPChild); spec != "" {
		os.Exit(runCPChild(spec))
	}
	if spec := os.Getenv(envSecureGRPCChild); spec != "" {
		os.Exit(runSecureGRPCChild(spec))
	}
	os.Exit(m.Run())
}

// runAbuser abuses until its stdin closes (the test ended, whichever way), printing its counts
// as a JSON line every 100 ms.
func runAbuser(mode string) int {
	var clients int
	fmt.Sscan(os.Getenv(envAbuseClients), &clients)
	a, err := adsload.NewAbuser(adsload.AbuseOptions{XDSAddress: os.Getenv(envAbuseXDS), Mode: mode, Clients: clients,
		Period: slowPeriod})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	go func() {
		for ctx.Err() == nil {
			b, _ := json.Marshal(a.Stats())
			fmt.Println(string(b))
			time.Sleep(100 * time.Millisecond)
		}
	}()
	_ = a.Run(ctx)
	b, _ := json.Marshal(a.Stats())
	fmt.Println(string(b))
	return 0
}

// abuserProc is a running abuser process.
type abuserProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	stats adsload.AbuseStats
	done  chan struct{}
}

func startAbuser(t *testing.T, xdsAddr, mode string, clients int) *abuserProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envAbuseMode+"="+mode, envAbuseXDS+"="+xdsAddr, fmt.Sprintf("%s=%d", envAbuseClients, clients))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &abuserProc{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var s adsload.AbuseStats
			if json.Unmarshal(sc.Bytes(), &s) == nil {
				p.mu.Lock()
				p.stats = s
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *abuserProc) Stats() adsload.AbuseStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// stop closes the abuser's stdin and waits for it (killing it after 20 s).
func (p *abuserProc) stop() adsload.AbuseStats {
	if p.cmd.ProcessState == nil {
		p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		_ = p.cmd.Wait()
	}
	return p.Stats()
}

// abusePhase is one row of the figures.
type abusePhase struct {
	mode          string
	p50, p99, max time.Duration
	// live heap after GC: before the abuser started, with it running (after the changes), and
	// once its streams are gone
	heapBefore, heapDuring, heapAfter uint64
	goroutines                        int
	abuser                            adsload.AbuseStats
}

// TestAbuseGoodProxiesConverge runs well-behaved proxies (an adsload fleet) against the
// reference control plane on a real API server, changes a ServiceEntry's endpoints (with a new
// ServiceEntry each time: a full push too) and measures, per change, API update → every good
// proxy holding the new endpoints; first with no abuser, then while each abuser runs in a
// process of its own. The good proxies must converge within abuseBound every time, and the
// control plane's heap and goroutines must come back once an abuser stops.
func TestAbuseGoodProxiesConverge(t *testing.T) {
	const (
		ns         = "abuse"
		good       = 20
		rounds     = 10
		abuseBound = 10 * time.Second
	)
	c := startCluster(t)
	kc, err := kubernetes.NewForConfig(c.cfg)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// 300 ServiceEntries × 5 endpoints: CDS and EDS responses of ~100 KB, over a 64 KiB
	// flow-control window, so a client that does not read blocks the server's send.
	c.createSEs(t, ns, 0, 300, 5)
	flap := func(n int) *apinet.ServiceEntry {
		s := seSpec("flap.abuse.test", 9999, n)
		return s
	}
	_, err = c.istio.NetworkingV1().ServiceEntries(ns).Create(ctx, &networkingv1.ServiceEntry{
		ObjectMeta: metav1.ObjectMeta{Name: "flap", Namespace: ns}, Spec: *flap(1)}, metav1.CreateOptions{})
	require.NoError(t, err)

	cp := startCPWith(t, c.cfg, func(o *controlplane.Options) {
		// New streams admitted far faster than istiod's default (25/s on 2 CPUs, burst 1), so
		// that the flood reaches MaxStreams, the limit this test holds; istiod's admission of a
		// reconnect storm is xds's TestReconnectStormAdmittedAtIstiodsRate.
		o.XDSLimits = xds.Limits{SendTimeout: sendTimeout, MaxStreams: maxStreams, MaxStalledSends: maxStalled,
			NewStreamsPerSecond: 200, NewStreamBurst: 1000}
	})
	waitFor(t, time.Minute, "the sync gate", func() bool { return readyStatus(t, cp) == 200 })

	load, err := adsload.New(adsload.Options{XDSAddress: cp.XDSAddr(), Clients: good, Namespace: "good", Track: "flap.abuse.test"})
	require.NoError(t, err)
	lctx, lcancel := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); _ = load.Run(lctx) }()
	t.Cleanup(func() { lcancel(); <-loadDone })
	holding := func(n int, since time.Time) ([]time.Duration, bool) {
		var lat []time.Duration
		for _, rs := range load.Tracked().Clients {
			i := slices.IndexFunc(rs, func(r adsload.Receipt) bool { return r.Endpoints == n && !r.At.Before(since) })
			if i < 0 || rs[len(rs)-1].Endpoints != n {
				return nil, false
			}
			lat = append(lat, rs[i].At.Sub(since))
		}
		return lat, true
	}
	waitFor(t, time.Minute, "every good proxy holding the tracked cluster", func() bool {
		_, ok := holding(1, time.Time{})
		return ok
	})

	seq := 0
	// measure fails t (the phase's own test: a failure in one phase must not stop the others).
	measure := func(t *testing.T, mode string) []time.Duration {
		var all []time.Duration
		for r := range rounds {
			seq++
			n := 2 + seq%3 // 2, 3, 4, 2, ...: always a change
			se, err := c.istio.NetworkingV1().ServiceEntries(ns).Get(ctx, "flap", metav1.GetOptions{})
			require.NoError(t, err)
			se.Spec = *flap(n)
			start := time.Now()
			_, err = c.istio.NetworkingV1().ServiceEntries(ns).Update(ctx, se, metav1.UpdateOptions{})
			require.NoError(t, err)
			c.createSEs(t, ns, 1000+seq, 1001+seq, 1) // and a full push
			var lat []time.Duration
			deadline := start.Add(abuseBound)
			for {
				var ok bool
				if lat, ok = holding(n, start); ok {
					break
				}
				if time.Now().After(deadline) {
					var lag []string
					for i, rs := range load.Tracked().Clients {
						if last := rs[len(rs)-1]; last.Endpoints != n {
							lag = append(lag, fmt.Sprintf("client %d holds %d since %s", i, last.Endpoints, last.At.Sub(start)))
						}
					}
					if dir := os.Getenv("MESHCHAOS_ABUSE_PROFILE_DIR"); dir != "" {
						// What every goroutine waits on when the good proxies are late.
						if f, err := os.Create(filepath.Join(dir, mode+".late.goroutines.txt")); err == nil {
							_ = pprof.Lookup("goroutine").WriteTo(f, 2)
							f.Close()
						}
					}
					t.Fatalf("%s, round %d: the good proxies did not all get %d endpoints within %s (%d/%d connected, streams %d; %d scopes; limits hit %s): %s",
						mode, r, n, abuseBound, load.Stats().Connected, good, load.Stats().Streams, len(cp.Caches.Scopes()),
						metricText(cp.Metrics.XDSLimited), strings.Join(lag, "; "))
				}
				time.Sleep(5 * time.Millisecond)
			}
			all = append(all, lat...)
		}
		return all
	}
	heap := heapstat.Live // after two collections: what sync.Pools hold survives one

	var phases []abusePhase
	record := func(mode string, lat []time.Duration, before, during uint64) *abusePhase {
		slices.Sort(lat)
		pick := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
		phases = append(phases, abusePhase{mode: mode, p50: pick(0.5), p99: pick(0.99), max: lat[len(lat)-1],
			heapBefore: before, heapDuring: during})
		return &phases[len(phases)-1]
	}
	baseHeap := heap()
	baseG := runtime.NumGoroutine()
	p := record("none", measure(t, "none"), baseHeap, heap())
	p.heapAfter, p.goroutines = p.heapDuring, runtime.NumGoroutine()

	clients := map[string]int{adsload.AbuseNACK: 100, adsload.AbuseSlow: 200, adsload.AbuseFlood: 1000,
		adsload.AbuseDisconnect: 50, adsload.AbuseMalformed: 12}
	for _, mode := range adsload.AbuseModes {
		t.Run(mode, func(t *testing.T) {
			before := heap()
			limited := func(reason string) float64 { return testutil.ToFloat64(cp.Metrics.XDSLimited.WithLabelValues(reason)) }
			rejects := sumCounter(cp.Metrics.Rejects)
			timeouts, unanswered, refused := limited("send-timeout"), limited("unanswered"), limited("streams")
			a := startAbuser(t, cp.XDSAddr(), mode, clients[mode])
			// Measure only once the abuse is in full swing (the abuser says so).
			waitFor(t, time.Minute, mode+" abuse under way", func() bool {
				st := a.Stats()
				switch mode {
				case adsload.AbuseMalformed:
					var ended int64
					for _, n := range st.Ended {
						ended += n
					}
					return ended >= 12
				case adsload.AbuseFlood:
					return st.Streams >= maxStreams
				default:
					return st.Streams >= int64(clients[mode])
				}
			})
			lat := measure(t, mode)
			if mode == adsload.AbuseSlow {
				// The slow consumers' streams were closed by the send timeout (a blocked send, or
				// responses left unanswered), not left to block; and the server holds no more of
				// them than were opened within one timeout (see abuseHeap).
				waitFor(t, 30*time.Second, "a send timeout", func() bool {
					return limited("send-timeout") > timeouts || limited("unanswered") > unanswered
				})
				most := good + clients[mode]*int(sendTimeout)/int(slowPeriod) + 1
				waitFor(t, 30*time.Second, fmt.Sprintf("at most %d streams open", most), func() bool {
					return testutil.ToFloat64(cp.Metrics.ConnectedProxies) <= float64(most)
				})
			}
			p := record(mode, lat, before, heap())
			if dir := os.Getenv("MESHCHAOS_ABUSE_PROFILE_DIR"); dir != "" {
				f, err := os.Create(filepath.Join(dir, mode+".heap.pb.gz"))
				require.NoError(t, err)
				require.NoError(t, pprof.Lookup("heap").WriteTo(f, 0))
				f.Close()
			}
			st := a.stop()
			p.abuser = st
			switch mode {
			case adsload.AbuseNACK:
				require.Greater(t, sumCounter(cp.Metrics.Rejects)-rejects, 0.0, "NACKs counted")
				require.LessOrEqual(t, sumCounter(cp.Metrics.Rejects)-rejects, float64(st.NACKs)/2+1,
					"a NACK repeated for the same nonce is counted once")
			case adsload.AbuseFlood:
				require.Greater(t, limited("streams"), refused, "streams beyond the limit refused")
			case adsload.AbuseMalformed:
				require.NotZero(t, st.Ended["InvalidArgument"], "unknown type URLs refused: %v", st.Ended)
				require.NotZero(t, st.Ended["ResourceExhausted"], "an oversized request refused: %v", st.Ended)
			}
			// Nothing of the abuse stays behind: streams, goroutines, heap.
			waitFor(t, 30*time.Second, "the abusers' streams gone", func() bool {
				return testutil.ToFloat64(cp.Metrics.ConnectedProxies) == good
			})
			waitFor(t, 30*time.Second, "the control plane's goroutines back to their count before the abuse",
				func() bool { return runtime.NumGoroutine() <= baseG+20 })
			p.heapAfter, p.goroutines = heap(), runtime.NumGoroutine()
			bound := abuseHeap(mode, clients[mode], largestResponse(cp))
			require.Less(t, p.heapDuring, before+bound, "live heap during %s abuse (bound %d MiB over %d MiB before)", mode, bound>>20, before>>20)
			require.Less(t, p.heapAfter, before+32<<20, "live heap once the %s abusers are gone", mode)
		})
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\nconvergence of %d good proxies, %d changes per phase (API update → every proxy holds the new endpoints); load average %s\n",
		good, rounds, loadAverage())
	fmt.Fprintf(&b, "%-10s %8s %8s %8s %8s %8s %8s %6s  %s\n", "abuse", "p50", "p99", "max", "heap MiB", "during", "after", "gor", "abuser")
	for _, p := range phases {
		fmt.Fprintf(&b, "%-10s %8s %8s %8s %8.1f %8.1f %8.1f %6d  streams=%d responses=%d nacks=%d ended=%v\n", p.mode,
			p.p50.Round(time.Millisecond), p.p99.Round(time.Millisecond), p.max.Round(time.Millisecond),
			float64(p.heapBefore)/(1<<20), float64(p.heapDuring)/(1<<20), float64(p.heapAfter)/(1<<20), p.goroutines,
			p.abuser.Streams, p.abuser.Responses, p.abuser.NACKs, p.abuser.Ended)
	}
	t.Log(b.String())
	for _, p := range phases {
		require.LessOrEqual(t, p.p99, abuseBound, "good proxies' convergence P99 with %s abuse", p.mode)
	}
}

// abuseHeap bounds the heap an abuser of mode with clients clients may cost while it runs, from
// the server's limits and what gRPC holds per stream; largest is the largest response's size.
func abuseHeap(mode string, clients, largest int) uint64 {
	// gRPC keeps what a stream was given until the proxy has read it: past the 64 KiB write
	// quota one more response is taken, so at most two encoded responses, each in a buffer of
	// less than twice its size (the server's codec uses power-of-two classes), plus the
	// connection's read and write buffers (32 KiB each).
	class := uint64(1) << bits.Len(uint(largest-1))
	perStream := 2*class + 64<<10
	streams := uint64(clients) // streams that read hold only their in-flight responses
	switch mode {
	case adsload.AbuseSlow:
		// A stream that answers no response is closed sendTimeout after its first one
		// (unanswered), or sooner by the stalled-send budget: only the streams opened in the
		// last sendTimeout hold data, clients × sendTimeout / slowPeriod; and at most
		// maxStalled sends are blocked, each with one more response.
		streams = uint64(clients)*uint64(sendTimeout)/uint64(slowPeriod) + 1
		return streams*perStream + maxStalled*class + abuseSlack
	case adsload.AbuseFlood:
		streams = maxStreams // beyond, refused before any response
	case adsload.AbuseMalformed:
		// Requests of up to MaxRecvMsgSize, refused or answered at once: what is being
		// received and decoded.
		return uint64(clients)*uint64(xds.DefaultLimits.MaxRecvMsgSize) + abuseSlack
	}
	return streams*perStream + abuseSlack
}

// abuseSlack: without any abuse the live heap swings by up to ~10 MiB between pushes (the
// "none" row), plus requests being decoded.
const abuseSlack = 24 << 20

// largestResponse is the size of the largest response the control plane serves now: every
// assignment (EDS wildcard) or a scope's clusters, listeners or routes, each resource in an Any.
func largestResponse(cp *controlplane.ControlPlane) int {
	size := func(rs map[string]types.Resource) int {
		n := 100 // the response's own fields
		for _, r := range rs {
			n += proto.Size(r) + 64 // the Any's type URL and framing
		}
		return n
	}
	largest := size(cp.Caches.Endpoints.GetResources())
	for _, sc := range cp.Caches.Scopes() {
		for _, lc := range []*watchcache.Cache{sc.Clusters, sc.Listeners, sc.APIListeners, sc.Routes} {
			largest = max(largest, size(lc.GetResources()))
		}
	}
	return largest
}

// metricText is a counter vector's series, for failure messages.
func metricText(c prometheus.Collector) string {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var out []string
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) == nil {
			out = append(out, fmt.Sprintf("%v=%g", pb.GetLabel()[0].GetValue(), pb.GetCounter().GetValue()))
		}
	}
	return strings.Join(out, " ")
}

// sumCounter adds up every series of a counter vector.
func sumCounter(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) == nil {
			sum += pb.GetCounter().GetValue()
		}
	}
	return sum
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
