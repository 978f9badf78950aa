package chaos

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
)

// listed counts the ServiceEntries the fake apiserver holds in ns.
func listed(t *testing.T, ic *istiofake.Clientset, ns string) int {
	t.Helper()
	l, err := ic.NetworkingV1().ServiceEntries(ns).List(context.Background(), metav1.ListOptions{LabelSelector: configLoadLabel})
	require.NoError(t, err)
	return len(l.Items)
}

// The load goes on in batches after Inject and ends after the batch in which the stop condition
// began to hold: the condition here watches the apiserver's own count.
func TestConfigLoadRunsUntilTheStopCondition(t *testing.T) {
	ic := istiofake.NewSimpleClientset()
	l := &ConfigLoad{Istio: ic, Namespace: "load", Batch: 40, Max: 1000, Endpoints: 3,
		Stop: func(ctx context.Context) (bool, error) { return listed(t, ic, "load") >= 100, nil }}
	assert.Equal(t, "config-load/load", l.Name())
	ev, err := l.Inject(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 40.0, ev.Values["created"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := l.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, 120, res.Created, "three batches: 40, 80, then 120 ≥ 100")
	assert.True(t, res.Stopped)
	assert.Equal(t, "stop condition held", res.Reason)
	assert.Equal(t, 120, listed(t, ic, "load"))

	se, err := ic.NetworkingV1().ServiceEntries("load").Get(ctx, "config-load-7", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, se.Spec.Endpoints, 3)
	assert.Equal(t, "10.16.0.21", se.Spec.Endpoints[0].Address, "entry 7's first endpoint is address 21")
	assert.Equal(t, []string{"config-load-7.load.test"}, se.Spec.Hosts)

	_, err = l.Inject(context.Background())
	assert.ErrorContains(t, err, "already loading")
}

func TestConfigLoadStopsAtMaxAndOnErrors(t *testing.T) {
	ic := istiofake.NewSimpleClientset()
	l := &ConfigLoad{Istio: ic, Namespace: "a", Batch: 30, Max: 70, Endpoints: 1}
	_, err := l.Inject(context.Background())
	require.NoError(t, err)
	res, err := l.Wait(context.Background())
	require.NoError(t, err)
	assert.Equal(t, LoadResult{Created: 70, Reason: "max reached", At: res.At}, res)
	assert.Equal(t, 70, listed(t, ic, "a"))

	// Leftovers of a load that was not cleared are refused.
	_, err = (&ConfigLoad{Istio: ic, Namespace: "a"}).Inject(context.Background())
	assert.ErrorContains(t, err, "not cleared")

	boom := errors.New("boom")
	l = &ConfigLoad{Istio: ic, Namespace: "b", Batch: 10, Endpoints: 1, Stop: func(context.Context) (bool, error) { return false, boom }}
	_, err = l.Inject(context.Background())
	require.NoError(t, err)
	res, err = l.Wait(context.Background())
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, "failed", res.Reason)

	_, err = (&ConfigLoad{Istio: ic, Namespace: "c", Max: 1 << 30}).Inject(context.Background())
	assert.ErrorContains(t, err, "lower Max or Endpoints")
	_, err = (&ConfigLoad{Istio: ic, Namespace: "c", Batch: -1}).Inject(context.Background())
	assert.ErrorContains(t, err, "positive numbers")
	_, err = (&ConfigLoad{Istio: ic, Namespace: "c"}).Wait(context.Background())
	assert.ErrorContains(t, err, "call Inject first")
}

func TestLoadAddressesStayClearOfClusterRanges(t *testing.T) {
	assert.Equal(t, "10.16.0.0", loadAddress(0))
	assert.Equal(t, "10.16.1.0", loadAddress(256))
	assert.Equal(t, "10.95.255.255", loadAddress(maxLoadEndpoints-1))
}

// Against a real apiserver with the Istio CRDs: the load stops in the batch where the condition
// began to hold, and Clear's collection delete leaves none.
func TestConfigLoadOnAPIServer(t *testing.T) {
	s := apiserver.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := kube.InstallCRDs(ctx, s.RESTConfig(), crds.Istio)
	require.NoError(t, err)
	kc, err := kubernetes.NewForConfig(s.RESTConfig())
	require.NoError(t, err)
	_, err = kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "load"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	ic, err := istioclient.NewForConfig(s.RESTConfig())
	require.NoError(t, err)
	count := func() int {
		l, err := ic.NetworkingV1().ServiceEntries("load").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		return len(l.Items)
	}

	l := &ConfigLoad{Istio: ic, Namespace: "load", Batch: 50, Max: 1000, Endpoints: 10,
		Stop: func(ctx context.Context) (bool, error) { return count() >= 120, nil }}
	ev, err := l.Inject(ctx)
	require.NoError(t, err)
	t.Log(ev.Summary)
	assert.Equal(t, 50.0, ev.Values["created"])
	res, err := l.Wait(ctx)
	require.NoError(t, err)
	assert.True(t, res.Stopped)
	assert.Equal(t, 150, res.Created, "batches of 50: the condition first holds at 150")
	assert.Equal(t, 150, count())

	ev, err = l.Clear(ctx)
	require.NoError(t, err)
	t.Log(ev.Summary)
	assert.Zero(t, count(), "Clear deletes every ServiceEntry it created")

	// Without the CRD's namespace the error says what to do.
	_, err = (&ConfigLoad{Istio: ic, Namespace: "missing", Batch: 1, Max: 1}).Inject(ctx)
	assert.ErrorContains(t, err, "create namespace missing")
}
