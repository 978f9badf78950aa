// Package cpstarve is cp-cpu-starvation's own code below its registration
// (experiments/cpstarve.go): the names of its probe series and the figures its checks and report
// take from them. The rule (docs/DESIGN.md): an experiment's measurement and statistics that no
// other experiment uses live in experiments/NAME/, not in the experiment's file nor in the
// generic harness packages.
package cpstarve

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/results/stats"
)

// Probe series names (results.Probes).
const (
	SeriesXDS          = "xds"           // a new proxy's stream and first response
	SeriesInject       = "inject"        // a pod creation through the injection webhook (dry run)
	SeriesValidate     = "validate"      // an invalid ServiceEntry (dry run): OK = refused
	SeriesStaleness    = "staleness"     // a ServiceEntry created in the window until every gateway serves it
	SeriesCPStatus     = "cp-status"     // the control plane's pods: OK = one Running, value = Ready pods
	SeriesNodeCPU      = "node-cpu"      // the busy node's pods' CPU use (CPUs)
	SeriesNodeThrottle = "node-throttle" // share of CFS periods the busy node's pods were throttled
	SeriesCPCPU        = "cp-cpu"        // the control plane pod's CPU use (CPUs)
)

// Figures are what the probes measured, for the checks and the report.
type Figures struct {
	// XDSAvailability is the share of xDS probes in the window that succeeded, in percent;
	// BaselineXDS the share before it, under the same node budget without the neighbour.
	XDSAvailability, BaselineXDS float64
	// BaselineInject is InjectSuccess before the window.
	BaselineInject float64
	// InjectSuccess is the share of pod creations in the window the injection webhook admitted
	// (with a sidecar), in percent; InvalidAccepted the invalid ServiceEntries accepted.
	InjectSuccess   float64
	InvalidAccepted int
	// InjectP99Ms and ValidateP99Ms are the admission latencies' P99 in the window (the
	// apiserver waits up to the webhooks' 10 s timeout).
	InjectP99Ms, ValidateP99Ms float64
	// StalenessP99 is the P99 of the changes' times to be served (seconds); a change never
	// served counts with the time it waited.
	StalenessP99 float64
	// RunningNotServing and ReadyNotServing are seconds the control plane was reported
	// Running (Ready) while new proxies got no xDS response: the time it was lying.
	RunningNotServing, ReadyNotServing float64
	// Recovery is seconds from the window's end until the mesh serves again: xDS answered
	// (three in a row), the window's changes served, traffic clean (three seconds in a row);
	// +Inf when that never happened.
	Recovery float64
	// NodeCPU and CPCPU are the mean CPUs used in the window by the busy node's pods and by the
	// control plane; NodeThrottled the mean share of throttled periods.
	NodeCPU, CPCPU, NodeThrottled float64
	// NeighbourShare is the share of NodeCPU not used by the control plane, in percent.
	NeighbourShare float64
	// GatewayDisconnects counts gateway xDS disconnects on the timeline.
	GatewayDisconnects int
}

// Measure computes the figures from a summary; an error when the probes did not run.
func Measure(s *results.Summary) (Figures, error) {
	var f Figures
	p := s.Probes
	if p == nil || p.Window == nil || p.Window.End == 0 {
		return f, errors.New("the probes or the starvation window were not recorded")
	}
	w := *p.Window
	in := func(x results.ProbeSample) bool { return x.T >= w.Start && x.T < w.End }
	before := func(x results.ProbeSample) bool { return x.T < w.Start }
	rateIn := func(in func(results.ProbeSample) bool, where, series string, ok func(results.ProbeSample) bool) (float64, int, error) {
		n, good := 0, 0
		for _, x := range p.Series[series] {
			if in(x) {
				n++
				if ok(x) {
					good++
				}
			}
		}
		if n == 0 {
			return 0, 0, fmt.Errorf("no %s probe %s", series, where)
		}
		return 100 * float64(good) / float64(n), n - good, nil
	}
	rate := func(series string, ok func(results.ProbeSample) bool) (float64, int, error) {
		return rateIn(in, "in the window", series, ok)
	}
	var err error
	okf := func(x results.ProbeSample) bool { return x.OK }
	if f.XDSAvailability, _, err = rate(SeriesXDS, okf); err != nil {
		return f, err
	}
	if f.InjectSuccess, _, err = rate(SeriesInject, okf); err != nil {
		return f, err
	}
	// The same probes under the same budget before the neighbour: what this host gave the
	// control plane without it, the measure the window's availability is held against.
	if f.BaselineXDS, _, err = rateIn(before, "before the window (raise baseline)", SeriesXDS, okf); err != nil {
		return f, err
	}
	if f.BaselineInject, _, err = rateIn(before, "before the window (raise baseline)", SeriesInject, okf); err != nil {
		return f, err
	}
	if _, f.InvalidAccepted, err = rate(SeriesValidate, func(x results.ProbeSample) bool {
		return x.OK || !strings.Contains(x.Error, "accepted")
	}); err != nil {
		return f, err
	}
	f.InjectP99Ms = p99(p.Series[SeriesInject], in)
	f.ValidateP99Ms = p99(p.Series[SeriesValidate], in)
	var stale []float64
	for _, x := range p.Series[SeriesStaleness] {
		stale = append(stale, x.Ms/1000)
	}
	if len(stale) == 0 {
		return f, errors.New("no config change was timed")
	}
	sort.Float64s(stale)
	f.StalenessP99 = stats.Percentile(stale, 0.99)

	// Time lying: each failed xDS probe stands for the probe interval; the control plane's
	// status is the nearest status sample.
	status := p.Series[SeriesCPStatus]
	xds := p.Series[SeriesXDS]
	for i, x := range xds {
		if x.OK || len(status) == 0 {
			continue
		}
		dt := 0.5
		if i+1 < len(xds) {
			dt = xds[i+1].T - x.T
		}
		st := nearest(status, x.T)
		if st.OK {
			f.RunningNotServing += dt
			if st.Value > 0 {
				f.ReadyNotServing += dt
			}
		}
	}

	// Recovery: from the window's end until new proxies get xDS again (the first of three
	// successes in a row), every change made in the window is served, and the traffic is clean
	// again (the first of three error-free seconds). A single failure later on is noise of a
	// shared host, not a mesh still down.
	f.Recovery = recovery(s, p, xds)

	f.NodeCPU = meanIn(p.Series[SeriesNodeCPU], in)
	f.NodeThrottled = meanIn(p.Series[SeriesNodeThrottle], in)
	f.CPCPU = meanIn(p.Series[SeriesCPCPU], in)
	if f.NodeCPU <= 0 {
		return f, errors.New("the busy node's pods used no CPU in the window: no neighbour ran")
	}
	f.NeighbourShare = 100
	if s.Params["isolate"] != "true" {
		f.NeighbourShare = 100 * max(0, f.NodeCPU-f.CPCPU) / f.NodeCPU
	}
	for _, e := range s.Events {
		if e.Kind == "gateway.xds" && strings.HasPrefix(e.Detail, "disconnected") {
			f.GatewayDisconnects++
		}
	}
	return f, nil
}

// sustained is the start of the first run of three consecutive true values from i on, or -1.
func sustained(n int, ok func(int) bool, from int) int {
	for i := from; i+2 < n; i++ {
		if ok(i) && ok(i+1) && ok(i+2) {
			return i
		}
	}
	return -1
}

func recovery(s *results.Summary, p *results.Probes, xds []results.ProbeSample) float64 {
	end := p.Window.End
	after := sort.Search(len(xds), func(i int) bool { return xds[i].T >= end })
	i := sustained(len(xds), func(i int) bool { return xds[i].OK }, after)
	if i < 0 {
		return math.Inf(1)
	}
	last := xds[i].T
	for _, x := range p.Series[SeriesStaleness] {
		if !x.OK {
			return math.Inf(1)
		}
		last = max(last, x.T+x.Ms/1000)
	}
	if t := s.Traffic; t != nil && len(t.Series) > 0 {
		off := t.StartedAt.Sub(p.StartedAt).Seconds()
		first := sort.Search(len(t.Series), func(i int) bool { return off+float64(t.Series[i].T) >= end })
		j := sustained(len(t.Series), func(i int) bool { return t.Series[i].Errors == 0 }, first)
		if j < 0 {
			return math.Inf(1)
		}
		last = max(last, off+float64(t.Series[j].T))
	}
	return max(0, last-end)
}

func nearest(ss []results.ProbeSample, t float64) results.ProbeSample {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].T >= t })
	switch {
	case i == len(ss):
		return ss[i-1]
	case i > 0 && t-ss[i-1].T < ss[i].T-t:
		return ss[i-1]
	}
	return ss[i]
}

// p99 is the P99 of the durations of the samples in the window, in ms.
func p99(ss []results.ProbeSample, in func(results.ProbeSample) bool) float64 {
	var ms []float64
	for _, x := range ss {
		if in(x) {
			ms = append(ms, x.Ms)
		}
	}
	slices.Sort(ms)
	return stats.Percentile(ms, 0.99)
}

func meanIn(ss []results.ProbeSample, in func(results.ProbeSample) bool) float64 {
	sum, n := 0.0, 0
	for _, x := range ss {
		if x.OK && in(x) {
			sum, n = sum+x.Value, n+1
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
