package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

// testRecorder logs a mesh's steps in the test's log.
type testRecorder struct{ t *testing.T }

func (r testRecorder) Event(kind, object, detail string) {
	r.t.Logf("event %s %s: %s", kind, object, detail)
}
func (r testRecorder) Logf(format string, args ...any) { r.t.Logf(format, args...) }

// TestFleetSpreadOverNodes brings a 2-node local cluster up with the reference control plane
// and a fleet of 30 ADS clients over 3 adsload pods pinned round-robin to nodes 1 and 2: the
// pods sit on both nodes, the control plane serves 30 distinct proxies (its /debug/syncz), and
// the fleet's stats, summed over its pods, say 30 connected and configured.
func TestFleetSpreadOverNodes(t *testing.T) {
	prereq.Root(t, "a local cluster")
	require.NoError(t, local.Preflight())
	imagesDir, err := bins.ImagesDir("")
	require.NoError(t, err)
	home, err := os.MkdirTemp("", "mc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	cp, err := subject.Parse("reference")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	const clients = 30
	spec := Spec{Name: "flt", Nodes: 2, ControlPlane: cp, CP: subject.Placement{Node: 1},
		ADSLoad: ADSLoad{Clients: clients, Pods: 3, Nodes: []int{1, 2}}}
	m, err := Up(ctx, local.Substrate{Home: home, ImagesDir: imagesDir}, spec, testRecorder{t})
	if m != nil {
		t.Cleanup(func() {
			require.NoError(t, m.Down(context.Background()))
			assert.Empty(t, local.Leftovers(home, m.Cluster.Name()), "the cluster went down without leftovers")
		})
	}
	require.NoError(t, err)
	require.NotNil(t, m.Fleet)
	require.Len(t, m.Fleet.Pods, 3)

	// Each pod on the node it was pinned to: the fleet runs on both.
	nodes := m.Cluster.Nodes()
	onNodes := map[string]bool{}
	for _, p := range m.Fleet.Pods {
		pods, err := m.Client.CoreV1().Pods(m.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + p.Name})
		require.NoError(t, err)
		require.Len(t, pods.Items, 1, p.Name)
		assert.Equal(t, nodes[p.Node-1], pods.Items[0].Spec.NodeName, "%s pinned to node %d", p.Name, p.Node)
		onNodes[pods.Items[0].Spec.NodeName] = true
	}
	assert.Len(t, onNodes, 2, "the fleet's pods sit on both nodes")

	// The fleet's figures, summed over its pods.
	st, err := m.Fleet.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, clients, st.Total.Clients)
	assert.EqualValues(t, clients, st.Total.Connected)
	assert.EqualValues(t, clients, st.Total.Configured)
	assert.Zero(t, st.Total.NACKs)
	for i, p := range st.Pods {
		assert.Positive(t, p.RSSBytes, "pod %d's RSS", i)
	}
	assert.Equal(t, st.Pods[0].RSSBytes+st.Pods[1].RSSBytes+st.Pods[2].RSSBytes, st.Total.RSSBytes)
	t.Log(m.Fleet.Summary(st))

	// The control plane serves 30 distinct proxies, adsload-0 … adsload-29, as one pod of 30
	// clients would have given it.
	pod, err := m.ControlPlanePod(ctx)
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{DialContext: m.Cluster.Dialer(1)}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get(cp.AdminURL(pod) + "/debug/syncz")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var syncz []struct {
		Proxy string `json:"proxy"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&syncz))
	proxies := map[string]bool{}
	for _, s := range syncz {
		proxies[s.Proxy] = true
	}
	assert.Len(t, proxies, clients, "distinct proxies at the control plane")
	for i := range clients {
		ns := m.Namespace
		id := fmt.Sprintf("sidecar~10.100.%d.%d~adsload-%d.%s~%s.svc.cluster.local", i>>8, i&0xff, i, ns, ns)
		assert.True(t, proxies[id], id)
	}
}
