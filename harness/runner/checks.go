package runner

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/meshchaos/meshchaos/harness/observe"
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

// measured returns an error unless a measurement of that name and role was usable; the error
// carries the measurement's last failure.
func measured(s *results.Summary, name, role string) error {
	for _, m := range s.Measurements {
		if m.Name == name && m.Role == role {
			if m.OK {
				return nil
			}
			return fmt.Errorf("the %s measurement of the %s was not usable (%d failures; last: %s)", name, role, m.Failures, m.Error)
		}
	}
	return fmt.Errorf("the %s of the %s were not measured", name, role)
}

// cpMeasured is cpValue for a figure that needs the named measurement of the control plane.
func cpMeasured(name string, f func(c *results.ControlPlaneStats) float64) func(s *results.Summary) (float64, error) {
	return func(s *results.Summary) (float64, error) {
		if err := measured(s, name, "control-plane"); err != nil {
			return 0, err
		}
		return cpValue(f)(s)
	}
}

// OOMKills checks the control plane's OOM kills (≥ 1 proves an OOM chaos happened), as its pods'
// statuses or its memory cgroup's kernel counter report them.
func OOMKills(op results.Op, n float64) Check {
	return Metric("control-plane OOM kills", func(s *results.Summary) (float64, error) {
		if err := measured(s, "pods", "control-plane"); err != nil {
			if merr := measured(s, "memory", "control-plane"); merr != nil {
				return 0, errors.Join(err, merr)
			}
		}
		return cpValue(func(c *results.ControlPlaneStats) float64 { return float64(c.OOMKills) })(s)
	}, op, n, "")
}

// Restarts checks the control plane's container restarts.
func Restarts(op results.Op, n float64) Check {
	return Metric("control-plane restarts", cpMeasured("pods", func(c *results.ControlPlaneStats) float64 { return float64(c.Restarts) }), op, n, "")
}

// pushes reads the push counters; they are absent when the metrics were never scraped.
func pushes(f func(p *results.Pushes) float64) func(s *results.Summary) (float64, error) {
	return func(s *results.Summary) (float64, error) {
		if err := measured(s, "metrics", "control-plane"); err != nil {
			return 0, err
		}
		if s.ControlPlaneStats == nil || s.ControlPlaneStats.Pushes == nil {
			return 0, errors.New("the control plane's push counters were not among its scraped metrics")
		}
		return f(s.ControlPlaneStats.Pushes), nil
	}
}

// FullPushes checks the number of full xDS pushes.
func FullPushes(op results.Op, n float64) Check {
	return Metric("full pushes", pushes(func(p *results.Pushes) float64 { return float64(p.Full) }), op, n, "")
}

// ChaosFullPushes checks the number of full xDS pushes during the chaos phase: what the faults
// caused, without the pushes to proxies still connecting when the measurement began.
func ChaosFullPushes(op results.Op, n float64) Check {
	return Metric("full pushes during the chaos", func(s *results.Summary) (float64, error) {
		if _, err := pushes(func(*results.Pushes) float64 { return 0 })(s); err != nil {
			return 0, err
		}
		if s.ControlPlaneStats.ChaosPushes == nil {
			return 0, errors.New("the chaos phase did not finish: no push counts over it")
		}
		return float64(s.ControlPlaneStats.ChaosPushes.Full), nil
	}, op, n, "")
}

// EDSPushes checks the number of incremental (endpoint-only) pushes.
func EDSPushes(op results.Op, n float64) Check {
	return Metric("EDS pushes", pushes(func(p *results.Pushes) float64 { return float64(p.EDS) }), op, n, "")
}

// PeakHeap checks the control plane's peak in-use heap in MiB (from profiles or its metrics).
func PeakHeap(op results.Op, mib float64) Check {
	return Metric("control-plane peak heap", func(s *results.Summary) (float64, error) {
		if s.ControlPlaneStats == nil || s.ControlPlaneStats.PeakHeapBytes == 0 {
			return 0, errors.New("the control plane's heap was not measured (no profile, no heap metric)")
		}
		return float64(s.ControlPlaneStats.PeakHeapBytes) / (1 << 20), nil
	}, op, mib, "MiB")
}

// WorkloadRestarts checks the container restarts of a workload role (e.g. the app's).
func WorkloadRestarts(role string, op results.Op, n float64) Check {
	return Metric(role+" restarts", func(s *results.Summary) (float64, error) {
		if err := measured(s, "pods", role); err != nil {
			return 0, err
		}
		return float64(s.Workloads[role].Restarts), nil
	}, op, n, "")
}

// grpcTraffic is the proxyless gRPC clients' traffic (observe.GRPCAttack), measured or not.
func grpcTraffic(s *results.Summary) (*results.Traffic, error) {
	if err := measured(s, "rpcs", "grpc-client"); err != nil {
		return nil, err
	}
	t := s.Attacks[observe.GRPCAttack]
	if t == nil || t.Requests == 0 {
		return nil, errors.New("the gRPC clients made no RPC in the measured window")
	}
	return t, nil
}

// GRPCFailedRPCs checks how many of the proxyless gRPC clients' RPCs failed (any status but
// OK); the detail gives the codes, the failed RPCs per second and the time without config.
func GRPCFailedRPCs(op results.Op, n float64) Check {
	return func(s *results.Summary) (results.Check, error) {
		const name = "gRPC failed RPCs"
		t, err := grpcTraffic(s)
		if err != nil {
			return results.Check{}, fmt.Errorf("check %q: %w", name, err)
		}
		c := results.NewCheck(name, float64(t.Errors), op, n, "")
		c.Detail = fmt.Sprintf("%d of %d RPCs failed; by code %s", t.Errors, t.Requests, countsText(t.ByCode))
		if w := t.ErrorWindow; w != nil {
			peak := int64(0)
			for _, sec := range t.Series {
				peak = max(peak, sec.Errors)
			}
			c.Detail += fmt.Sprintf("; in seconds %d–%d of the traffic, at most %d a second", w.FirstSecond, w.LastSecond, peak)
		}
		if t.NoConfigSeconds != nil {
			c.Detail += fmt.Sprintf("; longest time a channel had no usable config %.2f s", *t.NoConfigSeconds)
		}
		return c, nil
	}
}

// GRPCNoConfig checks the longest time one proxyless gRPC channel had no usable config, in
// seconds (from its first failed RPC after a success to its next success).
func GRPCNoConfig(op results.Op, seconds float64) Check {
	return Metric("gRPC time without a usable config", func(s *results.Summary) (float64, error) {
		t, err := grpcTraffic(s)
		if err != nil {
			return 0, err
		}
		if t.NoConfigSeconds == nil {
			return 0, errors.New("the gRPC clients' time without config was not measured")
		}
		return *t.NoConfigSeconds, nil
	}, op, seconds, "s")
}
