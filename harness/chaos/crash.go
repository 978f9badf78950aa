package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
)

// ContainerCrash makes echo's process in every running matching pod exit with status 1 (POST
// /control/crash, workloads/echo), as a crashing container does: the pod turns NotReady, kubelet
// restarts the container (after its crash-loop back-off) and the pod turns Ready again with the
// same IP. Its evidence is the API's word: each pod's restart count grew and it is Ready again.
type ContainerCrash struct {
	// Cluster dials the pods (its Dialer of each pod's node); Client reaches the apiserver.
	Cluster cluster.Cluster
	Client  kubernetes.Interface
	// Namespace and Selector choose the pods (they must run echo).
	Namespace, Selector string
	// Port is echo's port (0: the container port named "http", else 8080).
	Port int
	// Timeout bounds the wait for each pod to be restarted and Ready (default 2 minutes; kubelet's
	// back-off grows with every crash: 10 s, 20 s, 40 s … up to 5 minutes).
	Timeout time.Duration
}

// Name implements Injector: "container-crash/NAMESPACE/SELECTOR".
func (k *ContainerCrash) Name() string { return "container-crash/" + k.Namespace + "/" + k.Selector }

// Inject crashes every running matching pod's echo and returns once each was restarted and is
// Ready again.
func (k *ContainerCrash) Inject(ctx context.Context) (Evidence, error) {
	pods, err := livePods(ctx, k.Client, k.Namespace, k.Selector)
	if err != nil {
		return Evidence{}, fmt.Errorf("%s: %w", k.Name(), err)
	}
	start := time.Now()
	var crashed []corev1.Pod
	var errs []error
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			continue
		}
		if err := postEcho(ctx, k.Cluster, &p, k.Port, "/control/crash"); err != nil {
			errs = append(errs, err)
			continue
		}
		crashed = append(crashed, p)
	}
	if len(crashed) == 0 {
		errs = append(errs, errors.New("no running pod with an IP matches: check the namespace and selector, and that the pods run"))
	}
	if err := errors.Join(errs...); err != nil {
		return Evidence{}, fmt.Errorf("%s: %w", k.Name(), err)
	}
	timeout := orDefault(k.Timeout, 2*time.Minute)
	restarts := 0
	for _, p := range crashed {
		before := restartCount(&p)
		_, err := kube.WaitPod(ctx, k.Client, p.Namespace, p.Name, timeout, func(now *corev1.Pod) (bool, error) {
			return restartCount(now) > before && podReady(now), nil
		})
		if err != nil {
			return Evidence{}, fmt.Errorf("%s: pod %s was not restarted and Ready again: %w (kubectl describe pod shows its back-off)", k.Name(), p.Name, err)
		}
		restarts++
	}
	took := time.Since(start)
	return Evidence{At: time.Now(),
		Summary: fmt.Sprintf("%d pod(s) crashed (exit status 1), restarted by kubelet and Ready again %.1f s later", restarts, took.Seconds()),
		Values:  map[string]float64{"pods": float64(restarts), "readyAgainSeconds": took.Seconds()}}, nil
}

// Clear implements Injector: a crash is over once the container runs again.
func (k *ContainerCrash) Clear(context.Context) (Evidence, error) {
	return Evidence{At: time.Now(), Summary: "nothing to clear: the containers were restarted"}, nil
}

// restartCount sums the restarts of a pod's containers.
func restartCount(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

var _ Injector = (*ContainerCrash)(nil)
