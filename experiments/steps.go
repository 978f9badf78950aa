package experiments

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apinet "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	cpmanifests "github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
)

// applyPinned applies manifests with every Deployment's pods pinned to node k (the local
// substrate labels nodes meshchaos.io/node=K): experiments put the control plane and the
// proxies on different nodes, as in the incidents.
// Each mutate function may adjust the decoded objects first.
func applyPinned(ctx context.Context, cfg *rest.Config, data []byte, k int, mutate ...func(*unstructured.Unstructured) error) error {
	objs, err := cpmanifests.Decode(data)
	if err != nil {
		return err
	}
	var docs []string
	for _, o := range objs {
		for _, m := range mutate {
			if err := m(o); err != nil {
				return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
		}
		if o.GetKind() == "Deployment" && k > 0 {
			if err := unstructured.SetNestedStringMap(o.Object, map[string]string{local.NodeLabel: fmt.Sprint(k)},
				"spec", "template", "spec", "nodeSelector"); err != nil {
				return fmt.Errorf("pin %s: %w", o.GetName(), err)
			}
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		docs = append(docs, string(b))
	}
	return cpmanifests.Apply(ctx, cfg, []byte(strings.Join(docs, "\n---\n")))
}

// cpuLimit sets a CPU limit on every container of Deployment name.
func cpuLimit(name, limit string) func(*unstructured.Unstructured) error {
	return func(o *unstructured.Unstructured) error {
		if o.GetKind() != "Deployment" || o.GetName() != name || limit == "" {
			return nil
		}
		cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil {
			return err
		}
		for i := range cs {
			c := cs[i].(map[string]any)
			if err := unstructured.SetNestedField(c, limit, "resources", "limits", "cpu"); err != nil {
				return err
			}
			cs[i] = c
		}
		return unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")
	}
}

// podIPs returns the IPs of the running, ready pods matching selector.
func podIPs(ctx context.Context, cs kubernetes.Interface, ns, selector string) ([]string, error) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && podReady(&p) {
			ips = append(ips, p.Status.PodIP)
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("no ready pod matches %s in %s", selector, ns)
	}
	return ips, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// seHost is the host name of preloaded ServiceEntry i.
func seHost(i int) string { return fmt.Sprintf("se-%d.mesh.test", i) }

// createServiceEntries creates n ServiceEntries (HTTP port 80 → targetPort 8080, STATIC, one
// endpoint per address) concurrently, reporting progress.
func createServiceEntries(ctx context.Context, cfg *rest.Config, ns string, n int, addrs []string, logf func(string, ...any)) error {
	ic, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var eps []*apinet.WorkloadEntry
	for _, a := range addrs {
		eps = append(eps, &apinet.WorkloadEntry{Address: a, Labels: map[string]string{"app": "echo"}})
	}
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	work := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				se := &networkingv1.ServiceEntry{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("se-%d", i), Namespace: ns},
					Spec: apinet.ServiceEntry{
						Hosts:      []string{seHost(i)},
						Location:   apinet.ServiceEntry_MESH_INTERNAL,
						Resolution: apinet.ServiceEntry_STATIC,
						Ports:      []*apinet.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080}},
						Endpoints:  eps,
					},
				}
				if _, err := ic.NetworkingV1().ServiceEntries(ns).Create(ctx, se, metav1.CreateOptions{}); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("create ServiceEntry %s: %w", se.Name, err) })
				}
				if d := done.Add(1); d%1000 == 0 {
					logf("ServiceEntries: %d/%d", d, n)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		if ctx.Err() != nil || firstErr != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr == nil {
		logf("ServiceEntries: %d created in %s", n, time.Since(start).Round(100*time.Millisecond))
	}
	return firstErr
}
