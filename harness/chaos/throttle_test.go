package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/images"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

// TestKubeProxyThrottleDelaysRuleRemoval reproduces the incident's precondition on a real
// cluster: with kube-proxy throttled, a deleted pod's IP stays in the node's iptables rules
// longer than without, and the injector's evidence shows the kernel throttled it.
func TestKubeProxyThrottleDelaysRuleRemoval(t *testing.T) {
	prereq.Integration(t)
	require.NoError(t, local.Preflight())
	imgs, err := bins.ImagesDir("")
	require.NoError(t, err)
	home, err := os.MkdirTemp("", "mc")
	require.NoError(t, err)
	defer os.RemoveAll(home)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := local.Up(ctx, local.Config{Name: fmt.Sprintf("kp%d", os.Getpid()%100000), Nodes: 1, Home: home,
		ImagesDir: imgs, Logf: t.Logf})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Down(context.Background())) }()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	require.NoError(t, err)
	_, err = cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	rules := ProxyRules{Cluster: c, Node: 1}

	// removalLag starts a pod, waits for its rule, deletes the pod and times the rule's removal.
	removalLag := func(name string) time.Duration {
		_, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "echo"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "echo", Image: images.Ref("echo"), ImagePullPolicy: corev1.PullNever,
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}},
			}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		var ip string
		require.Eventually(t, func() bool {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.PodIP == "" {
				return false
			}
			ip = p.Status.PodIP
			eps, err := rules.Endpoints(ctx)
			return err == nil && eps[ip+":8080"]
		}, time.Minute, 100*time.Millisecond, "kube-proxy programs the new endpoint")
		zero := int64(0)
		deleted := time.Now()
		require.NoError(t, cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
		gone, err := rules.WaitGone(ctx, ip, 50*time.Millisecond)
		require.NoError(t, err)
		return gone.Sub(deleted)
	}

	baseline := removalLag("base")
	g, err := c.KubeProxyCgroup(1)
	require.NoError(t, err)
	th := &CPUThrottle{Target: "kube-proxy/n1", Group: g, CPUs: 0.002}
	ev, err := th.Inject(ctx)
	require.NoError(t, err)
	assert.InDelta(t, 0.002, ev.Values["quotaCPUs"], 0.0001)
	throttled := removalLag("slow")
	ev, err = th.Clear(ctx)
	require.NoError(t, err)
	t.Logf("rule removal lag: %s unthrottled, %s throttled; %s", baseline.Round(time.Millisecond), throttled.Round(time.Millisecond), ev.Summary)
	assert.Greater(t, ev.Values["throttledPeriods"], 0.0, "the kernel throttled kube-proxy")
	assert.Greater(t, throttled, baseline, "a throttled kube-proxy removes a dead endpoint later")
	q, err := g.CPUQuota()
	require.NoError(t, err)
	assert.Zero(t, q, "Clear lifts the quota")
}

// TestCPUThrottleRestoresTheQuotaItFound: a pod's cgroup may have its own CPU limit; clearing
// the throttle must give that back, not lift every limit.
func TestCPUThrottleRestoresTheQuotaItFound(t *testing.T) {
	prereq.Root(t, "creates a cgroup")
	g, err := cgroup.Create(fmt.Sprintf("/meshchaos-test-throttle-%d", os.Getpid()))
	require.NoError(t, err)
	defer g.Remove(5 * time.Second)
	require.NoError(t, g.SetCPUQuota(0.5))
	th := &CPUThrottle{Target: "test", Group: g, CPUs: 0.05}
	ev, err := th.Inject(context.Background())
	require.NoError(t, err)
	assert.InDelta(t, 0.05, ev.Values["quotaCPUs"], 0.001)
	got, err := g.CPUQuota()
	require.NoError(t, err)
	assert.InDelta(t, 0.05, got, 0.001)
	_, err = th.Clear(context.Background())
	require.NoError(t, err)
	got, err = g.CPUQuota()
	require.NoError(t, err)
	assert.InDelta(t, 0.5, got, 0.001, "the limit the group had before")

	_, err = (&CPUThrottle{Target: "test", Group: g}).Inject(context.Background())
	assert.ErrorContains(t, err, "CPUs must be > 0")
}
