package mesh

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	apinet "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The mesh's gateway routes are Istio objects, for every control plane: istiod builds a
// gateway's listeners from a Gateway that selects it and the VirtualServices bound to that
// Gateway, and nothing else; the reference builds them the same way. So the mesh creates one
// Gateway for its gateway pods and one VirtualService per host the traffic targets, each
// exported to its own namespace only.

// GatewayName is the mesh's Gateway.
const GatewayName = "meshchaos-gateway"

// gatewaySelector are the labels of the mesh's gateway pods (workloads/manifests' gateway) the
// Gateway selects.
var gatewaySelector = map[string]string{"app": "gateway", "meshchaos.io/role": "gateway"}

// GatewayPort is the port the gateway serves HTTP on: the Gateway's server port.
const GatewayPort = 80

// gatewayObject is the mesh's Gateway in namespace ns: plaintext HTTP on GatewayPort for the
// hosts of VirtualServices of ns.
func gatewayObject(ns string) *networkingv1.Gateway {
	return &networkingv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: GatewayName, Namespace: ns},
		Spec: apinet.Gateway{Selector: gatewaySelector, Servers: []*apinet.Server{{
			Port:  &apinet.Port{Number: GatewayPort, Name: "http", Protocol: "HTTP"},
			Hosts: []string{"./*"},
		}}}}
}

// routeObject is the VirtualService that routes host through the mesh's Gateway to port 80 of
// host (a ServiceEntry's host, or a Kubernetes Service's FQDN).
func routeObject(ns, host string) *networkingv1.VirtualService {
	return &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: RouteName(host), Namespace: ns},
		Spec: apinet.VirtualService{Hosts: []string{host}, Gateways: []string{GatewayName}, ExportTo: []string{"."},
			Http: []*apinet.HTTPRoute{{Route: []*apinet.HTTPRouteDestination{{
				Destination: &apinet.Destination{Host: host, Port: &apinet.PortSelector{Number: 80}}}}}}}}
}

// RouteName is the name of the VirtualService that routes host: "route-" and the host, or its
// hash where the host is too long for an object name.
func RouteName(host string) string {
	n := "route-" + strings.ReplaceAll(host, "*", "w")
	if len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(host))
	return "route-" + hex.EncodeToString(sum[:12])
}

// createGateway creates the mesh's Gateway in ns (it may exist: a run that reuses the cluster).
func createGateway(ctx context.Context, cfg *rest.Config, ns string) error {
	ic, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = ic.NetworkingV1().Gateways(ns).Create(ctx, gatewayObject(ns), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the Gateway %s/%s: %w", ns, GatewayName, err)
	}
	return nil
}

// RouteHosts creates the VirtualServices that route hosts through the mesh's gateways.
func (m *Mesh) RouteHosts(ctx context.Context, hosts ...string) error {
	return routeHosts(ctx, m.Cluster.RESTConfig(), m.Namespace, hosts...)
}

func routeHosts(ctx context.Context, cfg *rest.Config, ns string, hosts ...string) error {
	ic, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, h := range hosts {
		if _, err := ic.NetworkingV1().VirtualServices(ns).Create(ctx, routeObject(ns, h), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("route %s through the gateway (VirtualService %s/%s): %w", h, ns, RouteName(h), err)
		}
	}
	return nil
}

// createRoutes creates the Gateway and the VirtualServices the spec's gateways route (the CRDs
// first: a mesh without ServiceEntries has not installed them).
func (m *Mesh) createRoutes(ctx context.Context) error {
	cfg := m.Cluster.RESTConfig()
	if err := m.installCRDs(ctx); err != nil {
		return err
	}
	if err := createGateway(ctx, cfg, m.Namespace); err != nil {
		return err
	}
	g := m.Spec.Gateway
	hosts := m.gatewayHosts(g.Hosts)
	for _, svc := range g.Services {
		hosts = append(hosts, m.ServiceHost(svc))
	}
	return routeHosts(ctx, cfg, m.Namespace, hosts...)
}

// ServiceHost is the FQDN of the mesh's Kubernetes Service name.
func (m *Mesh) ServiceHost(name string) string {
	return name + "." + m.Namespace + ".svc.cluster.local"
}
