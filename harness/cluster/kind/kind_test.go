package kind

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	"github.com/meshchaos/meshchaos/harness/cluster"
)

func TestClusterConfigLabelsWorkersAndPatchesOnlyWhatTheHostNeeds(t *testing.T) {
	cfg := clusterConfig(2, false, false)
	require.Len(t, cfg.Nodes, 3)
	assert.Equal(t, v1alpha4.ControlPlaneRole, cfg.Nodes[0].Role)
	assert.Empty(t, cfg.Nodes[0].Labels[cluster.NodeLabel], "the control plane is no numbered node")
	assert.Equal(t, "1", cfg.Nodes[1].Labels[cluster.NodeLabel])
	assert.Equal(t, "2", cfg.Nodes[2].Labels[cluster.NodeLabel])
	assert.False(t, cfg.Networking.DisableDefaultCNI, "kind's own image brings its CNI")
	assert.Empty(t, cfg.KubeadmConfigPatches)

	ours := clusterConfig(1, true, true)
	assert.True(t, ours.Networking.DisableDefaultCNI, "our image has no CNI daemon; the provider sets the network up")
	assert.Contains(t, ours.KubeadmConfigPatches, "kind: KubeletConfiguration\nfailCgroupV1: false\n")
}
