package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/harness/cluster"
)

// Ballast drives a process's memory up, through its own chaos hook (the reference control
// plane's /debug/ballast, subject.Ballaster) or, for a process without one, with a generic
// memory hog charged to its container's memory cgroup (MemoryHog): either way the kernel, not the
// harness, then kills it at its limit. Inject proves the effect: it returns once the cgroup's
// usage rose by MinGrowth.
type Ballast struct {
	// Target names the process in reports.
	Target string
	// URL starts the growth (POST) through the process's hook; empty: MemoryHog does it.
	URL string
	// Dial reaches URL (a node's dialer).
	Dial cluster.DialFunc
	// MemoryHog grows the memory from outside the process when URL is empty.
	MemoryHog *MemoryHog
	// Usage reads the process's memory use in bytes (its cgroup); an error after the growth
	// started (the process was killed) also proves the effect.
	Usage func() (int64, error)
	// MinGrowth is the growth that proves the effect (default 16 MiB); Timeout bounds the wait
	// (default 30 s).
	MinGrowth int64
	Timeout   time.Duration
}

// Name implements Injector.
func (b *Ballast) Name() string { return "memory-ballast/" + b.Target }

// Inject implements Injector.
func (b *Ballast) Inject(ctx context.Context) (Evidence, error) {
	grow, timeout := b.MinGrowth, b.Timeout
	if grow <= 0 {
		grow = 16 << 20
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	base, err := b.Usage()
	if err != nil {
		return Evidence{}, fmt.Errorf("memory ballast %s: read memory before: %w", b.Target, err)
	}
	var hogDone <-chan error
	switch {
	case b.URL != "":
		if err := post(ctx, b.Dial, b.URL); err != nil {
			return Evidence{}, fmt.Errorf("memory ballast %s: start: %w", b.Target, err)
		}
	case b.MemoryHog != nil:
		if hogDone, err = b.MemoryHog.start(); err != nil {
			return Evidence{}, fmt.Errorf("memory ballast %s: %w", b.Target, err)
		}
	default:
		return Evidence{}, fmt.Errorf("memory ballast %s: neither a hook URL nor a hog", b.Target)
	}
	deadline := time.Now().Add(timeout)
	for {
		u, err := b.Usage()
		var hogErr error
		select {
		case hogErr = <-hogDone:
			hogDone = nil
		default:
		}
		switch {
		case hogErr != nil:
			return Evidence{}, fmt.Errorf("memory ballast %s: the memory hog failed: %w", b.Target, hogErr)
		case err != nil:
			return Evidence{At: time.Now(), Summary: fmt.Sprintf("%s grew until its memory could no longer be read (killed): %v", b.Target, err)}, nil
		case u-base >= grow:
			return Evidence{At: time.Now(), Summary: fmt.Sprintf("%s memory %.0f → %.0f MiB and growing", b.Target, mib(base), mib(u)),
				Values: map[string]float64{"beforeBytes": float64(base), "nowBytes": float64(u)}}, nil
		case time.Now().After(deadline):
			return Evidence{}, fmt.Errorf("memory ballast %s: memory grew only %.1f MiB in %s: the hook did not take effect", b.Target, mib(u-base), timeout)
		}
		select {
		case <-ctx.Done():
			return Evidence{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Implementation says which implementation Inject uses (results.Fault).
func (b *Ballast) Implementation() (string, bool) {
	if b.URL != "" {
		return "the process's own hook: POST " + b.URL, false
	}
	return "generic memory hog in the container's memory cgroup (" + hogDescription + ")", true
}

// Clear implements Injector: the ballast lives in the process and goes with it; a hog stops by
// itself when the process dies (or at its size), and Clear stops it now.
func (b *Ballast) Clear(context.Context) (Evidence, error) {
	if b.MemoryHog != nil {
		b.MemoryHog.stop()
	}
	u, err := b.Usage()
	if err != nil {
		return Evidence{At: time.Now(), Summary: fmt.Sprintf("%s memory unreadable at clear: %v", b.Target, err)}, nil
	}
	return Evidence{At: time.Now(), Summary: fmt.Sprintf("%s memory %.0f MiB at clear (a restarted process starts without ballast)", b.Target, mib(u))}, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// post POSTs to url through dial; any status but 2xx is an error carrying the body's start.
func post(ctx context.Context, dial cluster.DialFunc, url string) error {
	client := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("POST %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}
