package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster"
)

// EndpointFlap makes running echo pods flap Ready/NotReady, as the single-replica service of the
// flapping-pods incident did: their endpoints go 0→N→0 while the pods keep running. It switches
// echo's /ready at run time (POST /control/flap, /control/steady; workloads/echo), through a
// connection from the pod's node, so nothing restarts. Pods created after Inject do not flap.
type EndpointFlap struct {
	// Cluster dials the pods (its Dialer of each pod's node).
	Cluster cluster.Cluster
	// Client reaches the apiserver, whose pod conditions are the evidence.
	Client kubernetes.Interface
	// Namespace and Selector choose the pods (they must run echo with a readiness probe on /ready).
	Namespace, Selector string
	// Up and Down are how long /ready answers 200, then 503, in turn. Make both longer than the
	// readiness probe's period, or kubelet misses phases.
	Up, Down time.Duration
	// Port is echo's port (0: the container port named "http", else 8080).
	Port int
	// Timeout bounds each wait for a transition and for the pods to be Ready again
	// (default 30 s + 2×(Up+Down)).
	Timeout time.Duration
	// Settle is how long every pod must stay Ready before Clear returns (default 2 s): longer
	// than the readiness probe's period, so a probe that failed just before the switch-off
	// cannot turn a pod NotReady after Clear.
	Settle time.Duration

	mu      sync.Mutex
	watch   *readinessWatch
	started time.Time
}

// Name implements Injector: "endpoint-flap/NAMESPACE/SELECTOR".
func (f *EndpointFlap) Name() string { return "endpoint-flap/" + f.Namespace + "/" + f.Selector }

func (f *EndpointFlap) timeout() time.Duration {
	return orDefault(f.Timeout, 30*time.Second+2*(f.Up+f.Down))
}

// Inject switches flapping on in every running matching pod and returns once the API showed the
// first readiness transition.
func (f *EndpointFlap) Inject(ctx context.Context) (Evidence, error) {
	if f.Up <= 0 || f.Down <= 0 {
		return Evidence{}, fmt.Errorf("%s: Up %s, Down %s: set both above 0 (e.g. 3s and 2s)", f.Name(), f.Up, f.Down)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watch != nil {
		return Evidence{}, fmt.Errorf("%s: already flapping: Clear it before injecting again", f.Name())
	}
	w, err := watchReadiness(ctx, f.Client, f.Namespace, f.Selector)
	if err != nil {
		return Evidence{}, fmt.Errorf("%s: %w", f.Name(), err)
	}
	start := time.Now()
	q := url.Values{"up": {f.Up.String()}, "down": {f.Down.String()}}
	n, err := f.control(ctx, "/control/flap?"+q.Encode())
	if err == nil && n == 0 {
		err = errors.New("no running pod with an IP matches: check the namespace and selector, and that the pods run")
	}
	if err == nil {
		_, err = w.waitFor(ctx, f.timeout(), 0, func(c counts) bool { return c.toReady+c.toNotReady > 0 })
		if err != nil {
			err = fmt.Errorf("no pod changed readiness after flapping was switched on (%w): check that their readiness probe is GET /ready with a period below Up and Down", err)
		}
	}
	if err != nil {
		_, _ = f.control(context.WithoutCancel(ctx), "/control/steady") // best effort: leave them as found
		w.close()
		return Evidence{}, fmt.Errorf("%s: %w", f.Name(), err)
	}
	f.watch, f.started = w, start
	c, _ := w.counts()
	state := "NotReady"
	if c.first.ready {
		state = "Ready"
	}
	return Evidence{At: time.Now(),
		Summary: fmt.Sprintf("%d pods flap (Ready %s, NotReady %s): %s turned %s %.1f s after the switch",
			n, f.Up, f.Down, c.first.pod, state, c.first.at.Sub(start).Seconds()),
		Values: map[string]float64{"pods": float64(n), "firstTransitionSeconds": c.first.at.Sub(start).Seconds()},
	}, nil
}

// Clear makes the pods steady again, waits until every matching pod has been Ready for Settle
// and reports the transitions the API showed since Inject.
func (f *EndpointFlap) Clear(ctx context.Context) (Evidence, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watch == nil {
		return Evidence{At: time.Now(), Summary: "nothing to clear: not flapping"}, nil
	}
	w := f.watch
	_, cerr := f.control(ctx, "/control/steady")
	c, werr := w.waitFor(ctx, f.timeout(), orDefault(f.Settle, 2*time.Second), func(c counts) bool { return c.pods > 0 && c.readyPods == c.pods })
	w.close()
	f.watch = nil
	ev := Evidence{At: time.Now(),
		Summary: fmt.Sprintf("pods flapped for %.1f s: %d Ready→NotReady and %d NotReady→Ready transitions; %d of %d Ready now",
			time.Since(f.started).Seconds(), c.toNotReady, c.toReady, c.readyPods, c.pods),
		Values: map[string]float64{"readyToNotReady": float64(c.toNotReady), "notReadyToReady": float64(c.toReady),
			"pods": float64(c.pods), "readyPods": float64(c.readyPods)}}
	if cerr != nil {
		return ev, fmt.Errorf("%s: %w", f.Name(), cerr)
	}
	if werr != nil {
		return ev, fmt.Errorf("%s: %d of %d pods Ready after flapping was switched off (%w): inspect them with kubectl describe", f.Name(), c.readyPods, c.pods, werr)
	}
	return ev, nil
}

// control POSTs path to echo in every running matching pod and returns how many took it.
func (f *EndpointFlap) control(ctx context.Context, path string) (int, error) {
	pods, err := livePods(ctx, f.Client, f.Namespace, f.Selector)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			continue
		}
		if err := postEcho(ctx, f.Cluster, p, f.Port, path); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// postEcho POSTs path to echo in pod p (on port, 0: its own), through p's node.
func postEcho(ctx context.Context, c cluster.Cluster, p *corev1.Pod, port int, path string) error {
	k, err := nodeIndex(c, p.Spec.NodeName)
	if err != nil {
		return err
	}
	addr := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(echoPort(p, port))) + path
	if err := post(ctx, c.Dialer(k), addr); err != nil {
		return fmt.Errorf("pod %s: %w: is it serving, and does it run echo from this meshchaos (make images, then reload the images)?", p.Name, err)
	}
	return nil
}

// echoPort is the port to reach echo on: port if set, else the container port named "http",
// else echo's default 8080.
func echoPort(p *corev1.Pod, port int) int {
	if port != 0 {
		return port
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "http" {
				return int(cp.ContainerPort)
			}
		}
	}
	return 8080
}

var _ Injector = (*EndpointFlap)(nil)
