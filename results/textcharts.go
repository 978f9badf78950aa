package results

import (
	"fmt"
	"strings"
	"time"
)

// textBar is a bar of n out of most, at most width characters wide (at least one for n > 0).
func textBar(ch string, n, most int64, width int) string {
	if n <= 0 || most <= 0 {
		return ""
	}
	w := int(int64(width) * n / most)
	return strings.Repeat(ch, max(w, 1))
}

// HistogramText renders a histogram's buckets as one text bar per bucket (counts per bucket,
// not cumulative); "" without observations.
func HistogramText(h *Histogram) string {
	if h == nil || h.Count == 0 {
		return ""
	}
	var most, prev int64
	for _, b := range h.Buckets {
		most, prev = max(most, b.Count-prev), b.Count
	}
	var sb strings.Builder
	prev, lower := int64(0), "0"
	for _, b := range h.Buckets {
		n := b.Count - prev
		prev = b.Count
		upper := "+Inf"
		if b.LeMs >= 0 {
			upper = fmt.Sprintf("%g", b.LeMs)
		}
		fmt.Fprintf(&sb, "%7s–%-6s ms |%-40s %d\n", lower, upper, textBar("#", n, most, 40), n)
		lower = upper
	}
	return sb.String()
}

// PushChartText renders the pushes per second, stacked (F full, e EDS), one line per second
// from the first push or endpoint change to the last, with the endpoint changes marked (▲ to
// ready endpoints, ▼ to none); seconds count from the run's start. "" without push rates.
func PushChartText(s *Summary) string {
	cp := s.ControlPlaneStats
	if cp == nil || len(cp.PushRate) == 0 {
		return ""
	}
	marks := map[time.Time][]string{}
	var from, to time.Time
	span := func(t time.Time) {
		if from.IsZero() || t.Before(from) {
			from = t
		}
		if t.After(to) {
			to = t
		}
	}
	if c := s.Convergence; c != nil {
		for _, ch := range c.Changes {
			sec := ch.At.UTC().Truncate(time.Second)
			m := "▼ 0"
			if ch.Ready > 0 {
				m = fmt.Sprintf("▲ %d", ch.Ready)
			}
			marks[sec] = append(marks[sec], m)
			span(sec)
		}
	}
	bins := map[time.Time]PushSecond{}
	var most int64
	for _, b := range cp.PushRate {
		bins[b.At.UTC()] = b
		most = max(most, b.Full+b.EDS)
		span(b.At.UTC())
	}
	var sb strings.Builder
	for t := from; !t.After(to); t = t.Add(time.Second) {
		b := bins[t]
		bar := textBar("F", b.Full, most, 40) + textBar("e", b.EDS, most, 40)
		if b.Full+b.EDS == 0 && len(marks[t]) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "%+6.0fs |%-40s full %-3d eds %-3d %s\n", t.Sub(s.StartedAt.Truncate(time.Second)).Seconds(), bar, b.Full, b.EDS, strings.Join(marks[t], " "))
	}
	return sb.String()
}
