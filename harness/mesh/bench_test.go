package mesh

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
	"github.com/meshchaos/meshchaos/harness/kube"
)

// BenchmarkServiceEntryApply: the harness's bulk path (ServiceEntries.Create, as the experiments
// use it) creating 5000 ServiceEntries × 10 endpoints in a real local etcd + kube-apiserver, per
// iteration. Reports ServiceEntries created per second.
func BenchmarkServiceEntryApply(b *testing.B) {
	const count = 5000
	s := apiserver.StartForTest(b)
	cfg := s.RESTConfig()
	ctx := context.Background()
	if err := kube.InstallCRDs(ctx, cfg, crds()); err != nil {
		b.Fatalf("install CRDs: %v", err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apply"}}, metav1.CreateOptions{}); err != nil {
		b.Fatalf("create namespace: %v", err)
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g := ServiceEntries{Count: count, From: i * count, Namespace: "apply", Endpoints: 10}
		start := time.Now()
		if _, err := g.Create(ctx, cfg, nil, logf); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(count*b.N)/total.Seconds(), "SE/s")
}
