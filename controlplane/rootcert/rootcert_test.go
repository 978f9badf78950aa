package rootcert

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func namespace(name string, lbl map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}
}

// rootIn is the published root in ns ("" when there is no ConfigMap).
func rootIn(kc kubernetes.Interface, ns string) string {
	cm, err := kc.CoreV1().ConfigMaps(ns).Get(context.Background(), DefaultConfigMap, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return cm.Data[Key]
}

func waitRoot(t *testing.T, kc kubernetes.Interface, ns, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for rootIn(kc, ns) != want {
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s: root %q, want %q", ns, rootIn(kc, ns), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPublisherKeepsTheRootInSelectedNamespaces(t *testing.T) {
	const root = "-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n"
	run := map[string]string{"meshchaos.io/run": "r1"}
	kc := fake.NewClientset(namespace("a", run), namespace("other", nil), namespace("kube-system", run))
	p, err := New(Options{Client: kc, Selector: "meshchaos.io/run=r1", RootPEM: []byte(root),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	waitRoot(t, kc, "a", root)
	cm, err := kc.CoreV1().ConfigMaps("a").Get(ctx, DefaultConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "meshchaos-controlplane", cm.Labels["app"])

	// A namespace that appears later gets it; a deleted ConfigMap comes back; an edited one is
	// restored.
	_, err = kc.CoreV1().Namespaces().Create(ctx, namespace("b", run), metav1.CreateOptions{})
	require.NoError(t, err)
	waitRoot(t, kc, "b", root)
	require.NoError(t, kc.CoreV1().ConfigMaps("a").Delete(ctx, DefaultConfigMap, metav1.DeleteOptions{}))
	waitRoot(t, kc, "a", root)
	cm.Data[Key] = "tampered"
	cm.ResourceVersion = ""
	_, err = kc.CoreV1().ConfigMaps("a").Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitRoot(t, kc, "a", root)

	// Handled long before b appeared: unselected and Kubernetes' own namespaces get nothing.
	assert.Empty(t, rootIn(kc, "other"))
	assert.Empty(t, rootIn(kc, "kube-system"))
}

func TestPublisherRefusesABadSelector(t *testing.T) {
	_, err := New(Options{Client: fake.NewClientset(), Selector: "a=b=c", RootPEM: []byte("x")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "meshchaos.io/run=NAME")
}
