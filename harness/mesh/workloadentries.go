package mesh

import (
	"context"
	"fmt"
	"net"
	"strconv"

	apinet "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// SelectedWorkloads generates a STATIC ServiceEntry <Name>.mesh.test (port 80) that selects
// WorkloadEntries by label (workloadSelector app=<Name>) and the WorkloadEntries <Name>-<j>,
// each with its own address and port (Port+j), and keeps the configuration they should produce:
// a relabelled or deleted entry leaves the service (the case of istio #25678).
type SelectedWorkloads struct {
	Name      string
	Namespace string // default "default"
	// Count WorkloadEntries are created with the ServiceEntry.
	Count int
	// Port is entry 0's port (default 9100).
	Port uint32
	// Net is the second octet of the entries' addresses 10.<Net>.x.y (default 127).
	Net int
}

// Host is the selecting ServiceEntry's host.
func (w SelectedWorkloads) Host() string { return w.Name + ".mesh.test" }

func (w SelectedWorkloads) namespace() string {
	if w.Namespace == "" {
		return "default"
	}
	return w.Namespace
}

func (w SelectedWorkloads) entry(j int) (*networkingv1.WorkloadEntry, string) {
	port, octet := w.Port, w.Net
	if port == 0 {
		port = 9100
	}
	if octet == 0 {
		octet = 127
	}
	addr := fmt.Sprintf("10.%d.%d.%d", octet, j>>8&255, j&255+1)
	p := port + uint32(j)
	return &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", w.Name, j), Namespace: w.namespace()},
		Spec: apinet.WorkloadEntry{Address: addr, Ports: map[string]uint32{"http": p}, Labels: map[string]string{"app": w.Name}}}, net.JoinHostPort(addr, strconv.Itoa(int(p)))
}

func (w SelectedWorkloads) client(cfg *rest.Config) (istioclient.Interface, error) {
	return istioclient.NewForConfig(cfg)
}

// Create creates the ServiceEntry and its WorkloadEntries and adds what they should produce to
// exp.
func (w SelectedWorkloads) Create(ctx context.Context, cfg *rest.Config, exp Expected) error {
	ic, err := w.client(cfg)
	if err != nil {
		return err
	}
	se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.namespace()}, Spec: apinet.ServiceEntry{
		Hosts: []string{w.Host()}, Location: apinet.ServiceEntry_MESH_INTERNAL, Resolution: apinet.ServiceEntry_STATIC,
		Ports:            []*apinet.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
		WorkloadSelector: &apinet.WorkloadSelector{Labels: map[string]string{"app": w.Name}},
		ExportTo:         []string{"."}}} // the run's namespace only, as every entry of a run
	if _, err := ic.NetworkingV1().ServiceEntries(w.namespace()).Create(ctx, se, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ServiceEntry %s: %w", w.Name, err)
	}
	exp[w.Host()] = []string{}
	for j := 0; j < w.Count; j++ {
		if err := w.Add(ctx, cfg, exp, j); err != nil {
			return err
		}
	}
	return nil
}

// Add creates WorkloadEntry j (selected) and adds it to exp.
func (w SelectedWorkloads) Add(ctx context.Context, cfg *rest.Config, exp Expected, j int) error {
	ic, err := w.client(cfg)
	if err != nil {
		return err
	}
	we, ep := w.entry(j)
	if _, err := ic.NetworkingV1().WorkloadEntries(w.namespace()).Create(ctx, we, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create WorkloadEntry %s: %w", we.Name, err)
	}
	exp[w.Host()] = append(exp[w.Host()], ep)
	return nil
}

// Relabel moves WorkloadEntry j out of the selector (app=<Name>-moved): it must leave the
// service.
func (w SelectedWorkloads) Relabel(ctx context.Context, cfg *rest.Config, exp Expected, j int) error {
	ic, err := w.client(cfg)
	if err != nil {
		return err
	}
	wes := ic.NetworkingV1().WorkloadEntries(w.namespace())
	we, err := wes.Get(ctx, fmt.Sprintf("%s-%d", w.Name, j), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("relabel WorkloadEntry %s-%d: %w", w.Name, j, err)
	}
	we.Spec.Labels = map[string]string{"app": w.Name + "-moved"}
	if _, err := wes.Update(ctx, we, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("relabel WorkloadEntry %s: %w", we.Name, err)
	}
	w.drop(exp, j)
	return nil
}

// Delete deletes WorkloadEntry j; it must not be (or stay) in the service.
func (w SelectedWorkloads) Delete(ctx context.Context, cfg *rest.Config, exp Expected, j int) error {
	ic, err := w.client(cfg)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%d", w.Name, j)
	if err := ic.NetworkingV1().WorkloadEntries(w.namespace()).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete WorkloadEntry %s: %w", name, err)
	}
	w.drop(exp, j)
	return nil
}

func (w SelectedWorkloads) drop(exp Expected, j int) {
	_, ep := w.entry(j)
	var keep []string
	for _, e := range exp[w.Host()] {
		if e != ep {
			keep = append(keep, e)
		}
	}
	exp[w.Host()] = keep
}

// Endpoint is what WorkloadEntry j should appear as ("IP:port").
func (w SelectedWorkloads) Endpoint(j int) string { _, ep := w.entry(j); return ep }
