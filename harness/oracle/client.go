// Package oracle checks a control plane's output against the configuration the harness knows it
// should produce: a full-mesh xDS client subscribes to every cluster and every endpoint, as an
// Envoy that sees the whole mesh, and Compare lists every cluster and endpoint (address and
// port) that differs from the generator's Expected config.
package oracle

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/meshchaos/meshchaos/internal/ads"
)

// State is what the client holds: every cluster it received and, for each EDS cluster, its
// endpoints as "IP:port".
type State struct {
	Clusters  map[string]bool
	Endpoints map[string][]string
	// Updates counts the responses received (CDS and EDS), across reconnects.
	Updates int
}

// Client is a full-mesh xDS client: one ADS (State of the World) stream, CDS wildcard, and EDS
// for every EDS cluster it is given, as Envoy does after each CDS. It reconnects when the stream
// ends (a restarted control plane) and keeps its last state until the new stream delivers.
type Client struct {
	// Addr is the control plane's xDS address; Dial reaches it (e.g. into a network namespace).
	Addr string
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// NodeID is the node's id; default SidecarID("default"). Istio takes the proxy's namespace
	// from it, and exports a ServiceEntry with exportTo "." to its own namespace only.
	NodeID string
	// DialOptions are added after the client's own (plaintext): transport credentials here
	// replace plaintext, e.g. Credentials' for a secure port, whose token must then be of the
	// NodeID's namespace.
	DialOptions []grpc.DialOption

	mu      sync.Mutex
	state   State
	edsName map[string]string // cluster → its EDS service name
	changed chan struct{}
	lastErr error
}

// Start runs the client until ctx ends.
func (c *Client) Start(ctx context.Context) {
	c.mu.Lock()
	c.state = State{Clusters: map[string]bool{}, Endpoints: map[string][]string{}}
	c.edsName = map[string]string{}
	c.changed = make(chan struct{}, 1)
	c.mu.Unlock()
	go func() {
		for ctx.Err() == nil {
			err := c.session(ctx)
			c.mu.Lock()
			c.lastErr = err
			c.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
}

// Err is the last stream error (nil while the first stream lasts).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

func (c *Client) session(ctx context.Context) error {
	var opts []grpc.DialOption
	if c.Dial != nil {
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return c.Dial(ctx, "tcp", addr) }))
	}
	conn, err := ads.Dial(c.Addr, append(opts, c.DialOptions...)...)
	if err != nil {
		return fmt.Errorf("oracle client: %w", err)
	}
	defer conn.Close()
	id := c.NodeID
	if id == "" {
		id = SidecarID("default")
	}
	s, err := ads.Open(ctx, conn, ads.Options{Node: &corev3.Node{Id: id, Cluster: "oracle"}})
	if err != nil {
		return fmt.Errorf("oracle client: %s: %w", c.Addr, err)
	}
	defer s.Close()
	if err := s.Subscribe(resourcev3.ClusterType); err != nil {
		return fmt.Errorf("oracle client: subscribe to %s: %w", c.Addr, err)
	}
	err = s.Run(func(resp *discoveryv3.DiscoveryResponse) error {
		switch resp.GetTypeUrl() {
		case resourcev3.ClusterType:
			names, err := c.applyClusters(resp)
			if err != nil {
				return err
			}
			// EDS for the EDS clusters, once there are any (no names at all would be the wildcard).
			if _, subscribed := s.Subscription(resourcev3.EndpointType); subscribed || len(names) > 0 {
				return s.Subscribe(resourcev3.EndpointType, names...)
			}
		case resourcev3.EndpointType:
			return c.applyEndpoints(resp)
		}
		return nil
	})
	return fmt.Errorf("oracle client: stream from %s: %w", c.Addr, err)
}

// applyClusters replaces the cluster set (CDS is State of the World) and returns the sorted EDS
// service names to subscribe to.
func (c *Client) applyClusters(resp *discoveryv3.DiscoveryResponse) ([]string, error) {
	clusters := map[string]bool{}
	eds := map[string]string{}
	for _, a := range resp.GetResources() {
		var cl clusterv3.Cluster
		if err := a.UnmarshalTo(&cl); err != nil {
			return nil, fmt.Errorf("oracle client: decode cluster: %w", err)
		}
		clusters[cl.GetName()] = true
		if cl.GetType() == clusterv3.Cluster_EDS {
			name := cl.GetEdsClusterConfig().GetServiceName()
			if name == "" {
				name = cl.GetName()
			}
			eds[cl.GetName()] = name
		}
	}
	c.mu.Lock()
	c.state.Clusters = clusters
	c.edsName = eds
	for name := range c.state.Endpoints {
		if _, ok := eds[name]; !ok {
			delete(c.state.Endpoints, name)
		}
	}
	c.state.Updates++
	c.mu.Unlock()
	c.signal()
	names := make([]string, 0, len(eds))
	for _, n := range eds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// applyEndpoints merges CLAs into the state (a SotW EDS response may carry only the changed
// ones).
func (c *Client) applyEndpoints(resp *discoveryv3.DiscoveryResponse) error {
	got := map[string][]string{}
	for _, a := range resp.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			return fmt.Errorf("oracle client: decode endpoints: %w", err)
		}
		var eps []string
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				eps = append(eps, net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())))
			}
		}
		sort.Strings(eps)
		got[cla.GetClusterName()] = eps
	}
	c.mu.Lock()
	for cluster, svc := range c.edsName {
		if eps, ok := got[svc]; ok {
			c.state.Endpoints[cluster] = eps
		}
	}
	c.state.Updates++
	c.mu.Unlock()
	c.signal()
	return nil
}

func (c *Client) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Wait evaluates cond on the client's state after every update until it holds, ctx ends or
// timeout passes; it returns whether cond held. cond must not keep the state.
func (c *Client) Wait(ctx context.Context, timeout time.Duration, cond func(State) bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		c.mu.Lock()
		ok := cond(c.state)
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-c.changed:
		}
	}
}

// Compare compares the client's state now with want (see Compare).
func (c *Client) Compare(want Want) []Mismatch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Compare(want, c.state)
}

// SidecarID is an Istio-style sidecar node id of a proxy in namespace ns.
func SidecarID(ns string) string {
	return fmt.Sprintf("sidecar~10.255.0.1~oracle.%s~%s.svc.cluster.local", ns, ns)
}
