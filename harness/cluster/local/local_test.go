package local

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/netns"
	"github.com/meshchaos/meshchaos/images"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/workloads/echo"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "mc1", "my-cluster", "abcdefghij0123456789"} {
		assert.NoError(t, ValidateName(ok), ok)
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", "abcdefghij0123456789x", "a/b"} {
		assert.Error(t, ValidateName(bad), bad)
	}
	assert.True(t, isNodeNetnsOf("meshchaos-x-n12", "meshchaos-x-n"))
	assert.False(t, isNodeNetnsOf("meshchaos-x-n1b", "meshchaos-x-n"))
	assert.False(t, isNodeNetnsOf("meshchaos-x-n", "meshchaos-x-n"))
}

func TestLayoutKeepsClustersApart(t *testing.T) {
	a, b := layout{name: "a", home: "/h"}, layout{name: "ab", home: "/h"}
	assert.NotEqual(t, a.hubNetns(), b.hubNetns())
	assert.False(t, strings.HasPrefix(b.marker(), a.marker()), "one cluster's marker must not match another's paths")
	assert.NotEqual(t, a.cgroupRoot(), b.cgroupRoot())
	assert.Equal(t, "10.244.1.0/24", podCIDR(2))
	assert.Equal(t, "10.200.0.12", nodeIP(2).String())
}

// integration skips under MESHCHAOS_SKIP_INTEGRATION=1, checks what a cluster needs, and
// returns a fresh home and the images directory.
func integration(t *testing.T) (home, imagesDir string) {
	t.Helper()
	prereq.Integration(t)
	require.NoError(t, Preflight(), "the local substrate's integration tests need root, 'make deps' and 'make bins'")
	imagesDir, err := bins.ImagesDir("")
	require.NoError(t, err)
	// A short home keeps unix socket paths under the kernel's 108-byte limit.
	home, err = os.MkdirTemp("", "mc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	return home, imagesDir
}

// TestLocalCluster brings a real 2-node cluster up and checks what experiments rely on.
func TestLocalCluster(t *testing.T) {
	home, imagesDir := integration(t)
	name := fmt.Sprintf("t%d", os.Getpid()%100000)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	p := NewProvider(WithNodes(2), WithHome(home), WithImages(imagesDir), WithLogf(t.Logf))
	p.WithName(name)
	start := time.Now()
	kubeconfig, err := p.Create(ctx)
	require.NoError(t, err)
	t.Logf("2-node cluster up in %s", time.Since(start).Round(100*time.Millisecond))
	c := p.Cluster()
	torn := false
	t.Cleanup(func() {
		if !torn {
			_ = p.Destroy(context.Background())
		}
	})

	// The host-side kubeconfig (through the loopback forwarder) reaches the API.
	hostCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	hostCS, err := kubernetes.NewForConfig(hostCfg)
	require.NoError(t, err)
	nodes, err := hostCS.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, nodes.Items, 2)
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	require.NoError(t, err)

	t.Run("secrets are private", func(t *testing.T) {
		fi, err := os.Stat(c.Dir())
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the state directory is its owner's only")
		// Kubeconfigs, keys and the token file: readable by their owner only.
		var secrets int
		require.NoError(t, filepath.WalkDir(c.Dir(), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "pods" && filepath.Base(filepath.Dir(path)) == "kubelet" {
				// The pods' own volumes (service account tokens): kubelet sets their modes for
				// the containers; the state directory's 0700 keeps other host users out.
				return filepath.SkipDir
			}
			if !d.Type().IsRegular() {
				return nil
			}
			n := d.Name()
			if strings.HasPrefix(n, "kubeconfig") || strings.HasSuffix(n, ".key") || strings.Contains(n, "token") {
				secrets++
				info, err := d.Info()
				require.NoError(t, err)
				assert.Zero(t, info.Mode().Perm()&0o077, "%s is %s", path, info.Mode().Perm())
			}
			return nil
		}))
		assert.GreaterOrEqual(t, secrets, 4, "host and node kubeconfigs and the PKI keys were found")
		host, _, err := net.SplitHostPort(hostCfg.Host[len("https://"):])
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", host, "the host-side API forwarder listens on loopback only")
	})

	t.Run("pods reach neither etcd nor more of the API than RBAC grants", func(t *testing.T) {
		// etcd serves plaintext without authentication: it listens on the hub's loopback only,
		// where the apiserver is. From a node (where the pods are) the hub's address refuses.
		conn, err := c.Dialer(1)(ctx, "tcp", net.JoinHostPort(hubIP().String(), "2379"))
		if conn != nil {
			conn.Close()
		}
		assert.Error(t, err, "etcd must not be reachable from a node")
		// The apiserver is reachable there, and authorizes a pod's token with RBAC: the
		// default ServiceAccount may discover the API but not read Secrets.
		conn, err = c.Dialer(1)(ctx, "tcp", net.JoinHostPort(hubIP().String(), fmt.Sprint(APIServerPort)))
		require.NoError(t, err, "the apiserver is reachable from a node")
		conn.Close()
		require.Eventually(t, func() bool {
			_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		}, time.Minute, 200*time.Millisecond, "the default ServiceAccount exists")
		tok, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authv1.TokenRequest{}, metav1.CreateOptions{})
		require.NoError(t, err)
		podCfg := rest.AnonymousClientConfig(hostCfg)
		podCfg.BearerToken = tok.Status.Token
		podCS, err := kubernetes.NewForConfig(podCfg)
		require.NoError(t, err)
		_, err = podCS.Discovery().ServerVersion()
		require.NoError(t, err, "a ServiceAccount token authenticates")
		_, err = podCS.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "a pod's ServiceAccount may not list Secrets: %v", err)
		_, err = cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		assert.NoError(t, err, "the harness's admin token may")
	})

	t.Run("nodes reach no more of the API than the Node authorizer grants", func(t *testing.T) {
		// Node 1's own kubeconfigs, as its kubelet and kube-proxy use them: they name the
		// apiserver at the hub's address, so dial from the node's namespace, as they do.
		client := func(t *testing.T, kubeconfig string) kubernetes.Interface {
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			require.NoError(t, err)
			cfg.Dial = c.Dialer(1)
			cs, err := kubernetes.NewForConfig(cfg)
			require.NoError(t, err)
			return cs
		}
		n1, n2 := c.Nodes()[0], c.Nodes()[1]
		kubelet := client(t, c.l.nodeKubeconfig(1))
		_, err := kubelet.CoreV1().Nodes().Get(ctx, n1, metav1.GetOptions{})
		require.NoError(t, err, "a kubelet reads its own Node")
		relabel := []byte(`{"metadata":{"labels":{"meshchaos.io/relabelled-by":"n1"}}}`)
		_, err = kubelet.CoreV1().Nodes().Patch(ctx, n2, types.MergePatchType, relabel, metav1.PatchOptions{})
		assert.True(t, apierrors.IsForbidden(err), "NodeRestriction: node 1 may not relabel node 2: %v", err)

		// A Secret is the kubelet's to read only once a pod bound to its node references it:
		// RBAC grants system:nodes nothing, the Node authorizer grants exactly that.
		for _, name := range []string{"for-n1", "for-nobody"} {
			_, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"k": name},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "mounts-for-n1", Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName: n1,
				Containers: []corev1.Container{{
					Name: "echo", Image: images.Ref("echo"), ImagePullPolicy: corev1.PullNever,
					VolumeMounts: []corev1.VolumeMount{{Name: "s", MountPath: "/s"}},
				}},
				Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{
					Secret: &corev1.SecretVolumeSource{SecretName: "for-n1"}}}},
			},
		}
		_, err = cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = cs.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
			for _, name := range []string{"for-n1", "for-nobody"} {
				_ = cs.CoreV1().Secrets("default").Delete(context.Background(), name, metav1.DeleteOptions{})
			}
		})
		_, err = kube.WaitPod(ctx, cs, "default", pod.Name, time.Minute, func(p *corev1.Pod) (bool, error) {
			return p.Status.Phase == corev1.PodRunning, nil
		})
		require.NoError(t, err, "kubelet 1 runs a pod that mounts a Secret, as its node")
		_, err = kubelet.CoreV1().Secrets("default").Get(ctx, "for-n1", metav1.GetOptions{})
		assert.NoError(t, err, "node 1 reads the Secret its pod mounts")
		_, err = kubelet.CoreV1().Secrets("default").Get(ctx, "for-nobody", metav1.GetOptions{})
		assert.True(t, apierrors.IsForbidden(err), "node 1 may not read a Secret no pod of its references: %v", err)

		proxy := client(t, c.l.kubeProxyKubeconfig(1))
		_, err = proxy.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
		assert.NoError(t, err, "kube-proxy lists EndpointSlices")
		_, err = proxy.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "kube-proxy may not list Secrets: %v", err)
	})

	t.Run("echo service across nodes", func(t *testing.T) {
		svc := deployEcho(ctx, t, cs)
		seen := map[string]bool{}
		client := &http.Client{Transport: &http.Transport{DialContext: c.Dialer(1), DisableKeepAlives: true}, Timeout: 5 * time.Second}
		// kube-proxy adds the second endpoint on its next sync (minSyncPeriod 1s), so keep asking.
		deadline := time.Now().Add(30 * time.Second)
		for len(seen) < 2 && time.Now().Before(deadline) {
			r := getJSON[echo.Reply](t, client, "http://"+svc.Spec.ClusterIP+"/")
			seen[r.Pod] = true
			time.Sleep(50 * time.Millisecond)
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		require.NoError(t, err)
		nodesOf := map[string]bool{}
		for _, p := range pods.Items {
			nodesOf[p.Spec.NodeName] = true
		}
		assert.Len(t, nodesOf, 2, "one replica on each node")
		assert.Len(t, seen, 2, "traffic from node 1 to the ClusterIP reaches both replicas, across nodes")
	})

	t.Run("cluster DNS from a pod", func(t *testing.T) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		require.NoError(t, err)
		require.NotEmpty(t, pods.Items)
		svc, err := cs.CoreV1().Services("default").Get(ctx, "echo", metav1.GetOptions{})
		require.NoError(t, err)
		client := &http.Client{Transport: &http.Transport{DialContext: c.Dialer(2)}, Timeout: 10 * time.Second}
		for _, host := range []string{"echo.default.svc.cluster.local", "echo"} {
			r := getJSON[echo.LookupReply](t, client, fmt.Sprintf("http://%s:8080/lookup?host=%s", pods.Items[0].Status.PodIP, host))
			assert.Equal(t, []string{svc.Spec.ClusterIP}, r.Addrs, "pod resolves %s through CoreDNS", host)
		}
	})

	t.Run("kubelets answer the apiserver and whom it authorizes, not whoever reaches them", func(t *testing.T) {
		// Port 10250 lists pods, reads logs and runs commands in them. A pod reaches every
		// node's address, its own node's too: it must get nothing there without credentials,
		// and no more with its ServiceAccount's than the apiserver's authorization grants.
		pods, err := filepath.Glob(filepath.Join(c.l.nodeDir(2), "ctr-state", "io.containerd.grpc.v1.cri", "netns", "cni-*"))
		require.NoError(t, err)
		require.NotEmpty(t, pods, "node 2 runs pods (echo, CoreDNS)")
		fromPod, fromHub := netns.Dialer(pods[0]), netns.Dialer(c.l.hubNetnsPath())
		kubeletGet := func(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), node int, token string) int {
			t.Helper()
			// Kubelets serve a self-signed certificate; what is tested is whom they answer.
			tr := &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec
			defer tr.CloseIdleConnections()
			url := "https://" + net.JoinHostPort(nodeIP(node).String(), "10250") + "/pods"
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			require.NoError(t, err)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
			require.NoError(t, err, "GET %s", url)
			resp.Body.Close()
			return resp.StatusCode
		}
		assert.Equal(t, http.StatusUnauthorized, kubeletGet(t, fromHub, 1, ""), "anonymous, from the hub")
		assert.Equal(t, http.StatusUnauthorized, kubeletGet(t, fromPod, 1, ""), "anonymous, from a pod on another node")
		assert.Equal(t, http.StatusUnauthorized, kubeletGet(t, fromPod, 2, ""), "anonymous, from a pod on the same node")
		// A pod's token authenticates (TokenReview) and is denied (SubjectAccessReview for
		// nodes/proxy, which RBAC does not grant it); the admin's is allowed, so the kubelet
		// does ask the apiserver rather than refuse everyone.
		tok, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authv1.TokenRequest{}, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, http.StatusForbidden, kubeletGet(t, fromPod, 2, tok.Status.Token), "a pod's ServiceAccount token")
		assert.Equal(t, http.StatusOK, kubeletGet(t, fromHub, 1, c.RESTConfig().BearerToken), "the admin's token")

		// The apiserver still reaches them with its own client certificate, for the users it
		// has authorized: a pod's logs and an exec, as the harness uses them.
		echoPods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		require.NoError(t, err)
		require.NotEmpty(t, echoPods.Items)
		for _, p := range echoPods.Items {
			_, err := cs.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			assert.NoError(t, err, "pod %s's logs through the apiserver (node %s)", p.Name, p.Spec.NodeName)
		}
		p := echoPods.Items[0]
		req := hostCS.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(p.Name).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Command: []string{"/meshchaos", "version"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
		ex, err := remotecommand.NewWebSocketExecutor(hostCfg, "GET", req.URL().String())
		require.NoError(t, err)
		var out, errOut bytes.Buffer
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
		require.NoError(t, err, "exec in pod %s through the apiserver: %s", p.Name, errOut.String())
		assert.NotEmpty(t, out.String(), "the exec's output")
	})

	t.Run("kernel OOM kill and restart", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "oom", Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "hog", Image: images.Ref("echo"), ImagePullPolicy: corev1.PullNever,
				Args:      []string{"--ballast-mb", "96"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi")}},
			}}},
		}
		_, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		var st corev1.ContainerStatus
		require.Eventually(t, func() bool {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "oom", metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) == 0 {
				return false
			}
			st = p.Status.ContainerStatuses[0]
			term := st.LastTerminationState.Terminated
			if term == nil {
				term = st.State.Terminated
			}
			return term != nil && term.Reason == "OOMKilled" && st.RestartCount >= 1
		}, 2*time.Minute, 500*time.Millisecond, "container over its memory limit is OOMKilled by the kernel and restarted by kubelet")
		t.Logf("oom: restarts=%d last=%+v", st.RestartCount, st.LastTerminationState.Terminated)
	})

	t.Run("kube-proxy CPU quota hook", func(t *testing.T) {
		g, err := c.KubeProxyCgroup(2)
		require.NoError(t, err)
		assert.Contains(t, g.Procs(), c.KubeProxyPid(2), "kube-proxy runs in its own cgroup")
		require.NoError(t, g.SetCPUQuota(0.05))
		q, err := g.CPUQuota()
		require.NoError(t, err)
		assert.InDelta(t, 0.05, q, 0.001)
		require.NoError(t, g.SetCPUQuota(0))
		_, err = c.KubeProxyCgroup(3)
		assert.Error(t, err)
	})

	t.Run("second cluster does not collide; same name refused", func(t *testing.T) {
		_, err := Up(ctx, Config{Name: name, Nodes: 1, Home: home, ImagesDir: imagesDir})
		require.ErrorIs(t, err, ErrNameInUse)
		assert.Empty(t, Leftovers(home, name+"x"))

		b, err := Up(ctx, Config{Name: name + "b", Nodes: 1, Home: home, ImagesDir: imagesDir, Logf: t.Logf})
		require.NoError(t, err)
		bcs, err := kubernetes.NewForConfig(b.RESTConfig())
		require.NoError(t, err)
		_, err = bcs.CoreV1().Services("default").Get(ctx, "echo", metav1.GetOptions{})
		assert.Error(t, err, "the second cluster has its own apiserver")
		assert.NotEqual(t, c.KubeconfigPath(), b.KubeconfigPath())
		start := time.Now()
		require.NoError(t, b.Down(ctx))
		t.Logf("1-node teardown in %s", time.Since(start).Round(100*time.Millisecond))
		assert.Empty(t, Leftovers(home, name+"b"))
		// The first cluster is untouched.
		_, err = cs.CoreV1().Services("default").Get(ctx, "echo", metav1.GetOptions{})
		assert.NoError(t, err)
	})

	start = time.Now()
	require.NoError(t, p.Destroy(ctx))
	torn = true
	t.Logf("2-node teardown in %s", time.Since(start).Round(100*time.Millisecond))
	assert.Empty(t, Leftovers(home, name), "teardown leaves no process, namespace, mount, cgroup or state")
	for _, n := range []string{"meshchaos-" + name, "meshchaos-" + name + "-n1", "meshchaos-" + name + "-n2"} {
		_, err := os.Stat("/var/run/netns/" + n)
		assert.True(t, os.IsNotExist(err), "namespace %s removed", n)
	}
	_, err = os.Stat("/sys/fs/cgroup/memory/meshchaos/" + name)
	assert.True(t, os.IsNotExist(err), "memory cgroup removed")
}

func deployEcho(ctx context.Context, t *testing.T, cs kubernetes.Interface) *corev1.Service {
	t.Helper()
	labels := map[string]string{"app": "echo"}
	two := int32(2)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: NodeLabel, WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []corev1.Container{{
						Name: "echo", Image: images.Ref("echo"), ImagePullPolicy: corev1.PullNever,
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
	_, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Port: 80, TargetPort: intstr.FromInt32(8080)},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, kube.WaitDeploymentReady(ctx, cs, "default", "echo", 2*time.Minute))
	return svc
}

func getJSON[T any](t *testing.T, c *http.Client, url string) T {
	t.Helper()
	var out T
	var last error
	// kube-proxy programs a new Service within its minSyncPeriod: allow it a moment.
	for i := 0; i < 50; i++ {
		resp, err := c.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				require.NoError(t, json.Unmarshal(b, &out), string(b))
				return out
			}
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("GET %s: %v", url, last)
	return out
}
