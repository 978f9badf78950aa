package runner

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/meshchaos/meshchaos/results"
)

// Check evaluates one SLO on the run's summary. It returns an error when the summary lacks what
// the check needs: an unmeasured SLO must not pass.
type Check func(s *results.Summary) (results.Check, error)

var (
	errNoTraffic = errors.New("no traffic was measured")
	errNoCP      = errors.New("the control plane was not observed")
)

// Metric is a check on any number the summary holds.
func Metric(name string, value func(s *results.Summary) (float64, error), op results.Op, threshold float64, unit string) Check {
	return func(s *results.Summary) (results.Check, error) {
		v, err := value(s)
		if err != nil {
			return results.Check{}, fmt.Errorf("check %q: %w", name, err)
		}
		return results.NewCheck(name, v, op, threshold, unit), nil
	}
}

func trafficValue(f func(t *results.Traffic) float64) func(s *results.Summary) (float64, error) {
	return func(s *results.Summary) (float64, error) {
		if s.Traffic == nil || s.Traffic.Requests == 0 {
			return 0, errNoTraffic
		}
		return f(s.Traffic), nil
	}
}

func cpValue(f func(c *results.ControlPlaneStats) float64) func(s *results.Summary) (float64, error) {
	return func(s *results.Summary) (float64, error) {
		if s.ControlPlaneStats == nil {
			return 0, errNoCP
		}
		return f(s.ControlPlaneStats), nil
	}
}

// withDetail adds an explanation, from the summary, to a check that failed.
func withDetail(c Check, detail func(s *results.Summary) string) Check {
	return func(s *results.Summary) (results.Check, error) {
		res, err := c(s)
		if err == nil && !res.Pass {
			res.Detail = detail(s)
		}
		return res, err
	}
}

func countsText(m map[string]int64) string {
	var parts []string
	for _, k := range results.SortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// ErrorRate checks the share of failed requests, in percent (e.g. ErrorRate(results.LE, 0)).
func ErrorRate(op results.Op, pct float64) Check {
	return withDetail(Metric("error rate", trafficValue(func(t *results.Traffic) float64 { return 100 * t.ErrorRate }), op, pct, "%"),
		func(s *results.Summary) string {
			bad := map[string]int64{}
			for code, n := range s.Traffic.ByCode {
				if c, err := strconv.Atoi(code); err != nil || c < 200 || c >= 400 {
					bad[code] = n
				}
			}
			d := fmt.Sprintf("%d of %d requests failed; by code %s", s.Traffic.Errors, s.Traffic.Requests, countsText(bad))
			if len(s.Traffic.ByFlag) > 0 {
				d += "; by response flag " + countsText(s.Traffic.ByFlag)
			}
			return d
		})
}

// StatusRate checks the share of requests answered with a status class ("5xx") or code ("503"),
// in percent.
func StatusRate(class string, op results.Op, pct float64) Check {
	return Metric(class+" rate", trafficValue(func(t *results.Traffic) float64 {
		var n int64
		for code, c := range t.ByCode {
			if code == class || (len(class) == 3 && class[1:] == "xx" && len(code) == 3 && code[0] == class[0]) {
				n += c
			}
		}
		return 100 * float64(n) / float64(t.Requests)
	}), op, pct, "%")
}

// FlagCount checks how many replies carried an Envoy response flag (e.g. "NC").
func FlagCount(flag string, op results.Op, n float64) Check {
	return Metric("responses flagged "+flag, trafficValue(func(t *results.Traffic) float64 { return float64(t.ByFlag[flag]) }), op, n, "")
}

// ErrorWindow checks the error window in seconds.
func ErrorWindow(op results.Op, seconds float64) Check {
	return withDetail(Metric("error window", trafficValue(func(t *results.Traffic) float64 { return t.ErrorWindowSeconds }), op, seconds, "s"),
		func(s *results.Summary) string {
			w := s.Traffic.ErrorWindow
			if w == nil {
				return ""
			}
			return fmt.Sprintf("errors in seconds %d–%d of the traffic; longest run %d s from second %d", w.FirstSecond, w.LastSecond, w.LongestRunSeconds, w.LongestRunStart)
		})
}

// LatencyP99 checks the p99 latency in milliseconds.
func LatencyP99(op results.Op, ms float64) Check {
	return Metric("latency p99", trafficValue(func(t *results.Traffic) float64 { return t.LatencyMs.P99 }), op, ms, "ms")
}

// OOMKills checks the control plane's OOM kills (≥ 1 proves an OOM chaos happened).
func OOMKills(op results.Op, n float64) Check {
	return Metric("control-plane OOM kills", cpValue(func(c *results.ControlPlaneStats) float64 { return float64(c.OOMKills) }), op, n, "")
}

// Restarts checks the control plane's container restarts.
func Restarts(op results.Op, n float64) Check {
	return Metric("control-plane restarts", cpValue(func(c *results.ControlPlaneStats) float64 { return float64(c.Restarts) }), op, n, "")
}

// FullPushes checks the number of full xDS pushes.
func FullPushes(op results.Op, n float64) Check {
	return Metric("full pushes", cpValue(func(c *results.ControlPlaneStats) float64 { return float64(c.Pushes.Full) }), op, n, "")
}

// PeakHeap checks the control plane's peak in-use heap in MiB.
func PeakHeap(op results.Op, mib float64) Check {
	return Metric("control-plane peak heap", cpValue(func(c *results.ControlPlaneStats) float64 {
		return float64(c.PeakHeapBytes) / (1 << 20)
	}), op, mib, "MiB")
}
