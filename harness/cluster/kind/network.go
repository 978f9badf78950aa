package kind

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
)

// setupPodNetwork does once what kind's default CNI daemon (kindnetd, a registry image) does
// continuously: each node gets a bridge CNI config for the pod CIDR the controller manager gave
// it, and a route to every other node's pod CIDR through that node's address. Nodes never change
// during a run, so once is enough. Only the node containers' own network namespaces change.
func (c *Cluster) setupPodNetwork(ctx context.Context, cs kubernetes.Interface) error {
	type nodeNet struct{ name, ip, cidr string }
	var nets []nodeNet
	err := kube.Poll(ctx, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		nets = nets[:0]
		for _, n := range list.Items {
			ip := ""
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					ip = a.Address
				}
			}
			if n.Spec.PodCIDR == "" || ip == "" {
				return false, nil
			}
			nets = append(nets, nodeNet{n.Name, ip, n.Spec.PodCIDR})
		}
		return len(nets) == len(c.all), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d nodes with pod CIDRs: %w", len(c.all), err)
	}
	for _, n := range nets {
		conf := fmt.Sprintf(`{"cniVersion":"0.4.0","name":"meshchaos","plugins":[
 {"type":"bridge","bridge":"mcbr0","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
`, n.cidr)
		if _, err := dockerExec(ctx, n.name, []byte(conf), "sh", "-c", "cat > /etc/cni/net.d/10-meshchaos.conflist"); err != nil {
			return err
		}
		for _, o := range nets {
			if o.name == n.name {
				continue
			}
			if _, err := dockerExec(ctx, n.name, nil, "ip", "route", "replace", o.cidr, "via", o.ip); err != nil {
				return err
			}
		}
	}
	c.cfg.Logf("[kind] pod network: %d nodes, bridge CNI and routes between pod CIDRs", len(nets))
	return nil
}

// configureDNS gives kubeadm's CoreDNS the Corefile our CoreDNS build serves (kubeadm's default
// names plugins the build leaves out, such as forward) and restarts its pods with it.
func configureDNS(ctx context.Context, cs kubernetes.Interface) error {
	cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		return err
	}
	cm.Data = map[string]string{"Corefile": cluster.Corefile}
	if _, err := cs.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return err
	}
	return cs.CoreV1().Pods("kube-system").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
}

// placeDNS moves CoreDNS to the control-plane node (its kubeadm tolerations allow that): the
// worker nodes are the experiment's, with all their CPU allocatable, as on the local substrate
// where CoreDNS runs beside the apiserver. On a worker its 100m request left a neighbour that
// asks for the whole node unschedulable.
func placeDNS(ctx context.Context, cs kubernetes.Interface) error {
	patch := []byte(`{"spec":{"template":{"spec":{"nodeSelector":{"node-role.kubernetes.io/control-plane":""}}}}}`)
	_, err := cs.AppsV1().Deployments("kube-system").Patch(ctx, "coredns", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}

// logger sends kind's messages to the progress reporter; kind's debug levels are dropped.
type logger struct{ logf func(string, ...any) }

func (l logger) Warn(m string)                { l.logf("[kind] %s", m) }
func (l logger) Warnf(f string, a ...any)     { l.logf("[kind] "+f, a...) }
func (l logger) Error(m string)               { l.logf("[kind] %s", m) }
func (l logger) Errorf(f string, a ...any)    { l.logf("[kind] "+f, a...) }
func (l logger) V(v log.Level) log.InfoLogger { return info{l, v == 0} }

type info struct {
	l  logger
	on bool
}

func (i info) Info(m string) {
	if i.on {
		i.l.logf("[kind] %s", m)
	}
}
func (i info) Infof(f string, a ...any) {
	if i.on {
		i.l.logf("[kind] "+f, a...)
	}
}
func (i info) Enabled() bool { return i.on }
