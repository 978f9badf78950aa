package mesh

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apinet "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	cpmanifests "github.com/meshchaos/meshchaos/controlplane/manifests"
)

// crds are the Istio CRDs the generated configuration needs.
func crds() []byte { return cpmanifests.CRDs }

// ServiceEntries generates Count ServiceEntries se-<i> for host se-<i>.mesh.test, HTTP port 80
// to target port 8080, STATIC, one endpoint per pod of Backend.
type ServiceEntries struct {
	Count     int
	Backend   string
	Namespace string // default "default"
}

// Host is the host of ServiceEntry i.
func Host(i int) string { return fmt.Sprintf("se-%d.mesh.test", i) }

func hostIndex(h string) int {
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(h, "se-"), ".mesh.test"))
	return n
}

// Objects returns the ServiceEntries for the backend's addresses and the configuration they
// should produce.
func (g ServiceEntries) Objects(addrs []string) ([]*networkingv1.ServiceEntry, Expected) {
	ns := g.Namespace
	if ns == "" {
		ns = "default"
	}
	var eps []*apinet.WorkloadEntry
	var want []string
	for _, a := range addrs {
		eps = append(eps, &apinet.WorkloadEntry{Address: a, Labels: map[string]string{"app": g.Backend}})
		want = append(want, net.JoinHostPort(a, "8080"))
	}
	out := make([]*networkingv1.ServiceEntry, 0, g.Count)
	exp := Expected{}
	for i := 0; i < g.Count; i++ {
		out = append(out, &networkingv1.ServiceEntry{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("se-%d", i), Namespace: ns},
			Spec: apinet.ServiceEntry{
				Hosts:      []string{Host(i)},
				Location:   apinet.ServiceEntry_MESH_INTERNAL,
				Resolution: apinet.ServiceEntry_STATIC,
				Ports:      []*apinet.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080}},
				Endpoints:  eps,
			},
		})
		exp[Host(i)] = want
	}
	return out, exp
}

// Create creates the ServiceEntries, 16 at a time, reporting progress every 1000.
func (g ServiceEntries) Create(ctx context.Context, cfg *rest.Config, addrs []string, logf func(string, ...any)) (Expected, error) {
	ic, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	objs, exp := g.Objects(addrs)
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	var failed atomic.Bool
	work := make(chan *networkingv1.ServiceEntry)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for se := range work {
				if _, err := ic.NetworkingV1().ServiceEntries(se.Namespace).Create(ctx, se, metav1.CreateOptions{}); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("create ServiceEntry %s: %w", se.Name, err); failed.Store(true) })
				}
				if d := done.Add(1); d%1000 == 0 {
					logf("ServiceEntries: %d/%d", d, len(objs))
				}
			}
		}()
	}
	for _, se := range objs {
		if ctx.Err() != nil || failed.Load() {
			break
		}
		work <- se
	}
	close(work)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return nil, firstErr
	}
	logf("ServiceEntries: %d created in %s", len(objs), time.Since(start).Round(100*time.Millisecond))
	return exp, nil
}
