package xds

// RequestLimitEnv is istiod's environment variable for the new-stream rate
// (pilot/pkg/features/tuning.go:58-75 at both pins of hack/istiod/pins): istiod reads it once at
// start, and 0 or unset means the rate RequestLimit derives from GOMAXPROCS.
const RequestLimitEnv = "PILOT_MAX_REQUESTS_PER_SECOND"

// RequestLimit is istiod's default rate of new xDS streams for procs processors
// (pilot/pkg/features/tuning.go:68-74: 15 + 5·GOMAXPROCS, at most 100; 20 on 1 CPU, 25 on 2,
// 35 on 4, 100 from 17 on). istiod's limiter has a burst of 1 (pilot/pkg/xds/discovery.go:153
// at both pins) and a stream waits up to a second for its turn before it is refused with
// ResourceExhausted (WaitForRequestLimit, discovery.go:600 at 2026-08, :606 at 2026-04; called
// by ads.go:214 and delta.go:71 at 2026-08): a reconnect storm is admitted at that rate, not all
// at once.
func RequestLimit(procs int) float64 { return min(float64(15+5*procs), 100) }

// RequestBurst is istiod's new-stream burst (pilot/pkg/xds/discovery.go:153: rate.NewLimiter(…, 1)).
const RequestBurst = 1
