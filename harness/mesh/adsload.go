package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// adsloadCounts are the fields of adsload's /stats the wait reads.
type adsloadCounts struct {
	Clients    int   `json:"clients"`
	Connected  int64 `json:"connected"`
	Configured int64 `json:"configured"`
}

// adsloadServedTimeout is how long the fleet may take to be served: a control plane admits
// new streams at a bounded rate (istiod's default 15 + 5 per core a second, burst 1), so a
// large fleet takes a while by design.
func adsloadServedTimeout(clients int) time.Duration {
	return 2*time.Minute + time.Duration(clients)*100*time.Millisecond
}

// waitADSLoadServed waits until every adsload client's stream has received a response, so that
// what the run measures starts with the whole fleet connected: a fleet still connecting would
// count its initial fetches as the run's pushes and miss the first changes. The adsload pod is
// Ready as soon as it serves /stats, before its clients are.
func (m *Mesh) waitADSLoadServed(ctx context.Context, node int, every time.Duration) (adsloadCounts, error) {
	client := &http.Client{Transport: &http.Transport{DialContext: m.Cluster.Dialer(max(node, 1))}, Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	want := m.Spec.ADSLoad.Clients
	timeout := adsloadServedTimeout(want)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last adsloadCounts
	var lastErr error
	for {
		c, err := readADSLoadCounts(ctx, client, m.ADSLoadURL+"/stats")
		if err == nil {
			last, lastErr = c, nil
			if c.Clients == want && c.Configured == int64(want) {
				return c, nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return last, fmt.Errorf("adsload's clients not all served within %s: %w", timeout, lastErr)
			}
			return last, fmt.Errorf("adsload's clients not all served within %s: %d of %d have received config (%d streams open): is the control plane refusing or holding their streams?",
				timeout, last.Configured, want, last.Connected)
		case <-time.After(every):
		}
	}
}

func readADSLoadCounts(ctx context.Context, c *http.Client, url string) (adsloadCounts, error) {
	var out adsloadCounts
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return out, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return out, fmt.Errorf("read adsload's stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("read adsload's stats: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("read adsload's stats: %w", err)
	}
	return out, nil
}
