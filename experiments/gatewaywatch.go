package experiments

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

	"github.com/meshchaos/meshchaos/harness/runner"
)

// gatewayWatch follows each gateway's Envoy-style /stats and puts what matters for incident 1 on
// the timeline: xDS reconnects and drops in the number of active clusters (an incomplete config
// replacing a complete one). It records the lowest cluster count seen per gateway.
type gatewayWatch struct {
	ips    []string
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	every  time.Duration
	mu     sync.Mutex
	lowest map[string]int64
}

// gatewayStats are the /stats values the watch reads.
type gatewayStats struct {
	streams, clusters, connected int64
}

func (g *gatewayWatch) run(ctx context.Context, r *runner.Run) {
	client := &http.Client{Transport: &http.Transport{DialContext: g.dial}, Timeout: time.Second}
	defer client.CloseIdleConnections()
	last := map[string]gatewayStats{}
	g.lowest = map[string]int64{}
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		for _, ip := range g.ips {
			st, err := readGatewayStats(ctx, client, "http://"+net.JoinHostPort(ip, "15000")+"/stats")
			if err != nil {
				continue
			}
			prev, seen := last[ip]
			last[ip] = st
			g.mu.Lock()
			if low, ok := g.lowest[ip]; !ok || st.clusters < low {
				g.lowest[ip] = st.clusters
			}
			g.mu.Unlock()
			if !seen {
				continue
			}
			if st.connected != prev.connected {
				state := "disconnected from"
				if st.connected == 1 {
					state = "connected to"
				}
				r.Event("gateway.xds", ip, fmt.Sprintf("%s the control plane (stream %d)", state, st.streams))
			}
			if st.clusters < prev.clusters {
				r.Event("gateway.clusters-dropped", ip, fmt.Sprintf("active clusters %d → %d: the control plane sent an incomplete config", prev.clusters, st.clusters))
			} else if st.clusters > prev.clusters && prev.clusters > 0 {
				r.Event("gateway.clusters-restored", ip, fmt.Sprintf("active clusters %d → %d", prev.clusters, st.clusters))
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
