package xdsproxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/meshchaos/meshchaos/workloads/xdsproxy"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// The benchmarks run the proxy as its own process (this test binary re-executed), as it runs in a
// pod, so its memory is its own and it does not share a Go runtime with the load generator.
const (
	childEnv   = "XDSPROXY_BENCH_CHILD_XDS"
	backendEnv = "XDSPROXY_BENCH_BACKEND"
)

// runBackend serves a tiny HTTP answer on loopback and prints its address: the backend runs in
// its own process too, so "direct" crosses processes like an app calling another pod does.
func runBackend() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(ln.Addr().String())
	go func() { io.Copy(io.Discard, os.Stdin); os.Exit(0) }() // exit with the parent
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
}

func startBackend(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), backendEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start backend process: %v", err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("backend process: %v", err)
	}
	return strings.TrimSpace(addr)
}

func TestMain(m *testing.M) {
	if os.Getenv(backendEnv) != "" {
		runBackend()
		return
	}
	if xds := os.Getenv(childEnv); xds != "" {
		runChild(xds, os.Getenv("XDSPROXY_BENCH_CHILD_ADMIN"))
		return
	}
	os.Exit(m.Run())
}

func runChild(xds, admin string) {
	p, err := xdsproxy.New(xdsproxy.Options{XDSAddress: xds, NodeID: "router~127.0.0.1~gw.bench~bench.svc.cluster.local", AdminAddress: admin})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := p.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type child struct {
	cmd   *exec.Cmd
	admin string
}

func startChild(b *testing.B, xds string) *child {
	b.Helper()
	admin := xdstest.FreeAddr(b)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+xds, "XDSPROXY_BENCH_CHILD_ADMIN="+admin)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("start proxy process: %v", err)
	}
	c := &child{cmd: cmd, admin: admin}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	if err := xdsproxy.Wait(context.Background(), admin, 20*time.Second, 20*time.Millisecond); err != nil {
		b.Fatalf("proxy process: %v", err)
	}
	return c
}

// rssBytes is the process's resident set size.
func (c *child) rssBytes(b *testing.B) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("read proxy status: %v", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// heapBytes is the proxy's live Go heap as its /stats reports it.
func (c *child) heapBytes(b *testing.B) int64 {
	resp, err := http.Get("http://" + c.admin + "/stats")
	if err != nil {
		b.Fatalf("stats: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatalf("stats: %v", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "server.memory_allocated: "); ok {
			x, _ := strconv.ParseInt(v, 10, 64)
			return x
		}
	}
	b.Fatal("no server.memory_allocated in /stats")
	return 0
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func benchDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("MESHCHAOS_BENCH_DURATION")); err == nil && d > 0 {
		return d
	}
	return 10 * time.Second
}

// benchWorld: services × endpoints behind one listener; svc-0 reaches the real backend.
func benchWorld(listener, backendAddr string, services, endpoints int) []types.Resource {
	rc := xdstest.RouteConfig("gw")
	var res []types.Resource
	for i := range services {
		name := fmt.Sprintf("outbound|80||svc-%d.bench.svc.cluster.local", i)
		var addrs []string
		for j := range endpoints {
			if i == 0 {
				addrs = append(addrs, backendAddr)
			} else {
				addrs = append(addrs, fmt.Sprintf("10.%d.%d.%d:8080", 1+i/250, i%250, j))
			}
		}
		res = append(res, xdstest.EDSCluster(name, ""), xdstest.CLA(name, addrs...))
		host := fmt.Sprintf("svc-%d.bench.svc.cluster.local", i)
		rc.VirtualHosts = append(rc.VirtualHosts, xdstest.VirtualHost(host, []string{host, host + ":80"}, xdstest.PrefixRoute("/", name)))
	}
	return append(res, xdstest.InlineHTTPListener("gw", listener, rc))
}

func attack(b *testing.B, url, host string, d time.Duration, all, round *vegeta.Metrics, during ...func()) {
	b.Helper()
	hdr := http.Header{}
	hdr.Set("Host", host)
	tr := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: url, Header: hdr})
	a := vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Connections(64), vegeta.Workers(16), vegeta.Timeout(5*time.Second))
	stop := make(chan struct{})
	if len(during) > 0 {
		go func() {
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					during[0]()
				}
			}
		}()
	}
	for res := range a.Attack(tr, vegeta.Rate{Freq: 500, Per: time.Second}, d, url) {
		if all != nil {
			all.Add(res)
			round.Add(res)
		}
	}
	close(stop)
}

// BenchmarkProxy500rps measures what xdsproxy adds at 500 requests/s over keep-alive
// connections (Vegeta, loopback), against calling the backend directly at the same time and rate,
// in rounds so machine noise hits both; and the proxy process's memory at rest (100 services × 10
// endpoints configured) and under that load. Proxy and backend each run in their own process.
func BenchmarkProxy500rps(b *testing.B) {
	backendAddr := startBackend(b)
	backendURL := "http://" + backendAddr
	xds := xdstest.Start(b)
	listener := xdstest.FreeAddr(b)
	xds.Set(b, "1", benchWorld(listener, backendAddr, 100, 10)...)
	c := startChild(b, xds.Addr)
	host := "svc-0.bench.svc.cluster.local"

	for b.Loop() {
		time.Sleep(time.Second)
		restRSS, restHeap := c.rssBytes(b), c.heapBytes(b)
		// Warm both paths (connections, pools), unrecorded.
		attack(b, backendURL+"/", host, time.Second, nil, nil)
		attack(b, "http://"+listener+"/", host, time.Second, nil, nil)

		d := benchDuration()
		// Many short rounds, direct and proxied side by side: a burst of load from elsewhere on
		// the machine hits both, and the per-round medians below discount the worst rounds.
		const rounds = 10
		direct, proxied := &vegeta.Metrics{}, &vegeta.Metrics{}
		var roundAdded50, roundAdded99 []time.Duration
		var loadRSS, loadHeap int64
		sample := func() {
			loadRSS = max(loadRSS, c.rssBytes(b))
			loadHeap = max(loadHeap, c.heapBytes(b))
		}
		for range rounds {
			// Both streams run at the same time (500/s each): a stall of the machine then
			// delays both alike instead of whichever happened to be running.
			rd, rp := &vegeta.Metrics{}, &vegeta.Metrics{}
			var wg sync.WaitGroup
			wg.Go(func() { attack(b, backendURL+"/", host, d/rounds, direct, rd) })
			attack(b, "http://"+listener+"/", host, d/rounds, proxied, rp, sample)
			wg.Wait()
			rd.Close()
			rp.Close()
			roundAdded50 = append(roundAdded50, rp.Latencies.P50-rd.Latencies.P50)
			roundAdded99 = append(roundAdded99, rp.Latencies.P99-rd.Latencies.P99)
		}
		direct.Close()
		proxied.Close()
		if direct.Success < 1 || proxied.Success < 1 {
			b.Fatalf("not every request succeeded: direct %.4f proxied %.4f (errors %v %v)", direct.Success, proxied.Success, direct.Errors, proxied.Errors)
		}
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		mib := func(n int64) float64 { return float64(n) / (1 << 20) }
		b.ReportMetric(us(direct.Latencies.P50), "direct-p50-µs")
		b.ReportMetric(us(direct.Latencies.P99), "direct-p99-µs")
		b.ReportMetric(us(proxied.Latencies.P50), "proxied-p50-µs")
		b.ReportMetric(us(proxied.Latencies.P99), "proxied-p99-µs")
		b.ReportMetric(us(proxied.Latencies.P50-direct.Latencies.P50), "added-p50-µs")
		b.ReportMetric(us(proxied.Latencies.P99-direct.Latencies.P99), "added-p99-µs")
		b.ReportMetric(us(median(roundAdded50)), "added-p50-round-median-µs")
		b.ReportMetric(us(median(roundAdded99)), "added-p99-round-median-µs")
		b.ReportMetric(mib(restRSS), "rest-rss-MiB")
		b.ReportMetric(mib(restHeap), "rest-heap-MiB")
		b.ReportMetric(mib(loadRSS), "load-rss-MiB")
		b.ReportMetric(mib(loadHeap), "load-heap-MiB")
		b.Logf("requests direct=%d proxied=%d at 500/s over %s each; direct p50=%s p99=%s; proxied p50=%s p99=%s; added p99 per round %v",
			direct.Requests, proxied.Requests, d, direct.Latencies.P50, direct.Latencies.P99, proxied.Latencies.P50, proxied.Latencies.P99, roundAdded99)
	}
}
