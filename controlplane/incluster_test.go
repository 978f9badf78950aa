package controlplane_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"
	"github.com/meshchaos/meshchaos/internal/prereq"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
	"github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/images"
)

// TestInCluster deploys the control plane with its manifests into a real local cluster (image
// built by `make images`), waits for its readiness probe (the sync gate), and checks from node 1
// that it serves the cluster's real EndpointSlices: an echo Deployment's pod IPs.
func TestInCluster(t *testing.T) {
	prereq.Integration(t)
	require.NoError(t, local.Preflight(), "the in-cluster test needs root, 'make deps' and 'make bins'")
	imgs, err := bins.ImagesDir("")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(imgs, "controlplane.tar"))
	require.NoError(t, err, "no controlplane image: run 'make images'")
	home, err := os.MkdirTemp("", "mc") // short: unix socket paths
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := local.NewProvider(local.WithNodes(1), local.WithHome(home), local.WithImages(imgs), local.WithLogf(t.Logf))
	p.WithName(fmt.Sprintf("cp%d", os.Getpid()%100000))
	_, err = p.Create(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background()) })
	c := p.Cluster()
	cfg := c.RESTConfig()
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	// A workload with a Service: real pods, real EndpointSlices from the controller manager.
	labels := map[string]string{"app": "echo"}
	_, err = cs.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "echo", Image: images.Ref("echo"), ImagePullPolicy: corev1.PullNever,
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
		metav1.CreateOptions{})
	require.NoError(t, err)

	// The control plane, as the harness deploys it.
	_, err = kube.InstallCRDs(ctx, cfg, crds.Istio)
	require.NoError(t, err)
	data, err := manifests.ControlPlane(manifests.Params{SyncGate: true})
	require.NoError(t, err)
	_, err = kube.Apply(ctx, cfg, data)
	require.NoError(t, err)

	var cpIP string
	waitFor(t, 2*time.Minute, "control plane pod Ready (its readiness probe is the sync gate)", func() bool {
		pods, err := cs.CoreV1().Pods("meshchaos-system").List(ctx, metav1.ListOptions{LabelSelector: "app=meshchaos-controlplane"})
		if err != nil || len(pods.Items) != 1 {
			return false
		}
		for _, cond := range pods.Items[0].Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				cpIP = pods.Items[0].Status.PodIP
				return true
			}
		}
		return false
	})
	var echoIPs []string
	waitFor(t, 2*time.Minute, "echo pods ready", func() bool {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		if err != nil {
			return false
		}
		echoIPs = nil
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					echoIPs = append(echoIPs, p.Status.PodIP)
				}
			}
		}
		return len(echoIPs) == 2
	})

	// From node 1, as a sidecar would: CDS, then EDS with both echo pods on 8080.
	dial := c.Dialer(1)
	client, err := adsclient.Dial(ctx, net.JoinHostPort(cpIP, "15010"), "sidecar~10.244.0.99~probe.default~default.svc.cluster.local",
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) }))
	require.NoError(t, err)
	require.NoError(t, client.SetNames(resourcev3.ClusterType, nil))
	go client.Run()
	t.Cleanup(client.Close)
	cn := "outbound|80||echo.default.svc.cluster.local"
	waitFor(t, 30*time.Second, "echo cluster over CDS", func() bool { _, ok := client.Resources(resourcev3.ClusterType)[cn]; return ok })
	require.NoError(t, client.SetNames(resourcev3.EndpointType, []string{cn}))
	waitFor(t, 60*time.Second, "both echo pods over EDS", func() bool { return len(claEndpoints(t, client, cn)) == 2 })
	var got []string
	for _, e := range claEndpoints(t, client, cn) {
		sa := e.GetEndpoint().GetAddress().GetSocketAddress()
		require.Equal(t, uint32(8080), sa.GetPortValue())
		got = append(got, sa.GetAddress())
	}
	require.ElementsMatch(t, echoIPs, got)
}
