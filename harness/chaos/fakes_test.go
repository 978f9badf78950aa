package chaos

import (
	"context"
	"errors"
	"net"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster"
)

// fakeCluster is a one-node cluster.Cluster whose dialer reaches loopback servers by pod
// address ("10.244.0.5:8080" → "127.0.0.1:41234"); the rest is unused by the unit tests.
type fakeCluster struct {
	cluster.Cluster
	node  string
	addrs map[string]string
}

func (c *fakeCluster) Name() string    { return "fake" }
func (c *fakeCluster) Nodes() []string { return []string{c.node} }
func (c *fakeCluster) Dialer(int) cluster.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		to, ok := c.addrs[addr]
		if !ok {
			return nil, errors.New("connection refused (fake: no server for " + addr + ")")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, to)
	}
}
func (c *fakeCluster) RESTConfig() *rest.Config { return nil }
func (c *fakeCluster) PodCgroup(*corev1.Pod) (*cgroup.Group, error) {
	return nil, errors.New("fake cluster has no cgroups")
}
