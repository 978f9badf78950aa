package mesh

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/oracle"
	"github.com/meshchaos/meshchaos/harness/subject"
	wlmanifests "github.com/meshchaos/meshchaos/workloads/manifests"
)

// How the mesh's xDS clients reach the control plane (Spec.XDS).
const (
	// XDSAuto is the secure port when the control plane serves one and the data plane can use
	// it, plaintext otherwise (the run says which).
	XDSAuto = ""
	// XDSSecure is xDS over TLS with the pods' ServiceAccount tokens, as sidecars reach istiod
	// on 15012; a control plane without a secure port is refused.
	XDSSecure = "tls"
	// XDSPlaintext is plaintext gRPC (istiod's 15010, which hardened installs turn off).
	XDSPlaintext = "plaintext"
)

// XDSTransports lists Spec.XDS's values as flags spell them ("auto" is XDSAuto).
var XDSTransports = []string{"auto", XDSSecure, XDSPlaintext}

// ParseXDS reads an xDS transport as flags spell it (the CLI's --xds): XDSTransports.
func ParseXDS(s string) (string, error) {
	switch s {
	case "auto", "":
		return XDSAuto, nil
	case XDSSecure, XDSPlaintext:
		return s, nil
	}
	return "", fmt.Errorf("xDS transport %q: use auto (the secure port when the control plane serves one), tls or plaintext", s)
}

// checkXDS refuses a transport the control plane cannot serve.
func (s Spec) checkXDS() error {
	if s.XDS != XDSSecure || s.ControlPlane == nil {
		return nil
	}
	if ss, ok := s.ControlPlane.(subject.SecureServer); ok {
		if _, serves := ss.SecureXDS(); serves {
			return nil
		}
	}
	return fmt.Errorf("xDS transport tls: the control plane %s serves no secure xDS port (give its descriptor secureXDS, or use xDS transport plaintext)", s.ControlPlane.Name())
}

// chooseXDS settles the transport once the control plane is deployed and the data plane is
// known: m.secure is set for the secure port.
func (m *Mesh) chooseXDS(rec Recorder) error {
	cp := m.Spec.ControlPlane
	var sx subject.SecureXDS
	serves := false
	if ss, ok := cp.(subject.SecureServer); ok {
		sx, serves = ss.SecureXDS()
	}
	switch {
	case m.Spec.XDS == XDSPlaintext || !serves:
		rec.Event("note", "xds", fmt.Sprintf("proxies dial %s in plaintext", cp.XDSAddress()))
		return nil
	case m.wl.Proxy == wlmanifests.Envoy:
		if m.Spec.XDS == XDSSecure {
			return fmt.Errorf("xDS transport tls: the data plane is Envoy, which cannot send a rotating ServiceAccount token; use xDS transport plaintext (or run xdsproxy: unset %s)", EnvoyImageEnv)
		}
		rec.Event("note", "xds", fmt.Sprintf("proxies dial %s in plaintext: Envoy cannot send a rotating ServiceAccount token (in Istio, pilot-agent dials for it)", cp.XDSAddress()))
		return nil
	}
	m.secure = &sx
	rec.Event("note", "xds", fmt.Sprintf("proxies dial %s over TLS (server name %s, root from ConfigMap %s, ServiceAccount tokens for %s)",
		sx.Address, sx.ServerName, sx.RootConfigMap, sx.Audience))
	return nil
}

// XDSAddress is where the mesh's xDS clients dial: the secure port or the plaintext one.
func (m *Mesh) XDSAddress() string {
	if m.secure != nil {
		return m.secure.Address
	}
	return m.Spec.ControlPlane.XDSAddress()
}

// Secure reports whether the mesh's xDS clients use the control plane's secure port.
func (m *Mesh) Secure() bool { return m.secure != nil }

// xdsValues points a workload's xDS clients at the control plane, as the mesh chose.
func (m *Mesh) xdsValues(v *wlmanifests.Values) {
	v.XDSAddress = m.XDSAddress()
	if m.secure != nil {
		v.SecureXDS = &wlmanifests.SecureXDS{ServerName: m.secure.ServerName, RootConfigMap: m.secure.RootConfigMap, Audience: m.secure.Audience}
	}
}

// HostXDSDialOptions are the dial options of a harness xDS client on the host (the oracle, the
// probes) that speaks as a sidecar of namespace ns: none for plaintext, else the control
// plane's root (from ns) and a token of ns's default ServiceAccount.
func (m *Mesh) HostXDSDialOptions(ctx context.Context, ns string) ([]grpc.DialOption, error) {
	if m.secure == nil {
		return nil, nil
	}
	if err := m.WaitRootCert(ctx, ns); err != nil {
		return nil, err
	}
	return oracle.Credentials{Namespace: ns, RootConfigMap: m.secure.RootConfigMap, ServerName: m.secure.ServerName,
		Audience: m.secure.Audience}.DialOptions(ctx, m.Client)
}

// WaitRootCert waits until the control plane has written its root certificate ConfigMap into
// ns (a pod that mounts it would otherwise wait in ContainerCreating); nothing to wait for in
// plaintext. The control plane writes it into the run's namespaces (istiod: every namespace;
// the reference: those labelled with the run, see OwnNamespace).
func (m *Mesh) WaitRootCert(ctx context.Context, ns string) error {
	if m.secure == nil {
		return nil
	}
	name := m.secure.RootConfigMap
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := kube.Poll(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		cm, err := m.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && cm.Data["root-cert.pem"] != "", err
	})
	if err != nil {
		return fmt.Errorf("the control plane %s has not written its root certificate (ConfigMap %s) into namespace %s in 2 minutes: %w",
			m.Spec.ControlPlane.Name(), name, ns, err)
	}
	return nil
}

// OwnNamespace labels ns as the run's (kube.OwnerLabel), on a cluster that is the run's own:
// control planes that publish their root only into the run's namespaces (the reference, so
// as to leave a shared cluster's other namespaces alone) then publish it there too. On a
// shared cluster the run's namespaces carry the label from their creation.
func (m *Mesh) OwnNamespace(ctx context.Context, ns string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, kube.OwnerLabel, m.Cluster.Name())
	if _, err := m.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label namespace %s as the run's: %w", ns, err)
	}
	return nil
}
