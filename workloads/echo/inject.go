package echo

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"time"
)

// envDefaults fills unset options from the environment (how manifests configure the image).
func (o *Options) envDefaults() {
	dur := func(dst *time.Duration, key string) {
		if *dst == 0 {
			if d, err := time.ParseDuration(os.Getenv(key)); err == nil {
				*dst = d
			}
		}
	}
	dur(&o.ReadyFor, "ECHO_READY_FOR")
	dur(&o.UnreadyFor, "ECHO_UNREADY_FOR")
	dur(&o.Latency, "ECHO_LATENCY")
	if o.ErrorRate == 0 {
		if f, err := strconv.ParseFloat(os.Getenv("ECHO_ERROR_RATE"), 64); err == nil {
			o.ErrorRate = f
		}
	}
	if o.ErrorCode == 0 {
		if c, err := strconv.Atoi(os.Getenv("ECHO_ERROR_CODE")); err == nil {
			o.ErrorCode = c
		}
	}
	if o.ErrorCode == 0 {
		o.ErrorCode = http.StatusInternalServerError
	}
	if o.now == nil {
		o.now = time.Now
	}
}

// Validate reports options that cannot work, as a message for the user.
func (o Options) Validate() error {
	switch {
	case o.ErrorRate < 0 || o.ErrorRate > 1:
		return fmt.Errorf("error rate %v: must be between 0 and 1", o.ErrorRate)
	case o.Latency < 0:
		return fmt.Errorf("--latency %s: must not be negative", o.Latency)
	case checkFlap(o.ReadyFor, o.UnreadyFor) != nil:
		return fmt.Errorf("--ready-for %s, --unready-for %s: %v", o.ReadyFor, o.UnreadyFor, checkFlap(o.ReadyFor, o.UnreadyFor))
	case o.ErrorCode != 0 && (o.ErrorCode < 100 || o.ErrorCode > 599):
		return fmt.Errorf("error code %d: not an HTTP status", o.ErrorCode)
	}
	return nil
}

// inject applies latency and error injection; false means the reply was already written.
func (o *Options) inject(w http.ResponseWriter, r *http.Request) bool {
	if o.Latency > 0 {
		select {
		case <-time.After(o.Latency):
		case <-r.Context().Done():
			return false
		}
	}
	if o.ErrorRate > 0 && rand.Float64() < o.ErrorRate {
		w.Header().Set("X-Echo-Pod", o.PodName)
		http.Error(w, "injected error", o.ErrorCode)
		return false
	}
	return true
}
