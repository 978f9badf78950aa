package traffic

import (
	"net/http"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/meshchaos/meshchaos/results/respflags"
)

// results300k is five minutes at 1000 rps, 1 % flagged 503s.
func results300k() []vegeta.Result {
	start := time.Now()
	flagged := http.Header{respflags.Header: []string{"NC"}}
	rs := make([]vegeta.Result, 300_000)
	for i := range rs {
		rs[i] = vegeta.Result{Timestamp: start.Add(time.Duration(i) * time.Millisecond), Code: 200, Latency: time.Duration(200+i%1000) * time.Microsecond}
		if i%100 == 0 {
			rs[i].Code, rs[i].Headers = 503, flagged
		}
	}
	return rs
}

// BenchmarkAggregatorAdd: cost per request of the live measurement (it must keep up with the
// attack's rate on the same 2 cores).
func BenchmarkAggregatorAdd(b *testing.B) {
	rs := results300k()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		agg := NewAggregator(rs[0].Timestamp)
		for j := range rs {
			agg.Add(&rs[j])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rs)), "ns/request")
}

// BenchmarkAggregatorSummary: a summary of five minutes at 1000 rps (the runner takes one every
// flush interval).
func BenchmarkAggregatorSummary(b *testing.B) {
	rs := results300k()
	agg := NewAggregator(rs[0].Timestamp)
	for j := range rs {
		agg.Add(&rs[j])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		agg.Summary(map[string]time.Time{"chaos.injected": rs[1000].Timestamp})
	}
}
