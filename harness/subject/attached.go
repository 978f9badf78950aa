package subject

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
)

// InstalledSuffix is how --cp names istiod installed already: istiod:installed.
const InstalledSuffix = "installed"

// Attached is a control plane that was installed before the run (a descriptor's install: none,
// --cp istiod:installed): Deploy only finds it, and the harness never installs, patches or
// deletes it, its CRDs or its webhooks. A placement it does not already have is refused, never
// applied or ignored.
type Attached interface {
	ControlPlane
	// CheckInstalled reads the installed control plane and refuses, naming the setting, a
	// placement it does not have: the CLI's check before anything starts (Deploy checks again).
	CheckInstalled(ctx context.Context, cs kubernetes.Interface, p Placement) error
	// Found describes what Deploy found: Deployment, image, replicas, limits, QoS, node.
	Found() string
}

// Installed is a descriptor's control plane with install: none.
type Installed struct {
	*External
	// name is how --cp names it when not external:FILE (istiod:installed).
	name string

	mu    sync.Mutex
	found string
}

// installedBallaster is an Installed whose descriptor names a ballast hook.
type installedBallaster struct{ *Installed }

var (
	_ Attached  = (*Installed)(nil)
	_ Remover   = (*Installed)(nil)
	_ Ballaster = installedBallaster{}
)

// BallastURL implements Ballaster with the descriptor's hook.
func (i installedBallaster) BallastURL(pod *corev1.Pod, mib int) string {
	return externalBallaster{i.External}.BallastURL(pod, mib)
}

// installedState is what the harness reads of an installed control plane: what a Placement
// could ask of it.
type installedState struct {
	// Deployment is "namespace/name".
	Deployment string
	Container  string
	Image      string
	Replicas   int
	// MemoryLimit and CPULimit are the container's limits ("" none).
	MemoryLimit, CPULimit string
	// QoS and PriorityClass are its pods' (from the pod spec and status).
	QoS, PriorityClass string
}

// Name implements ControlPlane.
func (i *Installed) Name() string {
	if i.name != "" {
		return i.name
	}
	return i.External.Name()
}

// readInstalled reads the descriptor's Deployment and one of its ready pods.
func (i *Installed) readInstalled(ctx context.Context, cs kubernetes.Interface) (installedState, *corev1.Pod, error) {
	d := &i.d
	st := installedState{Deployment: d.Namespace + "/" + d.Deployment, Container: d.Container}
	dep, err := cs.AppsV1().Deployments(d.Namespace).Get(ctx, d.Deployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return st, nil, fmt.Errorf("no Deployment %s: %s attaches to a control plane installed already and installs nothing: install it first (or let meshchaos install one: control plane istiod, or a descriptor with install)", st.Deployment, i.Name())
	}
	if err != nil {
		return st, nil, fmt.Errorf("read the installed control plane's Deployment %s: %w", st.Deployment, err)
	}
	st.Replicas = 1
	if dep.Spec.Replicas != nil {
		st.Replicas = int(*dep.Spec.Replicas)
	}
	st.PriorityClass = dep.Spec.Template.Spec.PriorityClassName
	c := containerOf(dep, d.Container)
	if c == nil {
		return st, nil, fmt.Errorf("the installed Deployment %s has no container %q (the descriptor's container)", st.Deployment, d.Container)
	}
	st.Image = c.Image
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		st.MemoryLimit = q.String()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		st.CPULimit = q.String()
	}
	pods, err := cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: d.Selector})
	if err != nil {
		return st, nil, fmt.Errorf("list the installed control plane's pods (%s in %s): %w", d.Selector, d.Namespace, err)
	}
	var ready []*corev1.Pod
	for i := range pods.Items {
		if ok, _ := kube.PodReady(&pods.Items[i]); ok && pods.Items[i].DeletionTimestamp == nil {
			ready = append(ready, &pods.Items[i])
		}
	}
	if len(ready) == 0 {
		return st, nil, fmt.Errorf("no ready pod of the installed control plane (%s in %s, %d pod(s)): the harness attaches only to a control plane that serves", d.Selector, d.Namespace, len(pods.Items))
	}
	slices.SortFunc(ready, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	st.QoS = string(ready[0].Status.QOSClass)
	return st, ready[0], nil
}

func containerOf(dep *appsv1.Deployment, name string) *corev1.Container {
	for i, c := range dep.Spec.Template.Spec.Containers {
		if c.Name == name {
			return &dep.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

// refuse returns why the installed control plane cannot be run as p asks, nil when it can.
// Each setting is honoured only when the installed control plane has it already: the harness
// patches nothing (docs/controlplane-descriptor.md, "Attached control planes").
func (st installedState) refuse(name string, p Placement) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	limit := func(what, param, asked, have string) {
		switch {
		case asked == "":
		case have == "":
			bad("the experiment asks a %s limit of %s (parameter %s=%s) and the installed %s's container %s has none: an attached control plane is never patched: run with parameter %s= (none), or give it the limit yourself", what, asked, param, asked, st.Deployment, st.Container, param)
		case !sameQuantity(asked, have):
			bad("the experiment asks a %s limit of %s (parameter %s=%s) and the installed %s's container %s has %s: an attached control plane is never patched: run with parameter %s=%s", what, asked, param, asked, st.Deployment, st.Container, have, param, have)
		}
	}
	if p.Ballast && st.MemoryLimit == "" {
		bad("the experiment OOM-kills the control plane at its memory limit and the installed %s's container %s has none: it cannot be OOM-killed honestly; give it a memory limit (resources.limits.memory) or let meshchaos install one (control plane istiod)", st.Deployment, st.Container)
	} else {
		limit("memory", "cpMemoryLimit", p.MemoryLimit, st.MemoryLimit)
	}
	limit("CPU", "cpCPULimit", p.CPULimit, st.CPULimit)
	if p.QoS != "" && p.QoS != st.QoS {
		bad("the experiment needs the control plane's pods in QoS class %s and the installed %s's are %s: an attached control plane is never patched", p.QoS, st.Deployment, orNone(st.QoS))
	}
	if p.Replicas > 0 && p.Replicas != st.Replicas {
		bad("the experiment needs %d control-plane replica(s) and the installed %s has %d: an attached control plane is never scaled", p.Replicas, st.Deployment, st.Replicas)
	}
	if p.PriorityClass != "" && p.PriorityClass != st.PriorityClass {
		bad("the experiment needs the control plane's pods at PriorityClass %s and the installed %s's have %s: an attached control plane is never patched", p.PriorityClass, st.Deployment, orNone(st.PriorityClass))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// sameQuantity compares two Kubernetes quantities by value (1Gi is 1024Mi).
func sameQuantity(a, b string) bool {
	qa, err1 := resource.ParseQuantity(a)
	qb, err2 := resource.ParseQuantity(b)
	return err1 == nil && err2 == nil && qa.Cmp(qb) == 0
}

// CheckInstalled implements Attached.
func (i *Installed) CheckInstalled(ctx context.Context, cs kubernetes.Interface, p Placement) error {
	st, _, err := i.readInstalled(ctx, cs)
	if err != nil {
		return err
	}
	return st.refuse(i.Name(), p)
}

// Deploy implements ControlPlane: it applies nothing. It waits until the installed Deployment
// is available, refuses a placement it does not have, checks that its pod runs on one of the
// run's nodes (node faults and measures reach only those) and finds the xDS Service.
func (i *Installed) Deploy(ctx context.Context, c cluster.Cluster, p Placement) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	d := &i.d
	if _, err := cs.AppsV1().Deployments(d.Namespace).Get(ctx, d.Deployment, metav1.GetOptions{}); err == nil {
		if err := kube.WaitDeploymentReady(ctx, cs, d.Namespace, d.Deployment, i.timeout); err != nil {
			return fmt.Errorf("the installed control plane: %w", err)
		}
	}
	st, pod, err := i.readInstalled(ctx, cs)
	if err != nil {
		return err
	}
	if err := st.refuse(i.Name(), p); err != nil {
		return err
	}
	k := slices.Index(c.Nodes(), pod.Spec.NodeName) + 1
	if k == 0 {
		return fmt.Errorf("%s: the installed control plane's pod %s runs on node %s, which is not one of the run's nodes (%s): faults and measures reach only those; label it %s=1 (and the run's other nodes 2…)", i.Name(), pod.Name, pod.Spec.NodeName, strings.Join(c.Nodes(), ", "), cluster.NodeLabel)
	}
	if len(p.Nodes) > 0 && !slices.Contains(p.Nodes, k) {
		return fmt.Errorf("%s: the experiment needs the control plane on node(s) %v and the installed one's pod %s runs on node %d (%s): an attached control plane is never moved", i.Name(), p.Nodes, pod.Name, k, pod.Spec.NodeName)
	}
	if err := i.findXDS(ctx, cs, i.Name()); err != nil {
		return err
	}
	found := fmt.Sprintf("installed Deployment %s, image %s, %d replica(s), memory limit %s, CPU limit %s, QoS %s, pod %s on node %d (%s)",
		st.Deployment, st.Image, st.Replicas, orNone(st.MemoryLimit), orNone(st.CPULimit), orNone(st.QoS), pod.Name, k, pod.Spec.NodeName)
	if p.Node > 0 && p.Node != k {
		// Where it runs is the installed control plane's business; said, not hidden.
		found += fmt.Sprintf(" (the experiment would place it on node %d; attached, it runs where it was installed)", p.Node)
	}
	i.mu.Lock()
	i.found = found
	i.mu.Unlock()
	if p.Logf != nil {
		p.Logf("%s: attached to the %s; nothing installed, patched or deleted", i.Name(), found)
	}
	return nil
}

// Found implements Attached.
func (i *Installed) Found() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.found
}

// Remove implements Remover: an attached control plane stays as it was.
func (i *Installed) Remove(context.Context, cluster.Cluster) error { return nil }

// installedIstiod is istiod installed already (--cp istiod:installed): the built-in istiod
// descriptor with install none and remove keep. No image is loaded and no CA ConfigMap removed
// (istiod wrote them for its own installation, not for the run); its debug port takes a token of
// its ServiceAccount as with --cp istiod.
type installedIstiod struct{ *Installed }

var (
	_ Attached  = installedIstiod{}
	_ DebugAuth = installedIstiod{}
	_ Injector  = installedIstiod{}
)

// NewInstalledIstiod returns istiod as installed in istio-system (app=istiod, Deployment and
// Service istiod, container discovery): --cp istiod:installed.
func NewInstalledIstiod() (ControlPlane, error) {
	d := istiodDescriptor
	d.Install, d.Remove = Install{None: true}, "keep"
	e, err := newExternal(IstiodPrefix+":"+InstalledSuffix, "", d)
	if err != nil {
		return nil, err
	}
	return installedIstiod{&Installed{External: e, name: IstiodPrefix + ":" + InstalledSuffix}}, nil
}

// InjectionLabels implements Injector.
func (installedIstiod) InjectionLabels() map[string]string {
	return map[string]string{"istio-injection": "enabled"}
}

// DebugHeader implements DebugAuth.
func (i installedIstiod) DebugHeader(ctx context.Context, c cluster.Cluster) (http.Header, error) {
	return istiodDebugHeader(ctx, c, i.Namespace())
}
