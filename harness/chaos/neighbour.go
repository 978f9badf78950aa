package chaos

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/images"
	"github.com/meshchaos/meshchaos/workloads/hog"
)

// InjectorLabel is set on what an injector creates, to its kind ("noisy-neighbour",
// "config-load"), so it can be found and removed again.
const InjectorLabel = "meshchaos.io/injector"

// NoisyNeighbour runs a CPU hog (workloads/hog) on a node, competing with the pods there for CPU,
// as in the CPU-starved control-plane incident. Its evidence is the hog's own cgroup: the CPU time
// it used grows at half the asked rate or more, so the node really is busier.
type NoisyNeighbour struct {
	// Cluster finds the hog pod's cgroup.
	Cluster cluster.Cluster
	// Client creates the pod.
	Client kubernetes.Interface
	// Node is the node to load, 1-based (pinned with a nodeSelector on cluster.NodeLabel).
	Node int
	// CPUs is the load to add, e.g. 1.5.
	CPUs float64
	// Namespace of the hog pod (default "default").
	Namespace string
	// BestEffort leaves out the CPU request. By default the hog requests CPUs, so it competes
	// with its share's weight; without a request it yields to every pod that has one.
	BestEffort bool
	// Image is the hog's image (default images.Ref("hog"), as `make images` builds it).
	Image string
	// MinShare is the share of CPUs the hog must be seen burning as proof (default 0.5). A hog
	// confined to a node's CPU budget on a host busy with other work gets less than it asks.
	MinShare float64
	// Shape is the load: ShapeCPU (default) burns CPUs; ShapeDownload serves large downloads
	// (150 MiB each, the incident's neighbour) to a client pod on ClientNode that keeps Streams
	// of them running, so the load is the serving pod's copies and network stack, at whatever
	// rate the node gives it. The proof is the same: the serving pod's cgroup burns CPU.
	Shape string
	// ClientNode runs the download client (ShapeDownload; default: the last node other than
	// Node, else Node).
	ClientNode int
	// Streams is the client's concurrent downloads (ShapeDownload; default 4).
	Streams int
	// Window is how long one measurement of the hog's CPU use lasts (default 2 s).
	Window time.Duration
	// Timeout bounds the pod's start, the proof and the pod's deletion (default 1 minute).
	Timeout time.Duration

	pod    *corev1.Pod
	client *corev1.Pod
	group  *cgroup.Group
	proven time.Time
	atUse  time.Duration // the hog's CPU time when proven
}

// The noisy neighbour's shapes.
const (
	ShapeCPU      = "cpu"
	ShapeDownload = "download"
)

// downloadPort is where the serving hog listens.
const downloadPort = 8080

// Name implements Injector: "noisy-neighbour/nodeK".
func (n *NoisyNeighbour) Name() string { return fmt.Sprintf("noisy-neighbour/node%d", n.Node) }

func (n *NoisyNeighbour) namespace() string { return orDefault(n.Namespace, "default") }
func (n *NoisyNeighbour) timeout() time.Duration {
	return orDefault(n.Timeout, time.Minute)
}

// podSpec is the hog pod: pinned to the node, no CPU limit.
func (n *NoisyNeighbour) podSpec() *corev1.Pod {
	c := corev1.Container{
		Name: "hog", Image: orDefault(n.Image, images.Ref("hog")), ImagePullPolicy: corev1.PullIfNotPresent,
		Args: []string{"--cpus", strconv.FormatFloat(n.CPUs, 'g', -1, 64)},
	}
	if n.Shape == ShapeDownload {
		c.Args = []string{"--serve", fmt.Sprintf(":%d", downloadPort)}
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: downloadPort}}
	}
	if !n.BestEffort {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(int64(n.CPUs*1000), resource.DecimalSI)}
	}
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("hog-node%d", n.Node), Namespace: n.namespace(),
			Labels: map[string]string{"app": "meshchaos-hog", InjectorLabel: "noisy-neighbour"}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{cluster.NodeLabel: strconv.Itoa(n.Node)},
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []corev1.Container{c},
		},
	}
}

// Inject starts the hog and returns once its cgroup shows it burning at least MinShare of CPUs.
func (n *NoisyNeighbour) Inject(ctx context.Context) (Evidence, error) {
	if nodes := len(n.Cluster.Nodes()); n.Node < 1 || n.Node > nodes {
		return Evidence{}, fmt.Errorf("%s: no node %d: the cluster has nodes 1 to %d", n.Name(), n.Node, nodes)
	}
	if n.CPUs <= 0 {
		return Evidence{}, fmt.Errorf("%s: CPUs %v: set the load to add, e.g. 1", n.Name(), n.CPUs)
	}
	if n.pod != nil {
		return Evidence{}, fmt.Errorf("%s: already running: Clear it before injecting again", n.Name())
	}
	if n.Shape != "" && n.Shape != ShapeCPU && n.Shape != ShapeDownload {
		return Evidence{}, fmt.Errorf("%s: shape %q: use %q or %q", n.Name(), n.Shape, ShapeCPU, ShapeDownload)
	}
	spec := n.podSpec()
	pod, err := n.Client.CoreV1().Pods(spec.Namespace).Create(ctx, spec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return Evidence{}, fmt.Errorf("%s: pod %s/%s exists: a previous noisy neighbour was not cleared; delete it (kubectl delete pod)", n.Name(), spec.Namespace, spec.Name)
	}
	if err != nil {
		return Evidence{}, fmt.Errorf("%s: create pod %s/%s: %w", n.Name(), spec.Namespace, spec.Name, err)
	}
	n.pod = pod
	ev, err := n.prove(ctx)
	if err != nil {
		if _, cerr := n.Clear(context.WithoutCancel(ctx)); cerr != nil {
			err = fmt.Errorf("%w (and removing the hog: %v)", err, cerr)
		}
		return Evidence{}, err
	}
	return ev, nil
}

// prove waits for the hog to run, then measures its CPU use window by window until one shows
// at least half of CPUs.
func (n *NoisyNeighbour) prove(ctx context.Context) (Evidence, error) {
	pod, err := waitRunning(ctx, n.Client, n.pod, n.timeout())
	if err != nil {
		return Evidence{}, fmt.Errorf("%s: %w", n.Name(), err)
	}
	deadline := time.Now().Add(n.timeout())
	n.pod = pod
	if n.Shape == ShapeDownload {
		if err := n.startClient(ctx); err != nil {
			return Evidence{}, fmt.Errorf("%s: %w", n.Name(), err)
		}
	}
	if n.group, err = n.Cluster.PodCgroup(pod); err != nil {
		return Evidence{}, fmt.Errorf("%s: the hog's cgroup: %w", n.Name(), err)
	}
	window := orDefault(n.Window, 2*time.Second)
	best := 0.0
	for {
		u0, err := n.group.CPUUsage()
		if err != nil {
			return Evidence{}, fmt.Errorf("%s: %w", n.Name(), err)
		}
		t0 := time.Now()
		if err := pause(ctx, window); err != nil {
			return Evidence{}, fmt.Errorf("%s: measuring the hog: %w", n.Name(), err)
		}
		u1, err := n.group.CPUUsage()
		if err != nil {
			return Evidence{}, fmt.Errorf("%s: %w", n.Name(), err)
		}
		rate := (u1 - u0).Seconds() / time.Since(t0).Seconds()
		best = max(best, rate)
		if rate >= n.CPUs*orDefault(n.MinShare, 0.5) {
			n.proven, n.atUse = time.Now(), u1
			return Evidence{At: n.proven,
				Summary: fmt.Sprintf("hog on node %d burns %.2f CPU (asked %g%s) next to the node's pods", n.Node, rate, n.CPUs, n.shapeNote()),
				Values:  map[string]float64{"cpus": rate, "askedCPUs": n.CPUs}}, nil
		}
		if time.Now().After(deadline) {
			return Evidence{}, fmt.Errorf("%s: the hog burned at most %.2f CPU of %g asked: the host is busier than the node; lower CPUs or free the host", n.Name(), best, n.CPUs)
		}
	}
}

// waitRunning polls the pod until its containers run, and fails early, saying why, when they
// cannot: unschedulable, image missing, crashing.
func waitRunning(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, timeout time.Duration) (*corev1.Pod, error) {
	why := "not scheduled"
	var got *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, pollEvery, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		running, stuck := podStarting(p)
		if stuck != "" {
			return false, fmt.Errorf("pod %s/%s cannot run: %s", p.Namespace, p.Name, stuck)
		}
		if p.Spec.NodeName != "" {
			why = "scheduled on " + p.Spec.NodeName + ", not running"
		}
		got = p
		return running, nil
	})
	if err != nil && wait.Interrupted(err) && ctx.Err() == nil {
		return nil, fmt.Errorf("pod %s/%s still %s after %s: inspect it with kubectl describe", pod.Namespace, pod.Name, why, timeout)
	}
	if err != nil {
		return nil, err
	}
	return got, nil
}

// podStarting tells whether every container of p runs, or else what keeps it from ever running
// ("" while it may still start).
func podStarting(p *corev1.Pod) (running bool, stuck string) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return false, "unschedulable: " + c.Message + " (lower its CPU request, or use BestEffort)"
		}
	}
	running = p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == len(p.Spec.Containers)
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName":
				return false, fmt.Sprintf("image %s: %s: build it with 'make images' and load it into the cluster (it is loaded at cluster up)", cs.Image, w.Reason)
			case "CrashLoopBackOff", "CreateContainerError", "CreateContainerConfigError", "RunContainerError":
				return false, fmt.Sprintf("container %s: %s %s: see its log (kubectl logs)", cs.Name, w.Reason, w.Message)
			}
		}
		running = running && cs.State.Running != nil
	}
	return running, ""
}

// Clear deletes the hog pod, waits until it is gone and reports the CPU it burned.
func (n *NoisyNeighbour) Clear(ctx context.Context) (Evidence, error) {
	if n.pod == nil {
		return Evidence{At: time.Now(), Summary: "nothing to clear: no hog runs"}, nil
	}
	var used time.Duration
	if n.group != nil {
		used, _ = n.group.CPUUsage() // before the delete removes the cgroup
	}
	stopped := time.Now()
	pod := n.pod
	if n.client != nil {
		if err := deletePod(ctx, n.Client, n.client, n.timeout()); err != nil {
			return Evidence{}, fmt.Errorf("%s: the download client: %w", n.Name(), err)
		}
		n.client = nil
	}
	if err := deletePod(ctx, n.Client, pod, n.timeout()); err != nil {
		return Evidence{}, fmt.Errorf("%s: %w", n.Name(), err)
	}
	ev := Evidence{At: time.Now(), Summary: fmt.Sprintf("hog on node %d removed after burning %.1f CPU-seconds", n.Node, used.Seconds()),
		Values: map[string]float64{"cpuSeconds": used.Seconds()}}
	if !n.proven.IsZero() {
		avg := (used - n.atUse).Seconds() / stopped.Sub(n.proven).Seconds()
		ev.Summary += fmt.Sprintf(", %.2f CPU on average since the proof", avg)
		ev.Values["avgCPUs"] = avg
	}
	n.pod, n.group, n.proven = nil, nil, time.Time{}
	return ev, nil
}

// shapeNote names the load in the evidence.
func (n *NoisyNeighbour) shapeNote() string {
	if n.Shape != ShapeDownload {
		return ""
	}
	return fmt.Sprintf(", serving %d parallel %d MiB downloads to node %d", n.streams(), hog.DefaultMiB, n.clientNode())
}

func (n *NoisyNeighbour) streams() int { return orDefault(n.Streams, 4) }

// clientNode is ClientNode, else the last node other than Node, else Node.
func (n *NoisyNeighbour) clientNode() int {
	if n.ClientNode > 0 {
		return n.ClientNode
	}
	for k := len(n.Cluster.Nodes()); k >= 1; k-- {
		if k != n.Node {
			return k
		}
	}
	return n.Node
}

// startClient runs the pod that keeps the downloads from the serving hog going.
func (n *NoisyNeighbour) startClient(ctx context.Context) error {
	if n.pod.Status.PodIP == "" {
		return fmt.Errorf("the serving hog %s has no IP", n.pod.Name)
	}
	if k := n.clientNode(); k < 1 || k > len(n.Cluster.Nodes()) {
		return fmt.Errorf("client node %d: the cluster has nodes 1 to %d", k, len(n.Cluster.Nodes()))
	}
	spec := n.podSpec()
	spec.Name = fmt.Sprintf("hog-client-node%d", n.Node)
	spec.Labels = map[string]string{"app": "meshchaos-hog-client", InjectorLabel: "noisy-neighbour"}
	spec.Spec.NodeSelector = map[string]string{cluster.NodeLabel: strconv.Itoa(n.clientNode())}
	c := &spec.Spec.Containers[0]
	c.Ports, c.Resources = nil, corev1.ResourceRequirements{}
	c.Args = []string{"--download", fmt.Sprintf("http://%s/download", net.JoinHostPort(n.pod.Status.PodIP, strconv.Itoa(downloadPort))),
		"--parallel", strconv.Itoa(n.streams())}
	client, err := n.Client.CoreV1().Pods(spec.Namespace).Create(ctx, spec, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the download client %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	n.client = client
	if n.client, err = waitRunning(ctx, n.Client, client, n.timeout()); err != nil {
		n.client = client
		return fmt.Errorf("the download client: %w", err)
	}
	return nil
}

var _ Injector = (*NoisyNeighbour)(nil)
