// Command benchtable turns `go test -bench` output into the table of issue 19's targets for the
// reference control plane: per target its limit, the figure measured, the ratio measured/limit and
// whether it is met, plus the machine's load average at the start and the end of the run.
//
//	go test -run '^$' -bench ... ./... | tee bench.txt
//	go run ./hack/benchtable -load-start "$(cat /proc/loadavg)" bench.txt
//
// A target whose figure is absent from the output (benchmark not run, failed or renamed) is
// MISSING, never met, and the command exits 1; so does any missed target. Bad usage exits 2.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Target is one figure of the issue: the benchmark that measures it, the metric's unit, and the
// limit. Kind says how the figure is held against the limit.
type Target struct {
	Name  string
	Bench string // benchmark name without the -GOMAXPROCS suffix
	Unit  string // b.ReportMetric unit
	Limit float64
	Kind  Kind
}

// Kind is how a figure is held against its limit.
type Kind int

const (
	// AtMost: met when measured ≤ limit.
	AtMost Kind = iota
	// AtLeast: met when measured ≥ limit.
	AtLeast
	// Report: a figure the issue asks to report, with no limit.
	Report
)

// Targets are issue 19's, in its order, then issue 35's.
var Targets = []Target{
	{"heap per endpoint, 5000 SE × 10 (B)", "BenchmarkHeapPerEndpoint/plain/SE=5000", "B/endpoint", 1536, AtMost},
	{"heap per endpoint, 50 000 SE × 10 (B)", "BenchmarkHeapPerEndpoint/plain/SE=50000", "B/endpoint", 1536, AtMost},
	{"heap growth exponent 5000→50 000", "BenchmarkHeapPerEndpoint/plain/growth", "exponent", 1.1, AtMost},
	{"quadratic-scope still blows up: exponent 500→1000", "BenchmarkHeapPerEndpoint/quadratic-scope/growth", "exponent", 1.8, AtLeast},
	{"gated start to first complete CDS, 5000 SE (s)", "BenchmarkHeapPerEndpoint/plain/SE=5000", "s/start-to-serve", 1, AtMost},
	{"gated start to first complete CDS, 50 000 SE (s)", "BenchmarkHeapPerEndpoint/plain/SE=50000", "s/start-to-serve", 10, AtMost},
	{"  its CPU, 50 000 SE: control plane (s)", "BenchmarkHeapPerEndpoint/plain/SE=50000", "cp-cpu-s/start-to-serve", 0, Report},
	{"  its CPU, 50 000 SE: kube-apiserver + etcd (s)", "BenchmarkHeapPerEndpoint/plain/SE=50000", "apiserver-cpu-s/start-to-serve", 0, Report},
	{"endpoint change → 1000 SotW clients ACKed, P99 (ms)", "BenchmarkEndpointChangeACKed1000/sotw", "p99-ms", 250, AtMost},
	{"endpoint change → 1000 delta clients ACKed, P99 (ms)", "BenchmarkEndpointChangeACKed1000/delta", "p99-ms", 250, AtMost},
	{"full push, 1000 proxies, 5000 SE: P50 (ms)", "BenchmarkFullPush1000Proxies", "p50-ms", 0, Report},
	{"full push, 1000 proxies, 5000 SE: P99 (ms)", "BenchmarkFullPush1000Proxies", "p99-ms", 0, Report},
	{"full push, 1000 proxies, 5000 SE: bytes sent (MiB)", "BenchmarkFullPush1000Proxies", "MiB-sent/push", 0, Report},
	{"full push: generations per scope (10 scopes, 100 proxies each)", "BenchmarkFullPush1000Proxies", "generations/scope", 1, AtMost},
	{"ServiceEntry apply rate, harness → apiserver (/s)", "BenchmarkServiceEntryApply", "SE/s", 1000, AtLeast},
	{"  its CPU per SE: the harness (ms)", "BenchmarkServiceEntryApply", "harness-cpu-ms/SE", 0, Report},
	{"  its CPU per SE: kube-apiserver (ms)", "BenchmarkServiceEntryApply", "apiserver-cpu-ms/SE", 0, Report},
	{"  its CPU per SE: etcd (ms)", "BenchmarkServiceEntryApply", "etcd-cpu-ms/SE", 0, Report},
	{"adsload 1000 clients: total RSS (MiB)", "BenchmarkADSLoadMemoryPerClient", "rss-MiB/1000-clients", 200, AtMost},
	// Issue 35's: 10 000 proxies.
	{"endpoint change → 10 000 SotW clients ACKed, P99 (ms)", "BenchmarkEndpointChangeACKed10000/sotw", "p99-ms", 2000, AtMost},
	{"endpoint change → 10 000 delta clients ACKed, P99 (ms)", "BenchmarkEndpointChangeACKed10000/delta", "p99-ms", 1000, AtMost},
	{"  control plane's RSS with 10 000 SotW clients (MiB)", "BenchmarkEndpointChangeACKed10000/sotw", "cp-rss-MiB", 0, Report},
	{"  control plane's RSS with 10 000 delta clients (MiB)", "BenchmarkEndpointChangeACKed10000/delta", "cp-rss-MiB", 0, Report},
	{"  its 10 000 SotW clients, keeping no resources: RSS (MiB)", "BenchmarkEndpointChangeACKed10000/sotw", "fleet-rss-MiB/10000-clients", 0, Report},
	{"  its 10 000 delta clients, keeping no resources: RSS (MiB)", "BenchmarkEndpointChangeACKed10000/delta", "fleet-rss-MiB/10000-clients", 0, Report},
	{"full push, 10 000 proxies, 1000 SE: P50 (ms)", "BenchmarkFullPush10000Proxies", "p50-ms", 0, Report},
	{"full push, 10 000 proxies, 1000 SE: P99 (ms)", "BenchmarkFullPush10000Proxies", "p99-ms", 0, Report},
	{"full push, 10 000 proxies, 1000 SE: bytes sent (MiB)", "BenchmarkFullPush10000Proxies", "MiB-sent/push", 0, Report},
	{"full push, 10 000 proxies: generations per scope (10 scopes, 1000 proxies each)", "BenchmarkFullPush10000Proxies", "generations/scope", 1, AtMost},
	{"  control plane's RSS with 10 000 proxies (MiB)", "BenchmarkFullPush10000Proxies", "cp-rss-MiB", 0, Report},
	{"  its 10 000 proxies, keeping no resources: RSS (MiB)", "BenchmarkFullPush10000Proxies", "fleet-rss-MiB/10000-proxies", 0, Report},
	{"adsload 10 000 SotW clients: total RSS (MiB)", "BenchmarkADSLoadMemoryPerClient", "rss-MiB/10000-clients", 1536, AtMost},
}

// Results are the metrics of a run: benchmark name → unit → value.
type Results map[string]map[string]float64

// Merge adds other's figures to r: a benchmark run in several files (adsload at 1000 and at
// 10 000 clients) keeps the figures of each; a figure in both takes other's.
func (r Results) Merge(other Results) {
	for b, m := range other {
		if r[b] == nil {
			r[b] = map[string]float64{}
		}
		for unit, v := range m {
			r[b][unit] = v
		}
	}
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// Parse reads the standard benchmark line format ("BenchmarkX-2  1  123 ns/op  4.5 unit ...");
// other lines are ignored. A benchmark that prints while it runs (progress on stderr, merged)
// has its name and its figures on different lines: "BenchmarkX-2  <its output>", then
// "3  123 ns/op  4.5 unit ..."; the figures go to the last name seen. A benchmark reported twice
// keeps its last figures.
func Parse(r io.Reader) (Results, error) {
	out := Results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	pending := ""
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 1 && strings.HasPrefix(f[0], "Benchmark") {
			if len(f) < 2 {
				pending = f[0]
				continue
			}
			if _, err := strconv.Atoi(f[1]); err != nil {
				pending = f[0] // its output follows the name; the figures come later
				continue
			}
		} else if len(f) >= 3 && pending != "" && f[2] == "ns/op" {
			if _, err := strconv.Atoi(f[0]); err != nil {
				continue
			}
			f = append([]string{pending}, f...)
		} else {
			continue
		}
		pending = ""
		if len(f) < 4 {
			continue
		}
		name := procsSuffix.ReplaceAllString(f[0], "")
		m := out[name]
		if m == nil {
			m = map[string]float64{}
			out[name] = m
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark %s: value %q of %s is not a number", f[0], f[i], f[i+1])
			}
			m[f[i+1]] = v
		}
	}
	return out, sc.Err()
}

// Row is one line of the table.
type Row struct {
	Target   Target
	Measured float64
	Found    bool
	Ratio    float64 // measured/limit (0 for Report)
	Met      bool    // false when not Found
}

// Status is the row's verdict column.
func (r Row) Status() string {
	switch {
	case !r.Found:
		return "MISSING"
	case r.Target.Kind == Report:
		return "reported"
	case r.Met:
		return "yes"
	}
	return "NO"
}

// Evaluate holds every target against the results.
func Evaluate(targets []Target, res Results) []Row {
	rows := make([]Row, 0, len(targets))
	for _, t := range targets {
		row := Row{Target: t}
		row.Measured, row.Found = res[t.Bench][t.Unit]
		if row.Found && t.Kind != Report {
			row.Ratio = row.Measured / t.Limit
			switch t.Kind {
			case AtMost:
				row.Met = row.Measured <= t.Limit
			case AtLeast:
				row.Met = row.Measured >= t.Limit
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// OK reports whether every target with a limit is met and every figure is present.
func OK(rows []Row) bool {
	for _, r := range rows {
		if !r.Found || (r.Target.Kind != Report && !r.Met) {
			return false
		}
	}
	return true
}

// Write prints the table.
func Write(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tlimit\tmeasured\tratio\tmet?")
	for _, r := range rows {
		limit, measured, ratio := "—", "—", "—"
		switch r.Target.Kind {
		case AtMost:
			limit = "≤ " + num(r.Target.Limit)
		case AtLeast:
			limit = "≥ " + num(r.Target.Limit)
		}
		if r.Found {
			measured = num(r.Measured)
			if r.Target.Kind != Report {
				ratio = strconv.FormatFloat(r.Ratio, 'f', 2, 64)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Target.Name, limit, measured, ratio, r.Status())
	}
	return tw.Flush()
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// loadavg is /proc/loadavg's three averages.
func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func main() {
	loadStart := flag.String("load-start", "", "the load average when the benchmarks started (e.g. \"$(cat /proc/loadavg)\")")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: benchtable [-load-start \"$(cat /proc/loadavg)\"] BENCH-OUTPUT-FILE... (none: stdin)")
		flag.PrintDefaults()
	}
	flag.Parse()
	res := Results{}
	read := func(r io.Reader, name string) {
		got, err := Parse(r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: %s: %v\n", name, err)
			os.Exit(2)
		}
		res.Merge(got)
	}
	if flag.NArg() == 0 {
		read(os.Stdin, "stdin")
	}
	for _, p := range flag.Args() {
		f, err := os.Open(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: %v (give the files `go test -bench` wrote)\n", err)
			os.Exit(2)
		}
		read(f, p)
		f.Close()
	}
	rows := Evaluate(Targets, res)
	if err := Write(os.Stdout, rows); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if *loadStart != "" {
		f := strings.Fields(*loadStart)
		fmt.Printf("load average (1, 5, 15 min): start %s, end %s\n", strings.Join(f[:min(3, len(f))], " "), loadavg())
	} else {
		fmt.Printf("load average (1, 5, 15 min) at the end: %s\n", loadavg())
	}
	if !OK(rows) {
		missing, missed := 0, 0
		for _, r := range rows {
			switch {
			case !r.Found:
				missing++
			case r.Target.Kind != Report && !r.Met:
				missed++
			}
		}
		fmt.Fprintf(os.Stderr, "benchtable: %d target(s) missed, %d figure(s) MISSING\n", missed, missing)
		os.Exit(1)
	}
}
