package chaos

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/prereq"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/workloads/manifests"
)

// shared is the package's one 1-node local cluster, brought up by the first integration test
// that needs it and torn down by TestMain after the last test.
var shared struct {
	once sync.Once
	home string
	c    *local.Cluster
	cs   kubernetes.Interface
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := shared.c.Down(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "tear down the shared cluster: %v\n", err)
			code = 1
		}
		cancel()
	}
	if shared.home != "" {
		_ = os.RemoveAll(shared.home)
	}
	os.Exit(code)
}

// sharedCluster returns the shared cluster and a namespace of the test's own (deleted at its
// end). It skips under MESHCHAOS_SKIP_INTEGRATION=1; a failed bring-up fails every test asking.
func sharedCluster(t *testing.T, ns string) (*local.Cluster, kubernetes.Interface) {
	t.Helper()
	prereq.Integration(t)
	shared.once.Do(func() {
		if shared.err = local.Preflight(); shared.err != nil {
			return
		}
		if shared.home, shared.err = os.MkdirTemp("", "mc"); shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// The cluster outlives this test: log to stderr, not to t.
		logf := func(format string, args ...any) {
			if testing.Verbose() {
				fmt.Fprintf(os.Stderr, "cluster: "+format+"\n", args...)
			}
		}
		shared.c, shared.err = local.Up(ctx, local.Config{Name: fmt.Sprintf("ch%d", os.Getpid()%100000), Nodes: 1,
			Home: shared.home, ImagesDir: os.Getenv("MESHCHAOS_IMAGES"), Logf: logf})
		if shared.err == nil {
			shared.cs, shared.err = kubernetes.NewForConfig(shared.c.RESTConfig())
		}
	})
	require.NoError(t, shared.err, "shared local cluster")
	ctx := context.Background()
	_, err := shared.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, shared.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}))
	})
	return shared.c, shared.cs
}

// deployEcho applies workloads/manifests' echo (Deployment + Service "echo", app=echo, readiness
// probe on /ready every second) into ns and waits until it is available.
func deployEcho(t *testing.T, c *local.Cluster, cs kubernetes.Interface, ns string, replicas int) {
	t.Helper()
	yaml, err := manifests.Render("echo", manifests.Values{Substrate: manifests.Local(), Namespace: ns, Replicas: replicas})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = kube.Apply(ctx, c.RESTConfig(), yaml)
	require.NoError(t, err)
	require.NoError(t, kube.WaitDeploymentReady(ctx, cs, ns, "echo", 2*time.Minute))
}
