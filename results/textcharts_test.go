package results

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMarkdownShowsPushesAndConvergence(t *testing.T) {
	s := sample()
	at := func(sec int) time.Time { return s.StartedAt.Add(time.Duration(sec) * time.Second) }
	cpu := 12.5
	cp := s.ControlPlaneStats
	cp.CPUSeconds = &cpu
	cp.PushTime = &Histogram{Count: 4, P50Ms: 8, P99Ms: 3000, Buckets: []Bucket{{LeMs: 10, Count: 2}, {LeMs: 5000, Count: 4}, {LeMs: -1, Count: 4}}}
	cp.PushRate = []PushSecond{{At: at(5), Full: 1}, {At: at(9), EDS: 2}}
	s.Convergence = &Convergence{Service: "default/flap", Proxies: 20, Missed: 1,
		Latency: Histogram{Count: 39, P50Ms: 100, P99Ms: 400, MaxMs: 450, Buckets: []Bucket{{LeMs: 100, Count: 20}, {LeMs: -1, Count: 39}}},
		Changes: []EndpointChange{
			{At: at(5), Ready: 1, Received: 20, P50Ms: 100, P99Ms: 400, MaxMs: 450, Pushes: &Pushes{Full: 1}},
			{At: at(9), Ready: 0, Received: 19, P50Ms: 90, P99Ms: 95, MaxMs: 95},
		}}
	require.NoError(t, s.Validate())
	b, err := Markdown(s, nil)
	require.NoError(t, err)
	md := string(b)
	assert.Contains(t, md, "CPU 12.50 s")
	assert.Contains(t, md, "Push time over 4 pushes: p50 8.0 ms, p99 3000.0 ms")
	assert.Contains(t, md, "5000–+Inf   ms |")
	chart := PushChartText(s)
	lines := strings.Split(strings.TrimSpace(chart), "\n")
	require.Len(t, lines, 2, chart)
	assert.Regexp(t, `^\s*\+5s \|F+\s+full 1\s+eds 0\s+▲ 1$`, lines[0])
	assert.Regexp(t, `^\s*\+9s \|e+\s+full 0\s+eds 2\s+▼ 0$`, lines[1])
	assert.Contains(t, md, chart)
	assert.Contains(t, md, "| 0 | +5.0s | 1 | 20 | 100.0 ms | 400.0 ms | 450.0 ms | 1 | 0 |")
	assert.Contains(t, md, "| 1 | +9.0s | 0 | 19 | 90.0 ms | 95.0 ms | 95.0 ms | – | – |")
	assert.Contains(t, md, "1 missed")
}
