package observe

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/workloads/grpcclient"
)

// The clients' seconds from the measurement's start on become traffic keyed by gRPC code, and
// the longest span without config is clipped to the window (an open one lasts until the stats
// were taken).
func TestGRPCTrafficFromTheClientsStats(t *testing.T) {
	from := time.Unix(1000, 400e6)
	st := grpcclient.Stats{
		Seconds: []grpcclient.Second{
			{Unix: 998, Failed: map[string]int64{"Unavailable": 9}}, // before the window
			{Unix: 1000, OK: 10},
			{Unix: 1001, OK: 7, Failed: map[string]int64{"Unavailable": 2, "DeadlineExceeded": 1}},
			{Unix: 1003, OK: 10},
		},
		NoConfig: []grpcclient.Span{
			{Channel: "0/a:80", Start: time.Unix(998, 0), End: time.Unix(999, 0)},           // before: ignored
			{Channel: "1/a:80", Start: time.Unix(1000, 0), End: time.Unix(1000, 900e6)},     // clipped to 0.5 s
			{Channel: "2/a:80", Start: time.Unix(1001, 200e6), End: time.Unix(1001, 500e6)}, // 0.3 s
			{Channel: "3/a:80", Start: time.Unix(1003, 0)},                                  // open until Now: 0.6 s
		},
		Now: time.Unix(1003, 600e6),
	}
	tr := GRPCTraffic(st, from)
	assert.Equal(t, int64(30), tr.Requests)
	assert.Equal(t, int64(3), tr.Errors)
	assert.Equal(t, map[string]int64{"OK": 27, "Unavailable": 2, "DeadlineExceeded": 1}, tr.ByCode)
	require.Len(t, tr.Series, 3)
	assert.Equal(t, 1, tr.Series[1].T)
	assert.Equal(t, 1.0, tr.ErrorWindowSeconds)
	require.NotNil(t, tr.NoConfigSeconds)
	assert.InDelta(t, 0.6, *tr.NoConfigSeconds, 1e-9)
}
