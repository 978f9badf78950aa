package xdsproxy

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Wait polls the admin /ready endpoint at adminAddr until it answers 200, for a postStart hook
// that holds the app container until the sidecar has its configuration.
func Wait(ctx context.Context, adminAddr string, timeout, interval time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	url := "http://" + adminAddr + "/ready"
	last := "no answer yet"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("proxy at %s not ready after %s (last: %s)", adminAddr, timeout, last)
		case <-time.After(interval):
		}
	}
}
