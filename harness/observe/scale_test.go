package observe

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/meshchaos/meshchaos/results"
)

// histogramFamily is a histogram of two alternating series (type cds, eds) with buckets 0.01,
// 0.1, 1 and the count last; the eds series also list the +Inf bucket, as the text format's
// parser does.
func histogramFamily(name string, series ...[]uint64) Families {
	mf := &dto.MetricFamily{Name: proto.String(name), Type: dto.MetricType_HISTOGRAM.Enum()}
	for i, counts := range series {
		h := &dto.Histogram{SampleCount: proto.Uint64(counts[len(counts)-1])}
		for j, le := range []float64{0.01, 0.1, 1} {
			h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(le), CumulativeCount: proto.Uint64(counts[j])})
		}
		typ := []string{"cds", "eds"}[i%2]
		if typ == "eds" {
			h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(math.Inf(1)), CumulativeCount: proto.Uint64(counts[len(counts)-1])})
		}
		mf.Metric = append(mf.Metric, &dto.Metric{Label: []*dto.LabelPair{{Name: proto.String("type"), Value: proto.String(typ)}}, Histogram: h})
	}
	return Families{name: mf}
}

func TestCumulativeBucketsIncreaseAndQuantile(t *testing.T) {
	before := histogramFamily("push_time", []uint64{1, 2, 3, 3}, []uint64{0, 0, 1, 2})
	after := histogramFamily("push_time", []uint64{51, 92, 103, 103}, []uint64{0, 0, 1, 2})
	b0 := before.CumulativeBuckets("push_time", nil)
	assert.Equal(t, map[float64]uint64{0.01: 1, 0.1: 2, 1: 4, math.Inf(1): 5}, b0, "summed over both series, +Inf the sample count")
	inc := BucketsIncrease(b0, after.CumulativeBuckets("push_time", nil))
	assert.Equal(t, []results.Bucket{{LeMs: 10, Count: 50}, {LeMs: 100, Count: 90}, {LeMs: 1000, Count: 100}, {LeMs: -1, Count: 100}}, inc)
	assert.InDelta(t, 100+900*0.9, BucketQuantile(0.99, inc), 1e-9)

	only := after.CumulativeBuckets("push_time", map[string]string{"type": "eds"})
	require.NotNil(t, only)
	assert.Equal(t, uint64(2), only[math.Inf(1)])
	assert.Nil(t, after.CumulativeBuckets("other", nil), "no such histogram is nil, not zeros")
}
