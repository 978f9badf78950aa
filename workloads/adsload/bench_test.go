package adsload_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshchaos/meshchaos/workloads/adsload"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// The benchmark runs the xDS server as a separate process (this test binary re-executed) so
// the memory measured in this process is adsload's alone.
const childEnv = "ADSLOAD_BENCH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runServer()
		return
	}
	os.Exit(m.Run())
}

// runServer serves mesh(50) and, on SIGUSR1, pushes mesh(51) as version 2.
func runServer() {
	var tb fakeTB
	xds := xdstest.Start(&tb)
	if err := xds.SetErr("1", mesh(50)...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(xds.Addr)
	usr := make(chan os.Signal, 1)
	signal.Notify(usr, syscall.SIGUSR1)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			xds.Stop()
			return
		case <-usr:
			xds.SetErr("2", mesh(51)...)
		}
	}
}

// fakeTB lets xdstest.Start run outside a test (the child process).
type fakeTB struct{ testing.TB }

func (*fakeTB) Helper()                   {}
func (*fakeTB) Cleanup(func())            {}
func (*fakeTB) Fatalf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...); os.Exit(2) }

func heapBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

func rssBytes() int64 {
	raw, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkADSLoadMemoryPerClient: memory per connected ADS client (Go heap and RSS of this
// process, after GC), with each client holding 50 clusters, 50 assignments (100 endpoints), one
// listener and one route config; plus the process's total RSS with them (the fleet's cost), the
// initial sync time and the fan-out of one push. MESHCHAOS_BENCH_ADS_CLIENTS sets the number of
// clients (default 500; issue 19's target is at 1000).
func BenchmarkADSLoadMemoryPerClient(b *testing.B) {
	n := 500
	if v, err := strconv.Atoi(os.Getenv("MESHCHAOS_BENCH_ADS_CLIENTS")); err == nil && v > 0 {
		n = v
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start xDS server process: %v", err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("xDS server process: %v", err)
	}
	addr = strings.TrimSpace(addr)

	for b.Loop() {
		runtime.GC()
		runtime.GC()
		heap0, rss0 := heapBytes(), rssBytes()
		l, err := adsload.New(adsload.Options{XDSAddress: addr, Clients: n})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		start := time.Now()
		go func() { l.Run(ctx); close(done) }()
		synced := func(v string) bool {
			s := l.Stats()
			for _, typ := range []string{"cds", "eds", "lds", "rds"} {
				if s.ClientsAtVersion[typ][v] != n {
					return false
				}
			}
			return true
		}
		// 2 min at 1000 clients; each client more takes its initial fetch on the same 2 cores.
		deadline := time.Now().Add(2*time.Minute + time.Duration(n)*10*time.Millisecond)
		for !synced("1") {
			if time.Now().After(deadline) {
				b.Fatalf("clients did not sync: %+v", l.Stats().ClientsAtVersion)
			}
			time.Sleep(10 * time.Millisecond)
		}
		syncTime := time.Since(start)
		runtime.GC()
		runtime.GC()
		heap1, rss1 := heapBytes(), rssBytes()

		cmd.Process.Signal(syscall.SIGUSR1)
		for !synced("2") {
			if time.Now().After(deadline) {
				b.Fatal("push 2 did not reach every client")
			}
			time.Sleep(5 * time.Millisecond)
		}
		var fanout float64
		for _, p := range l.Stats().Pushes {
			if p.Version == "2" {
				fanout = max(fanout, p.ConvergenceMs)
			}
		}
		st := l.Stats()
		cancel()
		<-done

		b.ReportMetric(float64(heap1-heap0)/float64(n)/1024, "heap-KiB/client")
		b.ReportMetric(float64(rss1-rss0)/float64(n)/1024, "rss-KiB/client")
		// The whole process's RSS: what a fleet of n clients costs beside the cluster. The unit
		// names n so that a run with another fleet size cannot stand for the 1000-client figure.
		b.ReportMetric(float64(rss1)/(1<<20), fmt.Sprintf("rss-MiB/%d-clients", n))
		b.ReportMetric(float64(syncTime.Milliseconds()), "initial-sync-ms")
		b.ReportMetric(fanout, "push-fanout-ms")
		b.Logf("%d clients; heap %d→%d B, rss %d→%d B; %d bytes received in total; sync %s; push 2 fan-out %.1f ms",
			n, heap0, heap1, rss0, rss1, st.Bytes["cds"]+st.Bytes["eds"]+st.Bytes["lds"]+st.Bytes["rds"], syncTime, fanout)
	}
}
