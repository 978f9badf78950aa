package observe

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/meshchaos/meshchaos/results"
)

func TestCounterIncreaseAcrossRestart(t *testing.T) {
	s := func(vs ...float64) []results.Sample {
		out := make([]results.Sample, len(vs))
		for i, v := range vs {
			out[i] = results.Sample{Value: v}
		}
		return out
	}
	assert.Equal(t, 0.0, CounterIncrease(s(5)))
	assert.Equal(t, 3.0, CounterIncrease(s(5, 6, 8)))
	// 5 → 8 (+3), restart, 2 → 4 (+2 +2)
	assert.Equal(t, 7.0, CounterIncrease(s(5, 8, 2, 4)))
}
