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
)

// ServiceEntries generates Count ServiceEntries se-<i> for host se-<i>.mesh.test, HTTP port 80
// to target port 8080, STATIC, one endpoint per pod of Backend.
type ServiceEntries struct {
	Count     int
	Backend   string
	Namespace string // default "default"

	// The fields below serve control-plane scale and correctness experiments.

	// From is the index of the first ServiceEntry, so that steps add to what is there.
	From int
	// Prefix names the ServiceEntries <Prefix>-<i> for hosts <Prefix>-<i>.mesh.test (default "se").
	Prefix string
	// Endpoints, without a Backend's addresses, gives each ServiceEntry that many synthetic
	// endpoint addresses of its own (in 10.128.0.0/9, never dialled).
	Endpoints int
	// EndpointPort, when set, gives endpoint j its own port EndpointPort+j, unlike the service
	// port and its target port (the case of istio #25309).
	EndpointPort uint32
	// Workers creates that many at once (default 16).
	Workers int
	// ExportTo are the namespaces besides their own that see the entries (Istio's exportTo):
	// the run's other namespaces whose sidecars call them. Never "*": on a shared cluster an
	// installed istiod must not push a run's entries to the rest of the mesh.
	ExportTo []string
}

// HostOf is the host of ServiceEntry i of this generator.
func (g ServiceEntries) HostOf(i int) string {
	if g.Prefix == "" || g.Prefix == "se" {
		return Host(i)
	}
	return fmt.Sprintf("%s-%d.mesh.test", g.Prefix, i)
}

func (g ServiceEntries) name(i int) string {
	p := g.Prefix
	if p == "" {
		p = "se"
	}
	return fmt.Sprintf("%s-%d", p, i)
}

func (g ServiceEntries) namespace() string {
	if g.Namespace == "" {
		return "default"
	}
	return g.Namespace
}

// syntheticAddr is endpoint j of ServiceEntry i: unique up to 2^23 endpoints per prefix.
func (g ServiceEntries) syntheticAddr(i, j int) string {
	k := i*g.Endpoints + j
	return fmt.Sprintf("10.%d.%d.%d", 128+(k>>16)&127, (k>>8)&255, k&255)
}

// endpoints are ServiceEntry i's endpoints and what the control plane should make of them.
func (g ServiceEntries) endpoints(i int, addrs []string) ([]*apinet.WorkloadEntry, []string) {
	if len(addrs) == 0 && g.Endpoints > 0 {
		for j := 0; j < g.Endpoints; j++ {
			addrs = append(addrs, g.syntheticAddr(i, j))
		}
	}
	var eps []*apinet.WorkloadEntry
	var want []string
	for j, a := range addrs {
		we := &apinet.WorkloadEntry{Address: a, Labels: map[string]string{"app": g.Backend}}
		port := uint32(8080)
		if g.EndpointPort > 0 {
			port = g.EndpointPort + uint32(j)
			we.Ports = map[string]uint32{"http": port}
		}
		eps = append(eps, we)
		want = append(want, net.JoinHostPort(a, strconv.Itoa(int(port))))
	}
	return eps, want
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
	ns := g.namespace()
	out := make([]*networkingv1.ServiceEntry, 0, g.Count)
	exp := Expected{}
	for i := g.From; i < g.From+g.Count; i++ {
		eps, want := g.endpoints(i, addrs)
		out = append(out, &networkingv1.ServiceEntry{
			ObjectMeta: metav1.ObjectMeta{Name: g.name(i), Namespace: ns},
			Spec: apinet.ServiceEntry{
				Hosts:      []string{g.HostOf(i)},
				Location:   apinet.ServiceEntry_MESH_INTERNAL,
				Resolution: apinet.ServiceEntry_STATIC,
				Ports:      []*apinet.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080}},
				Endpoints:  eps,
				// Visible in the run's namespaces only: on a shared cluster an installed
				// istiod must not push a run's entries to the rest of the mesh.
				ExportTo: append([]string{"."}, g.ExportTo...),
			},
		})
		exp[g.HostOf(i)] = want
	}
	return out, exp
}

// Create creates the ServiceEntries, 16 at a time, reporting progress every 1000.
func (g ServiceEntries) Create(ctx context.Context, cfg *rest.Config, addrs []string, logf func(string, ...any)) (Expected, error) {
	ic, err := istioclient.NewForConfig(fastConfig(cfg))
	if err != nil {
		return nil, err
	}
	objs, exp := g.Objects(addrs)
	workers := g.Workers
	if workers <= 0 {
		workers = 16
	}
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	var failed atomic.Bool
	work := make(chan *networkingv1.ServiceEntry)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for se := range work {
				if _, err := ic.NetworkingV1().ServiceEntries(se.Namespace).Create(ctx, se, metav1.CreateOptions{}); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("create ServiceEntry %s: %w", se.Name, err); failed.Store(true) })
				}
				if d := done.Add(1); d%5000 == 0 {
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

// fastConfig raises client-go's client-side rate limit for bulk config: the default 5 QPS would
// make the client, not the apiserver, the bottleneck.
func fastConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = max(c.QPS, 1000), max(c.Burst, 2000)
	return c
}

// RemoveEndpoint deletes endpoint j of ServiceEntry i (for the control plane, an endpoint-only
// change: an incremental push) and removes it from exp.
func (g ServiceEntries) RemoveEndpoint(ctx context.Context, cfg *rest.Config, exp Expected, i, j int) error {
	ic, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ses := ic.NetworkingV1().ServiceEntries(g.namespace())
	se, err := ses.Get(ctx, g.name(i), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("remove endpoint %d of ServiceEntry %s: %w", j, g.name(i), err)
	}
	if j >= len(se.Spec.Endpoints) {
		return fmt.Errorf("remove endpoint %d of ServiceEntry %s: it has %d", j, g.name(i), len(se.Spec.Endpoints))
	}
	gone := se.Spec.Endpoints[j].Address
	se.Spec.Endpoints = append(se.Spec.Endpoints[:j:j], se.Spec.Endpoints[j+1:]...)
	if _, err := ses.Update(ctx, se, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("remove endpoint %d of ServiceEntry %s: %w", j, g.name(i), err)
	}
	host := g.HostOf(i)
	var keep []string
	for _, e := range exp[host] {
		if h, _, _ := net.SplitHostPort(e); h != gone {
			keep = append(keep, e)
		}
	}
	exp[host] = keep
	return nil
}
