package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"
)

// BenchmarkServiceEntryApply: the harness's bulk path (ServiceEntries.Create, as the experiments
// use it) creating 5000 ServiceEntries × 10 endpoints in a real local etcd + kube-apiserver, per
// iteration. Reports ServiceEntries created per second, and the CPU each process spent per
// ServiceEntry (this one: the harness's client; kube-apiserver; etcd): on a shared 2-core machine
// the rate is at most 2 cores over their sum.
func BenchmarkServiceEntryApply(b *testing.B) { benchApply(b, crds.Istio) }

// BenchmarkServiceEntryApplyNoCEL is BenchmarkServiceEntryApply with the Istio CRDs' CEL
// validation rules (x-kubernetes-validations) removed: not what any cluster runs, but it tells
// how much of kube-apiserver's CPU per ServiceEntry the rules cost.
func BenchmarkServiceEntryApplyNoCEL(b *testing.B) {
	objs, err := kube.Decode(crds.Istio)
	if err != nil {
		b.Fatal(err)
	}
	var docs []string
	for _, o := range objs {
		dropKey(o.Object, "x-kubernetes-validations")
		raw, err := json.Marshal(o.Object)
		if err != nil {
			b.Fatal(err)
		}
		docs = append(docs, string(raw))
	}
	benchApply(b, []byte(strings.Join(docs, "\n---\n")))
}

// dropKey deletes key from every map in v, at any depth.
func dropKey(v any, key string) {
	switch t := v.(type) {
	case map[string]any:
		delete(t, key)
		for _, x := range t {
			dropKey(x, key)
		}
	case []any:
		for _, x := range t {
			dropKey(x, key)
		}
	}
}

// benchApply creates ServiceEntries as BenchmarkServiceEntryApply says, with the CRDs crdYAML.
func benchApply(b *testing.B, crdYAML []byte) {
	const count = 5000
	s := apiserver.StartForTest(b)
	cfg := s.RESTConfig()
	ctx := context.Background()
	if _, err := kube.InstallCRDs(ctx, cfg, crdYAML); err != nil {
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
	var harnessCPU, apiCPU, etcdCPU time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g := ServiceEntries{Count: count, From: i * count, Namespace: "apply", Endpoints: 10}
		start := time.Now()
		h0, e0, a0 := selfCPU(b), serverCPU(b, s, false), serverCPU(b, s, true)
		if _, err := g.Create(ctx, cfg, nil, logf); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		harnessCPU += selfCPU(b) - h0
		apiCPU += serverCPU(b, s, true) - a0
		etcdCPU += serverCPU(b, s, false) - e0
	}
	n := float64(count * b.N)
	b.ReportMetric(n/total.Seconds(), "SE/s")
	b.ReportMetric(float64(harnessCPU.Microseconds())/1000/n, "harness-cpu-ms/SE")
	b.ReportMetric(float64(apiCPU.Microseconds())/1000/n, "apiserver-cpu-ms/SE")
	b.ReportMetric(float64(etcdCPU.Microseconds())/1000/n, "etcd-cpu-ms/SE")
}

// selfCPU is this process's user + system CPU time so far.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time kube-apiserver (api) or etcd has used so far.
func serverCPU(b *testing.B, s *apiserver.Server, api bool) time.Duration {
	etcd, apiCPU, err := s.CPU()
	if err != nil {
		b.Fatal(err)
	}
	if api {
		return apiCPU
	}
	return etcd
}
