package results

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Soak is what a long run with repeated faults measured: each fault and its recovery, the
// memory and goroutines of the control plane and of the harness over time, their trends, and
// the goroutine profiles at the start and the end.
type Soak struct {
	// FaultEverySeconds is the period of the fault cycle.
	FaultEverySeconds float64     `json:"faultEverySeconds"`
	Faults            []SoakFault `json:"faults"`
	// Samples are taken on a fixed interval (memory as it is, garbage included: the chart; and
	// the harness's live heap after a GC of its own).
	Samples []SoakSample `json:"samples"`
	// Settled are taken right before each fault, after a forced GC in both processes: the live
	// heap, which the control plane's trend is fitted to.
	Settled []SoakSample `json:"settled"`
	// ControlPlaneHeap is the control plane's live-heap trend over Settled; HarnessHeap the
	// harness's over every sample from the first settled one on (the harness can collect at any
	// time, so its trend need not wait for the fault cycle: five settled points of a short soak
	// fitted ±8 MiB/h, too coarse to judge 16). Absent with fewer than three points.
	ControlPlaneHeap *Growth `json:"controlPlaneHeap,omitempty"`
	HarnessHeap      *Growth `json:"harnessHeap,omitempty"`
	// Goroutines compares the goroutine profiles taken when the faults began and when they ended.
	ControlPlaneGoroutines *GoroutineDelta `json:"controlPlaneGoroutines,omitempty"`
	HarnessGoroutines      *GoroutineDelta `json:"harnessGoroutines,omitempty"`
}

// SoakFault is one fault of the cycle.
type SoakFault struct {
	Name        string     `json:"name"`
	InjectedAt  time.Time  `json:"injectedAt"`
	Recovered   bool       `json:"recovered"`
	RecoveredAt *time.Time `json:"recoveredAt,omitempty"`
	// RecoverySeconds is from the injection to the proof of recovery (the fault's own condition
	// met and every traffic target answering 200 again).
	RecoverySeconds float64 `json:"recoverySeconds,omitempty"`
	Error           string  `json:"error,omitempty"`
}

// SoakSample is one reading of both processes. The control plane's figures are absent (zero,
// with ControlPlaneOK false) when its metrics could not be read at that moment.
type SoakSample struct {
	At time.Time `json:"at"`
	// ControlPlaneOK says the control plane's figures were read.
	ControlPlaneOK bool `json:"controlPlaneOk"`
	// ControlPlaneStart is the control plane process's start time (Unix seconds): a new value is
	// a new process (a restart), whose heap starts over.
	ControlPlaneStart      float64 `json:"controlPlaneStart,omitempty"`
	ControlPlaneHeapBytes  int64   `json:"controlPlaneHeapBytes,omitempty"`
	ControlPlaneGoroutines int     `json:"controlPlaneGoroutines,omitempty"`
	HarnessHeapBytes       int64   `json:"harnessHeapBytes"`
	// HarnessLiveBytes is the harness's heap right after a GC of its own (live).
	HarnessLiveBytes  int64 `json:"harnessLiveBytes,omitempty"`
	HarnessGoroutines int   `json:"harnessGoroutines"`
	// RecentRequests and RecentErrors are the traffic's in the minute before a settled sample:
	// the steady state between two faults (settled samples only).
	RecentRequests int64 `json:"recentRequests,omitempty"`
	RecentErrors   int64 `json:"recentErrors,omitempty"`
}

// RecentTraffic sums the last window seconds of a traffic series.
func RecentTraffic(t *Traffic, window int) (requests, errors int64) {
	if t == nil || len(t.Series) == 0 {
		return 0, 0
	}
	last := t.Series[len(t.Series)-1].T
	for i := len(t.Series) - 1; i >= 0 && t.Series[i].T > last-window; i-- {
		requests, errors = requests+t.Series[i].Requests, errors+t.Series[i].Errors
	}
	return requests, errors
}

// Growth is a straight line fitted to a quantity over time by least squares. Points of different
// segments (process lifetimes: a restarted control plane starts from a fresh heap) share the
// slope but have intercepts of their own, so a restart is not read as a fall or a rise.
type Growth struct {
	// SlopePerHour is the fitted growth in the quantity's unit per hour; StdErr its standard error.
	SlopePerHour float64 `json:"slopePerHour"`
	StdErr       float64 `json:"stdErr"`
	Points       int     `json:"points"`
	Segments     int     `json:"segments"`
	// Mean is the quantity's mean over the points, for scale.
	Mean float64 `json:"mean"`
}

// FitGrowth fits y against t (hours from any origin) with a common slope and one intercept per
// segment (segment[i] names point i's segment). A segment with one point says nothing about
// the slope and is left out; at least three points in total must remain.
func FitGrowth(hours, ys []float64, segment []float64) (Growth, error) {
	if len(hours) != len(ys) || len(hours) != len(segment) {
		return Growth{}, errors.New("trend: points, values and segments differ in length")
	}
	groups := map[float64][]int{}
	var order []float64
	for i, g := range segment {
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	var sxx, sxy float64
	n, segs := 0, 0
	type centred struct{ x, y float64 }
	var pts []centred
	var sum float64
	for _, g := range order {
		idx := groups[g]
		if len(idx) < 2 {
			continue
		}
		segs++
		var mx, my float64
		for _, i := range idx {
			mx, my = mx+hours[i], my+ys[i]
		}
		mx, my = mx/float64(len(idx)), my/float64(len(idx))
		for _, i := range idx {
			x, y := hours[i]-mx, ys[i]-my
			sxx, sxy = sxx+x*x, sxy+x*y
			pts = append(pts, centred{x, y})
			sum += ys[i]
			n++
		}
	}
	if n < 3 {
		return Growth{}, fmt.Errorf("trend: %d usable points (segments of at least 2), want at least 3", n)
	}
	if sxx == 0 {
		return Growth{}, errors.New("trend: every point of a segment has the same time")
	}
	slope := sxy / sxx
	t := Growth{SlopePerHour: slope, Points: n, Segments: segs, Mean: sum / float64(n)}
	// Degrees of freedom: n points minus one intercept per segment minus the slope.
	if dof := n - segs - 1; dof > 0 {
		var sse float64
		for _, p := range pts {
			r := p.y - slope*p.x
			sse += r * r
		}
		t.StdErr = math.Sqrt(sse / float64(dof) / sxx)
	}
	return t, nil
}

// GoroutineDelta compares two goroutine profiles of one process kind.
type GoroutineDelta struct {
	StartFile string `json:"startFile"`
	EndFile   string `json:"endFile"`
	Start     int    `json:"start"`
	End       int    `json:"end"`
	// Grown are the stacks (leaf function first, " ← " between frames) with more goroutines at the
	// end than at the start, most grown first.
	Grown []StackCount `json:"grown,omitempty"`
	// Restarted is true when the control plane's process at the end is not the one at the start:
	// the comparison then spans a restart.
	Restarted bool `json:"restarted,omitempty"`
}

// StackCount is how many goroutines more one stack had at the end.
type StackCount struct {
	Stack string `json:"stack"`
	Delta int    `json:"delta"`
}

// Chart is a text chart, one line per sample: time, both heaps as bars on one scale, both
// goroutine counts; "" without samples.
func (s *Soak) Chart() string {
	if len(s.Samples) == 0 {
		return ""
	}
	var most int64
	for _, x := range s.Samples {
		most = max(most, x.ControlPlaneHeapBytes, x.HarnessHeapBytes)
	}
	start := s.Samples[0].At
	fi := 0
	var sb strings.Builder
	fmt.Fprintf(&sb, "%7s %-30s %8s %-30s %8s %5s %5s\n", "t", "control plane heap", "MiB", "harness heap", "MiB", "cp g", "h g")
	for _, x := range s.Samples {
		mark := " "
		for fi < len(s.Faults) && !s.Faults[fi].InjectedAt.After(x.At) {
			mark, fi = "!", fi+1
		}
		cp := "(unread)"
		cpMiB := "—"
		cpG := "—"
		if x.ControlPlaneOK {
			cp, cpMiB, cpG = textBar("C", x.ControlPlaneHeapBytes, most, 30), fmt.Sprintf("%.1f", float64(x.ControlPlaneHeapBytes)/(1<<20)), fmt.Sprint(x.ControlPlaneGoroutines)
		}
		fmt.Fprintf(&sb, "%s%6.0fs %-30s %8s %-30s %8.1f %5s %5d\n", mark, x.At.Sub(start).Seconds(), cp, cpMiB,
			textBar("H", x.HarnessHeapBytes, most, 30), float64(x.HarnessHeapBytes)/(1<<20), cpG, x.HarnessGoroutines)
	}
	return sb.String()
}
