package runner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/meshchaos/meshchaos/results"
)

// scaleValue reads a figure of a scale experiment; it needs the scale-steps measurement.
func scaleValue(f func(s *results.Scale) (float64, error)) func(s *results.Summary) (float64, error) {
	return func(s *results.Summary) (float64, error) {
		if err := measured(s, "scale-steps", "control-plane"); err != nil {
			return 0, err
		}
		if s.Scale == nil {
			return 0, errors.New("the summary has no scale record")
		}
		return f(s.Scale)
	}
}

// MaxExponentResolution is the coarsest resolution (PowerFit.Resolution) at which the growth
// exponent is judged: a third still tells linear from quadratic growth; coarser, the heap's
// jitter decides the verdict, not the config.
const MaxExponentResolution = 1.0 / 3

// GrowthExponent checks the exponent of heap (above the baseline) against endpoints, fitted
// log-log over the steps. Steps too small to resolve it give an error, not a verdict on noise.
func GrowthExponent(op results.Op, k float64) Check {
	return withDetail(Metric("heap growth exponent", scaleValue(func(s *results.Scale) (float64, error) {
		if s.Fit == nil {
			return 0, fmt.Errorf("no growth fit: %d step(s) measured, at least 2 needed above the baseline", len(s.Steps))
		}
		if r := s.Fit.Resolution; r > MaxExponentResolution {
			return 0, fmt.Errorf("the steps resolve the exponent only to ±%.2f (want ±%.2f or finer): the heap grew too little over too narrow a range for its jitter, so the fit (%.3f) says nothing; use larger steps over a wider range, e.g. steps=200,400,800", r, MaxExponentResolution, s.Fit.Exponent)
		}
		return s.Fit.Exponent, nil
	}), op, k, ""), func(s *results.Summary) string {
		f := s.Scale.Fit
		return fmt.Sprintf("heap above the baseline ∝ endpoints^%.3f ± %.3f over %d steps", f.Exponent, f.StdErr, f.Points)
	})
}

// BytesPerEndpoint checks the heap per endpoint (above the baseline) at the largest step of the
// sequence (a verification step excluded): the cost of the whole config, per endpoint, where
// the fixed costs of the first objects weigh least.
func BytesPerEndpoint(op results.Op, bytes float64) Check {
	return Metric("heap bytes per endpoint", scaleValue(func(s *results.Scale) (float64, error) {
		for i := len(s.Steps) - 1; i >= 0; i-- {
			if !s.Steps[i].Verify {
				return s.Steps[i].BytesPerEndpoint, nil
			}
		}
		return 0, errors.New("no step was measured")
	}), op, bytes, "B")
}

// OracleMismatches checks the correctness oracle's mismatches in one scenario ("config",
// "endpoint-port", "workload-entry").
func OracleMismatches(scenario string, op results.Op, n float64) Check {
	return withDetail(Metric(scenario+" oracle mismatches", scaleValue(func(s *results.Scale) (float64, error) {
		// A step the client never held whole is a timeout: what it lacked is counted as
		// mismatches, but they say nothing of a bug, and must not pass for one caught.
		for _, st := range s.Steps {
			if !st.Converged {
				return 0, fmt.Errorf("step %d never reached the oracle client (raise convergeTimeout, or the control plane does not serve it): its mismatches are not a verdict", st.ServiceEntries)
			}
		}
		return float64(s.MismatchCount[scenario]), nil
	}), op, n, ""), func(s *results.Summary) string {
		var first []string
		for _, m := range s.Scale.Mismatches {
			if m.Scenario == scenario && len(first) < 3 {
				first = append(first, fmt.Sprintf("%s want %s got %s (step %d)", m.Cluster, m.Want, m.Got, m.Step))
			}
		}
		return strings.Join(first, "; ")
	})
}

// CapacityVerified checks that the step run at the projected capacity kept the control plane's
// resident memory within the budget (in MiB); it errors when no projection was verified.
func CapacityVerified(op results.Op, budgetMiB float64) Check {
	return Metric("RSS at projected capacity", scaleValue(func(s *results.Scale) (float64, error) {
		p := s.Projection
		if p == nil || !p.Verified {
			return 0, errors.New("the capacity projection was not verified by a step at that size")
		}
		return float64(p.VerifiedRSSBytes) / (1 << 20), nil
	}), op, budgetMiB, "MiB")
}
