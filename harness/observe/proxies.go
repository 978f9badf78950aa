package observe

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshchaos/meshchaos/results"
)

// Proxies follows each proxy's Envoy-style admin /stats and puts what matters for the incidents
// on the timeline: xDS (re)connects and drops in the number of active clusters (an incomplete
// config replacing a complete one).
type Proxies struct {
	// IPs are the proxies' pod IPs; AdminPort their admin port (15000 as Envoy in Istio).
	IPs       []string
	AdminPort int
	Dial      DialContext
	Every     time.Duration
	As        Role

	mu           sync.Mutex
	reads, fails int
	lastErr      error
}

// gatewayStats are the /stats values the watch reads.
type gatewayStats struct {
	streams, clusters, connected int64
}

// Name implements Measurement.
func (g *Proxies) Name() string { return "proxy-stats" }

// Role implements Measurement.
func (g *Proxies) Role() Role { return g.As }

// Start implements Measurement.
func (g *Proxies) Start(ctx context.Context, sink Sink) error {
	if g.AdminPort == 0 {
		g.AdminPort = 15000
	}
	if g.Every <= 0 {
		g.Every = 100 * time.Millisecond
	}
	sink.Background(func(ctx context.Context) { g.run(ctx, sink) })
	return nil
}

// Gather implements Measurement.
func (g *Proxies) Gather(s *results.Summary) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := results.Measurement{Name: g.Name(), Role: string(g.As), OK: g.reads > 0, Samples: g.reads, Failures: g.fails}
	if g.lastErr != nil {
		st.Error = g.lastErr.Error()
	}
	status(s, st)
}

func (g *Proxies) run(ctx context.Context, sink Sink) {
	client := &http.Client{Transport: &http.Transport{DialContext: g.Dial}, Timeout: time.Second}
	defer client.CloseIdleConnections()
	last := map[string]gatewayStats{}
	event := func(kind, ip, detail string) {
		sink.RecordEvent(results.Event{At: time.Now().UTC(), Kind: kind, Object: ip, Detail: detail})
	}
	t := time.NewTicker(g.Every)
	defer t.Stop()
	for {
		for _, ip := range g.IPs {
			st, err := readGatewayStats(ctx, client, "http://"+net.JoinHostPort(ip, strconv.Itoa(g.AdminPort))+"/stats")
			g.mu.Lock()
			if err != nil {
				if ctx.Err() == nil {
					g.fails++
					g.lastErr = err
				}
			} else {
				g.reads++
			}
			g.mu.Unlock()
			if err != nil {
				continue
			}
			prev, seen := last[ip]
			last[ip] = st
			if !seen {
				continue
			}
			if st.connected != prev.connected {
				state := "disconnected from"
				if st.connected == 1 {
					state = "connected to"
				}
				event(string(g.As)+".xds", ip, fmt.Sprintf("%s the control plane (stream %d)", state, st.streams))
			}
			if st.clusters < prev.clusters {
				event(string(g.As)+".clusters-dropped", ip, fmt.Sprintf("active clusters %d → %d: the control plane sent an incomplete config", prev.clusters, st.clusters))
			} else if st.clusters > prev.clusters && prev.clusters > 0 {
				event(string(g.As)+".clusters-restored", ip, fmt.Sprintf("active clusters %d → %d", prev.clusters, st.clusters))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func readGatewayStats(ctx context.Context, c *http.Client, url string) (gatewayStats, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return gatewayStats{}, err
	}
	defer resp.Body.Close()
	var st gatewayStats
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "control_plane.streams_total":
			st.streams = n
		case "cluster_manager.active_clusters":
			st.clusters = n
		case "control_plane.connected_state":
			st.connected = n
		}
	}
	return st, sc.Err()
}
