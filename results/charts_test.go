package results

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Every timeline chart of a run spans the run, whatever its own data covers (the pushes chart
// once showed 62–78 s beside the others' 0–90 s), with the phases and the fault windows as bands.
func TestTimeAxisSpansTheRunWithPhasesAndFaults(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ptr := func(s float64) *time.Time { v := at(s); return &v }
	s := &Summary{StartedAt: t0, FinishedAt: ptr(90),
		Phases: []Phase{{Name: "setup", StartedAt: at(0), FinishedAt: ptr(30)}, {Name: "chaos", StartedAt: at(30), FinishedAt: ptr(70)},
			{Name: "teardown", StartedAt: at(70)}},
		Events: []Event{
			{At: at(50), Kind: "chaos.cleared", Object: "hog"}, // recorded out of order
			{At: at(40), Kind: "chaos.injected", Object: "hog"},
			{At: at(45), Kind: "chaos.injected", Object: "throttle"}, // never cleared: to the end
		}}
	ax := timeAxis(s)
	assert.Equal(t, 0.0, ax.min)
	assert.Equal(t, 90.0, ax.max)
	assert.Equal(t, []band{{"setup", 0, 30}, {"chaos", 30, 70}, {"teardown", 70, 90}}, ax.phases)
	assert.Equal(t, []band{{"hog", 40, 50}, {"throttle", 45, 90}}, ax.faults)

	lo, hi := ax.span(48, 66)
	assert.Equal(t, [2]float64{0, 90}, [2]float64{lo, hi}, "a chart whose data covers 48–66 s still spans the run")
	lo, hi = ax.span(-2, 95)
	assert.Equal(t, [2]float64{-2, 95}, [2]float64{lo, hi}, "data outside the run widens the axis")
}

// TestPhaseNamesStayInsideTheChart: the phases are named from their starts, but the last one,
// starting near the end of the axis, is named leftwards from its end, where a name from its
// start would run past the chart's right edge ("teardow").
func TestPhaseNamesStayInsideTheChart(t *testing.T) {
	ax := axis{min: 0, max: 100, phases: []band{{name: "setup", from: 0, to: 40}, {name: "chaos", from: 40, to: 95}, {name: "teardown", from: 95, to: 100}}}
	names, right := ax.phaseNames(10)
	assert.Equal(t, []string{" setup", " chaos", "teardown "}, names.Labels)
	assert.Equal(t, []bool{false, false, true}, right)
	assert.Equal(t, []float64{0, 40, 100}, []float64{names.XYs[0].X, names.XYs[1].X, names.XYs[2].X})
}
