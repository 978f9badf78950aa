package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshchaos/meshchaos/workloads/echo"
)

// fakeKubelet probes each pod's /ready and writes the Ready condition, as kubelet does, and
// counts the transitions it wrote.
type fakeKubelet struct {
	cs   *fake.Clientset
	urls map[string]string // pod name → server URL

	mu                  sync.Mutex
	toNotReady, toReady int
}

func (k *fakeKubelet) run(ctx context.Context) {
	for ctx.Err() == nil {
		for name, u := range k.urls {
			resp, err := http.Get(u + "/ready")
			if err != nil {
				continue
			}
			resp.Body.Close()
			k.set(ctx, name, resp.StatusCode == http.StatusOK)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (k *fakeKubelet) set(ctx context.Context, name string, ready bool) {
	k.mu.Lock() // held while writing, so counts() never lags what the API shows
	defer k.mu.Unlock()
	p, err := k.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil || podReady(p) == ready {
		return
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if _, err := k.cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return
	}
	if ready {
		k.toReady++
	} else {
		k.toNotReady++
	}
}

func (k *fakeKubelet) counts() (int, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.toNotReady, k.toReady
}

func runningPod(name, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Labels: map[string]string{"app": "echo"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "echo",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9090}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// Two echo servers behind fake pods: Inject switches them to flapping and returns on the first
// transition the API shows; Clear makes them steady, waits until both are Ready and reports
// exactly the transitions the kubelet wrote.
func TestEndpointFlapCountsTheAPIsTransitions(t *testing.T) {
	cs := fake.NewClientset(runningPod("echo-a", "10.244.0.5"), runningPod("echo-b", "10.244.0.6"))
	fc := &fakeCluster{node: "n1", addrs: map[string]string{}}
	kl := &fakeKubelet{cs: cs, urls: map[string]string{}}
	for name, ip := range map[string]string{"echo-a": "10.244.0.5", "echo-b": "10.244.0.6"} {
		srv := httptest.NewServer(echo.Handler(echo.Options{PodName: name}))
		defer srv.Close()
		fc.addrs[ip+":9090"] = srv.Listener.Addr().String()
		kl.urls[name] = srv.URL
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go kl.run(ctx)

	f := &EndpointFlap{Cluster: fc, Client: cs, Namespace: "default", Selector: "app=echo", Up: 100 * time.Millisecond, Down: 100 * time.Millisecond, Timeout: 10 * time.Second, Settle: 200 * time.Millisecond}
	assert.Equal(t, "endpoint-flap/default/app=echo", f.Name())
	ev, err := f.Inject(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2.0, ev.Values["pods"])
	assert.Greater(t, ev.Values["firstTransitionSeconds"], 0.05, "the first phase is Ready for Up")
	_, err = f.Inject(ctx)
	assert.ErrorContains(t, err, "already flapping")

	require.Eventually(t, func() bool { down, _ := kl.counts(); return down >= 4 }, 10*time.Second, 10*time.Millisecond, "the pods flap")
	ev, err = f.Clear(ctx)
	require.NoError(t, err)
	down, up := kl.counts()
	t.Log(ev.Summary)
	assert.Equal(t, float64(down), ev.Values["readyToNotReady"], "every NotReady the kubelet wrote was seen")
	assert.Equal(t, float64(up), ev.Values["notReadyToReady"], "every Ready the kubelet wrote was seen")
	assert.Equal(t, 2.0, ev.Values["readyPods"])
	for name := range kl.urls {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.True(t, podReady(p), "%s Ready after Clear", name)
	}
	ev, err = f.Clear(ctx)
	require.NoError(t, err, "a second Clear is harmless")
	assert.Contains(t, ev.Summary, "nothing to clear")
}

func TestEndpointFlapRefusesWhatCannotFlap(t *testing.T) {
	ctx := context.Background()
	plain := httptest.NewServer(http.NotFoundHandler()) // not echo: no /control
	defer plain.Close()
	cs := fake.NewClientset(runningPod("web", "10.244.0.7"))
	fc := &fakeCluster{node: "n1", addrs: map[string]string{"10.244.0.7:9090": plain.Listener.Addr().String()}}
	f := &EndpointFlap{Cluster: fc, Client: cs, Namespace: "default", Selector: "app=echo", Up: time.Second, Down: time.Second}
	_, err := f.Inject(ctx)
	assert.ErrorContains(t, err, "does it run echo")

	f.Selector = "app=none"
	_, err = f.Inject(ctx)
	assert.ErrorContains(t, err, "no running pod")

	f.Down = 0
	_, err = f.Inject(ctx)
	assert.ErrorContains(t, err, "set both above 0")
}

// The watch counts changes of pods it knew; a new pod's first state and a deleted pod are not
// transitions.
func TestReadinessObserveCountsOnlyChanges(t *testing.T) {
	w := &readinessWatch{ready: map[types.UID]bool{}, changed: make(chan struct{})}
	a := runningPod("a", "10.0.0.1")
	w.observe(a, false)
	notReady := a.DeepCopy()
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	w.observe(notReady, false)
	w.observe(notReady, false) // no change
	w.observe(a, false)
	b := runningPod("b", "10.0.0.2")
	b.Status.Conditions = nil
	w.observe(b, false)
	w.observe(a, true)
	c, _ := w.counts()
	assert.Equal(t, counts{toNotReady: 1, toReady: 1, pods: 1, readyPods: 0, first: c.first}, c)
	assert.Equal(t, "a", c.first.pod)
	assert.False(t, c.first.ready)
	assert.Equal(t, 9090, echoPort(a, 0))
	assert.Equal(t, 7000, echoPort(a, 7000))
	assert.Equal(t, 8080, echoPort(&corev1.Pod{}, 0))
}

// On a real cluster: the running echo pod flaps without a restart, its endpoint in the
// Service's EndpointSlice turns not-ready and ready again, and Clear leaves it Ready.
func TestEndpointFlapOnCluster(t *testing.T) {
	c, cs := sharedCluster(t, "flap")
	deployEcho(t, c, cs, "flap", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := &EndpointFlap{Cluster: c, Client: cs, Namespace: "flap", Selector: "app=echo", Up: 2 * time.Second, Down: 2 * time.Second}
	ev, err := f.Inject(ctx)
	require.NoError(t, err)
	t.Log(ev.Summary)
	assert.Equal(t, 1.0, ev.Values["pods"])

	// The data path sees it: the endpoint's ready flag in the EndpointSlice goes false, then true.
	endpointReady := func() (bool, bool) {
		slices, err := cs.DiscoveryV1().EndpointSlices("flap").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=echo"})
		if err != nil || len(slices.Items) == 0 || len(slices.Items[0].Endpoints) == 0 {
			return false, false
		}
		r := slices.Items[0].Endpoints[0].Conditions.Ready
		return r != nil && *r, true
	}
	require.Eventually(t, func() bool { r, ok := endpointReady(); return ok && !r }, 30*time.Second, 100*time.Millisecond, "the endpoint turns not-ready")
	require.Eventually(t, func() bool { r, ok := endpointReady(); return ok && r }, 30*time.Second, 100*time.Millisecond, "and ready again")

	ev, err = f.Clear(ctx)
	require.NoError(t, err)
	t.Log(ev.Summary)
	assert.GreaterOrEqual(t, ev.Values["readyToNotReady"], 1.0)
	assert.GreaterOrEqual(t, ev.Values["notReadyToReady"], 1.0)
	assert.Equal(t, 1.0, ev.Values["readyPods"])
	pods, err := cs.CoreV1().Pods("flap").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	assert.True(t, podReady(&pods.Items[0]), "Ready after Clear")
	assert.Zero(t, pods.Items[0].Status.ContainerStatuses[0].RestartCount, "flapping never restarted the container")
}
