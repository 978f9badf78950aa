package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/workloads/adsload"
)

// The clients are divided as evenly as can be, each pod's named from the previous pod's last
// on (distinct proxies, as one pod would give them), the pods pinned round-robin over Nodes.
func TestFleetPodsDivideTheClients(t *testing.T) {
	pods := fleetPods(ADSLoad{Clients: 10, Node: 2, Pods: 3, Nodes: []int{2, 1}})
	assert.Equal(t, []FleetPod{
		{Name: "adsload-0", Node: 2, First: 0, Clients: 4},
		{Name: "adsload-1", Node: 1, First: 4, Clients: 3},
		{Name: "adsload-2", Node: 2, First: 7, Clients: 3},
	}, pods)
	// One pod is the mesh's adsload as it always was.
	for _, one := range []int{0, 1} {
		assert.Equal(t, []FleetPod{{Name: "adsload", Node: 2, Clients: 30}}, fleetPods(ADSLoad{Clients: 30, Node: 2, Pods: one}))
	}
	// Without Nodes every pod is on Node.
	for _, p := range fleetPods(ADSLoad{Clients: 4, Node: 1, Pods: 4}) {
		assert.Equal(t, 1, p.Node)
		assert.Equal(t, 1, p.Clients)
	}
	assert.Len(t, fleetPods(ADSLoad{Clients: 10000, Pods: 3}), 3)
	total := 0
	for _, p := range fleetPods(ADSLoad{Clients: 10000, Pods: 3}) {
		assert.Equal(t, total, p.First)
		total += p.Clients
	}
	assert.Equal(t, 10000, total)
}

func TestValidateFleet(t *testing.T) {
	cp, err := subject.Parse("reference")
	require.NoError(t, err)
	s := Spec{Nodes: 2, ControlPlane: cp, ADSLoad: ADSLoad{Clients: 30, Pods: 3, Nodes: []int{1, 2}}}
	require.NoError(t, s.Validate())
	s.ADSLoad.Nodes = []int{1, 3}
	assert.ErrorContains(t, s.Validate(), "adsload on node 3: the cluster has 2 node(s)")
	s.ADSLoad = ADSLoad{Clients: 2, Pods: 3}
	assert.ErrorContains(t, s.Validate(), "adsload pods 3: want 1 to the clients' number (2)")
	s.ADSLoad = ADSLoad{Clients: 2, Pods: -1}
	assert.ErrorContains(t, s.Validate(), "adsload pods -1")
}

// pod serves an adsload pod's /stats and /tracked (nil: answers 500).
func pod(t *testing.T, st *adsload.Stats, tr *adsload.Tracked) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v any
		switch {
		case r.URL.Path == "/stats" && st != nil:
			v = st
		case r.URL.Path == "/tracked" && tr != nil:
			v = tr
		default:
			http.Error(w, "broken", http.StatusInternalServerError)
			return
		}
		require.NoError(t, json.NewEncoder(w).Encode(v))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Every figure of the fleet is the sum or the merge over its pods; a pod that cannot be read
// fails the read, naming the pod, never a fleet measured without it.
func TestFleetAggregatesItsPods(t *testing.T) {
	ctx := context.Background()
	r := func(n int) []adsload.Receipt { return []adsload.Receipt{{Endpoints: n}} }
	f := &Fleet{Pods: []FleetPod{
		{Name: "adsload-0", Node: 2, First: 0, Clients: 2, URL: pod(t,
			&adsload.Stats{Clients: 2, Connected: 2, Configured: 2, ACKs: 8, NACKs: 1, RSSBytes: 30 << 20},
			&adsload.Tracked{Track: "flap", Clients: [][]adsload.Receipt{r(0), r(1)}})},
		{Name: "adsload-1", Node: 1, First: 2, Clients: 1, URL: pod(t,
			&adsload.Stats{First: 2, Clients: 1, Connected: 1, Configured: 0, ACKs: 3, RSSBytes: 20 << 20},
			&adsload.Tracked{Track: "flap", Clients: [][]adsload.Receipt{r(2)}})},
	}}
	defer f.Close()
	assert.Equal(t, 3, f.Clients())
	st, err := f.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, st.Total.Clients)
	assert.EqualValues(t, 3, st.Total.Connected)
	assert.EqualValues(t, 2, st.Total.Configured)
	assert.EqualValues(t, 11, st.Total.ACKs)
	assert.EqualValues(t, 1, st.Total.NACKs)
	assert.EqualValues(t, 50<<20, st.Total.RSSBytes)
	require.Len(t, st.Pods, 2)
	assert.EqualValues(t, 20<<20, st.Pods[1].RSSBytes, "each pod's RSS")
	assert.Equal(t, "3 ADS clients on 2 pod(s): 3 connected, 2 configured, 11 ACKs, 1 NACKs, RSS 50.0 MiB in all; "+
		"adsload-0 (node 2): 2 clients, 2 configured, RSS 30.0 MiB; adsload-1 (node 1): 1 clients, 0 configured, RSS 20.0 MiB", f.Summary(st))
	at := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	assert.Equal(t, results.Fleet{At: at, Clients: 3, Connected: 3, Configured: 2, RSSBytes: 50 << 20, RSSBytesPerClient: float64(50<<20) / 3,
		Pods: []results.FleetPod{{Name: "adsload-0", Node: 2, Clients: 2, Configured: 2, RSSBytes: 30 << 20}, {Name: "adsload-1", Node: 1, Clients: 1, RSSBytes: 20 << 20}}},
		f.Result(st, at), "the summary's fleet: the totals and every pod, named and placed")
	tr, err := f.Tracked(ctx)
	require.NoError(t, err)
	assert.Equal(t, &adsload.Tracked{Track: "flap", Clients: [][]adsload.Receipt{r(0), r(1), r(2)}}, tr, "every client once, in the fleet's order")

	// One pod out of reach: no figure at all.
	f.Pods = append(f.Pods, FleetPod{Name: "adsload-2", First: 3, Clients: 1, URL: pod(t, nil, nil)})
	_, err = f.Stats(ctx)
	assert.ErrorContains(t, err, "adsload pod adsload-2: GET ")
	_, err = f.Tracked(ctx)
	assert.ErrorContains(t, err, "adsload pod adsload-2: GET ")

	// A pod that runs other clients than the fleet gave it (a stale pod) is no part of it.
	f.Pods[2].URL = pod(t, &adsload.Stats{First: 0, Clients: 1}, &adsload.Tracked{Track: "flap", Clients: [][]adsload.Receipt{r(0), r(0)}})
	_, err = f.Stats(ctx)
	assert.ErrorContains(t, err, "adsload pod adsload-2 runs clients 0 to 0, not 3 to 3")
	_, err = f.Tracked(ctx)
	assert.ErrorContains(t, err, "adsload pod adsload-2 has the receipts of 2 clients, not 1")
}

// lines is a Recorder that keeps its log lines.
type lines struct {
	mu  sync.Mutex
	got []string
}

func (l *lines) Event(kind, object, detail string) {}
func (l *lines) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf(format, args...))
}
func (l *lines) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.got) == 0 {
		return ""
	}
	return l.got[len(l.got)-1]
}

// While a fleet becomes Ready its progress is logged: the clients served so far over the pods
// that answer, and the control plane's restarts with why (one OOM-killed while a large fleet
// connects would otherwise show only as the deadline's error).
func TestFleetProgressSaysWhatIsServedAndWhyTheControlPlaneRestarted(t *testing.T) {
	cp, err := subject.Parse("reference")
	require.NoError(t, err)
	cpPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Namespace: cp.Namespace(), Labels: labels.Set(mustSelector(t, cp.Selector()))},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: cp.Container(), RestartCount: 4,
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}}}
	m := &Mesh{Spec: Spec{ControlPlane: cp}, Client: fake.NewClientset(cpPod), Namespace: "default",
		Namespaces: []string{"default", cp.Namespace()}}
	pods := []FleetPod{
		{Name: "adsload-0", Clients: 3, URL: pod(t, &adsload.Stats{Clients: 3, Connected: 3, Configured: 2}, nil)},
		{Name: "adsload-1", First: 3, Clients: 2, URL: pod(t, nil, nil)}, // not answering yet
	}
	rec := &lines{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.fleetProgress(ctx, rec, pods, time.Now(), 10*time.Millisecond)
	require.Eventually(t, func() bool { return rec.last() != "" }, 10*time.Second, 10*time.Millisecond)
	assert.Regexp(t, `^adsload: 2 of 5 clients served, 3 connected \(1 of 2 pod\(s\) read\), \d+s after the deployments were applied; `+
		`the control plane's `+cp.Container()+` container restarted 4 time\(s\), last OOMKilled \(exit 137\)$`, rec.last())

	// A control plane the run does not own (installed before it) is not read.
	m.Namespaces = []string{"default"}
	assert.Zero(t, m.controlPlaneRestarts(ctx).count)
}

func mustSelector(t *testing.T, s string) map[string]string {
	set, err := labels.ConvertSelectorToLabelsMap(s)
	require.NoError(t, err)
	return set
}
