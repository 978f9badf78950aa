// Package cluster is the substrate seam: what an experiment needs from a Kubernetes cluster, whoever
// provides it. The local substrate (harness/cluster/local, network namespaces on this host) is one
// Substrate; kind and existing clusters are others. Experiments name only this package, never an
// implementation: the CLI picks the substrate and hands it down.
package cluster

import (
	"context"
	"net"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/meshchaos/meshchaos/harness/cgroup"
)

// NodeLabel is set on every node to its 1-based index ("1", "2", …); workloads pin to a node with
// a nodeSelector on it, on every substrate.
const NodeLabel = "meshchaos.io/node"

// DialFunc opens a connection as a process on a node would: pod IPs and ClusterIPs are reachable.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// Spec is what an experiment asks of a cluster.
type Spec struct {
	// Name is unique on the host; substrates refuse a name in use.
	Name string
	// Nodes is the number of worker nodes, 1-based in every method below.
	Nodes int
	// Logf reports progress.
	Logf func(format string, args ...any)
	// Namespaces are the namespaces the run will create objects in. A Shared substrate claims
	// them in Up (creates them as the run's, refuses any that already exist) and deletes them
	// in Down; a substrate whose clusters are the run's own ignores them.
	Namespaces []string
}

// Shared is a Substrate of clusters that are not the run's own (a cluster that already
// exists): the run keeps its objects in namespaces it creates, never "default".
type Shared interface {
	Substrate
	// WorkloadNamespace is where the mesh's workloads go instead of "default".
	WorkloadNamespace() string
}

// Lent is implemented by a cluster a run borrows for its duration (harness/cluster/reuse), whose
// Name is the run's: the cluster's own name, and whether an earlier run had it, for the run's
// timeline.
type Lent interface {
	LentFrom() (cluster string, reused bool)
}

// ImageHolder is implemented by clusters whose nodes can be given an image the host already has,
// never pulling it from a registry (kind: from Docker). The mesh runs Envoy only where the nodes
// hold it; tests and CI must not reach registries.
type ImageHolder interface {
	// HoldImage loads ref into every node and reports true when the host has ref; false (and
	// no error) when it has not.
	HoldImage(ctx context.Context, ref string) (bool, error)
}

// Substrate brings clusters up (local.Substrate, kind.Substrate, existing.Substrate; the
// e2e-framework adapters of local and kind are their packages' Provider).
type Substrate interface {
	// Name is the substrate's name in summaries: "local", "kind", "existing".
	Name() string
	// Up creates a cluster with every image the harness needs already loaded, and waits until
	// its nodes are Ready.
	Up(ctx context.Context, s Spec) (Cluster, error)
}

// NodePaths is a cluster whose node files the harness names otherwise than commands on the
// node (NodeExec) see them: the existing substrate's agent reaches the node's root under a
// directory of its own (a cgroup.Group's directories are there), and NodeExec runs chrooted
// into it.
type NodePaths interface {
	// NodePath is path, as the cluster's cgroup.Groups name it, as NodeExec sees it.
	NodePath(path string) string
}

// NodeQuerier is a cluster on which a NodeExec costs much (the existing substrate: a pod exec
// through the API server, kubelet and the runtime) and that can run a short command cheaply
// instead: Query answers within tens of seconds at most, so it is for reads that callers
// poll (kube-proxy's rules), never for a command that runs on (a memory hog).
type NodeQuerier interface {
	// NodeQuery runs a short command as NodeExec would and returns its standard output.
	NodeQuery(ctx context.Context, k int, argv ...string) ([]byte, error)
}

// Query runs a short command on node k: through NodeQuery when c has it, else NodeExec.
func Query(ctx context.Context, c Cluster, k int, argv ...string) ([]byte, error) {
	if q, ok := c.(NodeQuerier); ok {
		return q.NodeQuery(ctx, k, argv...)
	}
	return c.NodeExec(ctx, k, argv...)
}

// Cluster is a running cluster.
type Cluster interface {
	// Name is the cluster's name.
	Name() string
	// RESTConfig reaches the apiserver from this process.
	RESTConfig() *rest.Config
	// Nodes lists node names, node 1 first.
	Nodes() []string
	// Dialer dials from node k.
	Dialer(k int) DialFunc
	// NodeExec runs a command in node k's environment (its network namespace, or its container)
	// and returns its standard output.
	NodeExec(ctx context.Context, k int, argv ...string) ([]byte, error)
	// KubeProxyCgroup is the cgroup of node k's kube-proxy.
	KubeProxyCgroup(k int) (*cgroup.Group, error)
	// PodsCgroup is the parent cgroup of every pod on node k (kubelet's kubepods).
	PodsCgroup(k int) (*cgroup.Group, error)
	// PodCgroup is the cgroup of a pod; it outlives container restarts.
	PodCgroup(pod *corev1.Pod) (*cgroup.Group, error)
	// LoadImageArchive imports an image tarball into every node.
	LoadImageArchive(ctx context.Context, path string) error
	// Down removes the cluster and everything it started. Safe to call twice.
	Down(ctx context.Context) error
}

// Keeper is a cluster that can outlive the process that brought it up (meshchaos run
// --keep-cluster, to debug a run): Keep, instead of Down, leaves it running and reachable, and
// the substrate's own removal (meshchaos cluster down NAME) takes it away later.
type Keeper interface {
	// Keep releases what ties the cluster to this process and says how to reach it.
	Keep(ctx context.Context) (Kept, error)
}

// Kept says how to reach a kept cluster from this host.
type Kept struct {
	// Kubeconfig is the file to use ("" for the kubeconfig kubectl finds by default); Context
	// the context in it ("" for its current one).
	Kubeconfig, Context string
}
