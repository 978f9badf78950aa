package existing

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/existing/agent"
)

func readyNode(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// Node faults land only on nodes the cluster's owner labelled; meshchaos picks nodes itself only
// for runs without node access, and then only usable ones.
func TestMapNodes(t *testing.T) {
	ctx := context.Background()
	unlabelled := fake.NewClientset(readyNode("b", nil), readyNode("a", nil), readyNode("c", nil))

	c := &existingCluster{client: unlabelled, allow: true}
	err := c.mapNodes(ctx, 2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node faults land only on nodes you choose and no node carries meshchaos.io/node: label 2 node(s) meshchaos.io/node=1..2")
	assert.Empty(t, c.nodes)
	assert.Empty(t, c.labelled, "nothing to label")

	c = &existingCluster{client: unlabelled, allow: false}
	require.NoError(t, c.mapNodes(ctx, 2))
	assert.Equal(t, []string{"a", "b"}, c.nodes, "the first usable nodes by name")
	assert.Equal(t, c.nodes, c.labelled)

	labelled := fake.NewClientset(readyNode("a", nil), readyNode("x", map[string]string{cluster.NodeLabel: "2"}), readyNode("y", map[string]string{cluster.NodeLabel: "1"}))
	c = &existingCluster{client: labelled, allow: true}
	require.NoError(t, c.mapNodes(ctx, 2))
	assert.Equal(t, []string{"y", "x"}, c.nodes, "node k is the node the owner labelled k")
	assert.Empty(t, c.labelled, "the owner's labels are left as they are")
}

// TestNodePath: the agent's cgroup paths (under its view of the node's root) are the node's own
// paths for commands run on the node (NodeExec chroots into that root).
func TestNodePath(t *testing.T) {
	c := &existingCluster{}
	assert.Equal(t, "/sys/fs/cgroup/memory/kubepods/podX", c.NodePath(agent.HostRoot+"/sys/fs/cgroup/memory/kubepods/podX"))
	assert.Equal(t, "/sys/fs/cgroup", c.NodePath("/sys/fs/cgroup"), "a path not under the agent's root is the node's already")
	assert.Equal(t, "/hostile/x", c.NodePath("/hostile/x"))
}
