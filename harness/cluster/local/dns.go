package local

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/images"
)

// corefile serves cluster.local from the API and nothing else: pods have no outside network,
// so there is nowhere to forward to, and other names get REFUSED at once instead of a timeout.
const corefile = `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
    loadbalance
}
`

// deployDNS creates CoreDNS (ConfigMap, Deployment, the kube-dns Service at DNSServiceIP).
func deployDNS(ctx context.Context, cs kubernetes.Interface) error {
	labels := map[string]string{"k8s-app": "kube-dns"}
	one := int32(1)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"},
		Data:       map[string]string{"Corefile": corefile},
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					DNSPolicy: corev1.DNSDefault,
					// Node 1 by convention; experiments that starve a node pick another one.
					NodeSelector: map[string]string{NodeLabel: "1"},
					Containers: []corev1.Container{{
						Name: "coredns", Image: images.Ref("coredns"), ImagePullPolicy: corev1.PullNever,
						Args: []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
						},
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
							corev1.ResourceMemory: resource.MustParse("128Mi"),
						}},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
							PeriodSeconds: 1,
						},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}},
							PeriodSeconds:    10,
							FailureThreshold: 5,
						},
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}},
					}}},
				},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector:  labels,
			ClusterIP: DNSServiceIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	if _, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cs.AppsV1().Deployments("kube-system").Create(ctx, dep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cs.CoreV1().Services("kube-system").Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// WaitDeploymentReady waits until every replica of a Deployment is available. On timeout the
// error says what its pods are doing.
func WaitDeploymentReady(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && d.Spec.Replicas != nil && d.Status.ObservedGeneration >= d.Generation &&
			d.Status.AvailableReplicas == *d.Spec.Replicas && d.Status.UpdatedReplicas == *d.Spec.Replicas {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("deployment %s/%s not available after %s: %s", ns, name, timeout, podStates(ctx, cs, ns, d))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podStates summarises the pods of a Deployment for an error message.
func podStates(ctx context.Context, cs kubernetes.Interface, ns string, d *appsv1.Deployment) string {
	if d == nil || d.Spec.Selector == nil {
		return "deployment not found"
	}
	sel := metav1.FormatLabelSelector(d.Spec.Selector)
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err.Error()
	}
	if len(pods.Items) == 0 {
		return "no pods (scheduler or controller-manager not running?)"
	}
	var s string
	for _, p := range pods.Items {
		s += fmt.Sprintf("[%s %s node=%q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				s += fmt.Sprintf(" %s: %s", c.Type, c.Message)
			}
		}
		for _, st := range p.Status.ContainerStatuses {
			if w := st.State.Waiting; w != nil {
				s += fmt.Sprintf(" %s waiting: %s %s", st.Name, w.Reason, w.Message)
			}
			if t := st.LastTerminationState.Terminated; t != nil {
				s += fmt.Sprintf(" %s last exit: %s (%d)", st.Name, t.Reason, t.ExitCode)
			}
		}
		s += "] "
	}
	return s
}
