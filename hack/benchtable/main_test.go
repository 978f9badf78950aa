package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/meshchaos/meshchaos/controlplane
BenchmarkHeapPerEndpoint/plain/SE=5000-2         	       1	3140000000 ns/op	      1400 B/endpoint	        66.8 heap-MiB	         0.900 s/start-to-gate	         0.950 s/start-to-serve
BenchmarkHeapPerEndpoint/plain/growth-2          	       1	         1.000 ns/op	         1.02 exponent
    bench_test.go:140: plain: heap growth exponent
BenchmarkHeapPerEndpoint/plain/growth is a log line, not a result
--- FAIL: BenchmarkEndpointChangeACKed1000/delta
PASS
`

func TestParse(t *testing.T) {
	res, err := Parse(strings.NewReader(sample))
	require.NoError(t, err)
	assert.Equal(t, 1400.0, res["BenchmarkHeapPerEndpoint/plain/SE=5000"]["B/endpoint"])
	assert.Equal(t, 0.95, res["BenchmarkHeapPerEndpoint/plain/SE=5000"]["s/start-to-serve"])
	assert.Equal(t, 1.02, res["BenchmarkHeapPerEndpoint/plain/growth"]["exponent"])
	assert.Len(t, res, 2, "log and FAIL lines are not results")
}

// A benchmark that prints progress while it runs has its figures on a line of their own.
func TestParseFiguresAfterProgress(t *testing.T) {
	out := "BenchmarkHeapPerEndpoint/plain/SE=5000-2   \t08:38:15 plain/SE=5000: starting a control plane\n" +
		"08:38:16 plain/SE=5000: 920 B/endpoint, gate after 791ms\n" +
		"       3\t1001278613 ns/op\t       919.9 B/endpoint\t         0.8800 s/start-to-serve\n" +
		"08:38:17 not a figure line: 3 12 ns/op\n" +
		"BenchmarkHeapPerEndpoint/plain/growth-2   \t       3\t      1757 ns/op\t         0.9914 exponent\n" +
		"       3\t 5 ns/op\t 1 stray\n"
	res, err := Parse(strings.NewReader(out))
	require.NoError(t, err)
	assert.Equal(t, 919.9, res["BenchmarkHeapPerEndpoint/plain/SE=5000"]["B/endpoint"])
	assert.Equal(t, 0.88, res["BenchmarkHeapPerEndpoint/plain/SE=5000"]["s/start-to-serve"])
	assert.Equal(t, 0.9914, res["BenchmarkHeapPerEndpoint/plain/growth"]["exponent"])
	assert.NotContains(t, res["BenchmarkHeapPerEndpoint/plain/growth"], "stray", "figures go to a pending name only once")
	assert.Len(t, res, 2)
}

func TestParseRejectsGarbledValue(t *testing.T) {
	_, err := Parse(strings.NewReader("BenchmarkX-2  1  12 ns/op  abc B/endpoint\n"))
	require.Error(t, err)
}

func TestEvaluate(t *testing.T) {
	targets := []Target{
		{"heap", "BenchmarkH", "B/endpoint", 1536, AtMost},
		{"heap big", "BenchmarkH", "heap-MiB", 10, AtMost},
		{"rate", "BenchmarkR", "SE/s", 1000, AtLeast},
		{"rate low", "BenchmarkR2", "SE/s", 1000, AtLeast},
		{"p50", "BenchmarkP", "p50-ms", 0, Report},
		{"absent", "BenchmarkGone", "p99-ms", 250, AtMost},
		{"absent report", "BenchmarkGone", "p50-ms", 0, Report},
	}
	res := Results{
		"BenchmarkH":  {"B/endpoint": 768, "heap-MiB": 20},
		"BenchmarkR":  {"SE/s": 1500},
		"BenchmarkR2": {"SE/s": 999},
		"BenchmarkP":  {"p50-ms": 42},
	}
	rows := Evaluate(targets, res)
	status := func(i int) string { return rows[i].Status() }
	assert.Equal(t, "yes", status(0))
	assert.InDelta(t, 0.5, rows[0].Ratio, 1e-9)
	assert.Equal(t, "NO", status(1))
	assert.InDelta(t, 2.0, rows[1].Ratio, 1e-9)
	assert.Equal(t, "yes", status(2))
	assert.InDelta(t, 1.5, rows[2].Ratio, 1e-9)
	assert.Equal(t, "NO", status(3))
	assert.Equal(t, "reported", status(4))
	assert.Equal(t, "MISSING", status(5))
	assert.False(t, rows[5].Met, "a missing figure is never met")
	assert.Equal(t, "MISSING", status(6), "a reported figure can be missing too")
	assert.False(t, OK(rows))

	assert.True(t, OK(rows[:1]))
	assert.True(t, OK([]Row{rows[0], rows[2], rows[4]}), "reported figures need no limit")
	assert.False(t, OK([]Row{rows[0], rows[6]}), "a missing reported figure fails the run")

	var out bytes.Buffer
	require.NoError(t, Write(&out, rows))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, len(targets)+1)
	assert.Contains(t, lines[0], "ratio")
	assert.Regexp(t, `heap\s+≤ 1536\s+768\s+0.50\s+yes`, lines[1])
	assert.Regexp(t, `absent\s+≤ 250\s+—\s+—\s+MISSING`, lines[6])
}

// Every target names a unit some benchmark reports; a renamed unit would make it MISSING, which
// the run would show, but a target with no limit where one is needed would pass silently.
func TestTargetsHaveLimits(t *testing.T) {
	for _, tg := range Targets {
		if tg.Kind != Report {
			assert.NotZero(t, tg.Limit, tg.Name)
		}
		assert.NotEmpty(t, tg.Bench, tg.Name)
		assert.NotEmpty(t, tg.Unit, tg.Name)
	}
}

// Two runs of one benchmark in two files (adsload at 1000 and at 10 000 clients) keep both
// figures.
func TestMergeKeepsEachFilesFigures(t *testing.T) {
	a, err := Parse(strings.NewReader("BenchmarkA-2  1  5 ns/op  150 rss-MiB/1000-clients  3 heap-KiB/client\n"))
	require.NoError(t, err)
	b, err := Parse(strings.NewReader("BenchmarkA-2  1  9 ns/op  1400 rss-MiB/10000-clients  4 heap-KiB/client\n"))
	require.NoError(t, err)
	res := Results{}
	res.Merge(a)
	res.Merge(b)
	assert.Equal(t, map[string]float64{"ns/op": 9, "rss-MiB/1000-clients": 150, "rss-MiB/10000-clients": 1400, "heap-KiB/client": 4}, res["BenchmarkA"])
}

// The 10 000-proxy full push's line, as BenchmarkFullPush10000Proxies reports it, fills each of
// its rows; its one limit is a generation per scope (1000 would be one per proxy).
func TestFullPush10000Rows(t *testing.T) {
	line := "BenchmarkFullPush10000Proxies-2  3  9000000000 ns/op  2500 cp-cpu-ms/push  1200 cp-rss-MiB  " +
		"900 fleet-rss-MiB/10000-proxies  3000 max-ms  1300 MiB-sent/push  1.000 generations/scope  1500 p50-ms  2800 p99-ms\n"
	for _, tc := range []struct {
		gens string
		ok   bool
	}{{"1.000", true}, {"1000", false}} {
		res, err := Parse(strings.NewReader(strings.Replace(line, "1.000 generations", tc.gens+" generations", 1)))
		require.NoError(t, err)
		var rows []Row
		for _, r := range Evaluate(Targets, res) {
			if r.Target.Bench == "BenchmarkFullPush10000Proxies" {
				rows = append(rows, r)
			}
		}
		require.Len(t, rows, 6)
		for _, r := range rows {
			assert.True(t, r.Found, r.Target.Name)
		}
		assert.Equal(t, tc.ok, OK(rows), "generations/scope %s", tc.gens)
	}
}
