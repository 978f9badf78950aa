package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/workloads/adsload"
)

// Fleet is a mesh's adsload pods read as one fleet: every figure is the sum or the merge over
// its pods, and a pod that cannot be read fails the read (a fleet measured without one of its
// pods is not measured).
type Fleet struct {
	Pods []FleetPod

	mu      sync.Mutex
	clients map[int]*http.Client
}

// FleetPod is one adsload pod of a fleet.
type FleetPod struct {
	// Name is its Deployment's (and its app label's); Node the node it is pinned to (0: any).
	Name string
	Node int
	// First and Clients are its clients' indexes: First … First+Clients-1.
	First, Clients int
	// URL is its HTTP base URL (/stats, /tracked, /metrics); Dial reaches it (nil: this host's
	// network).
	URL  string
	Dial cluster.DialFunc
}

// FleetStats are a fleet's figures: each pod's, in the fleet's order, and their sum.
type FleetStats struct {
	Total adsload.Stats
	Pods  []adsload.Stats
}

// fleetPods divides a's clients among its pods as evenly as possible (the first Clients%Pods
// pods have one more), each pod's clients named from the previous pod's last on, and pins the
// pods round-robin over a.Nodes (every pod on a.Node without them). One pod is "adsload", as
// a mesh always deployed it; several are adsload-0, adsload-1, …
func fleetPods(a ADSLoad) []FleetPod {
	n := max(a.Pods, 1)
	out := make([]FleetPod, 0, n)
	first := 0
	for k := range n {
		p := FleetPod{Name: "adsload", Node: a.Node, First: first, Clients: a.Clients / n}
		if k < a.Clients%n {
			p.Clients++
		}
		if n > 1 {
			p.Name = fmt.Sprintf("adsload-%d", k)
		}
		if len(a.Nodes) > 0 {
			p.Node = a.Nodes[k%len(a.Nodes)]
		}
		first += p.Clients
		out = append(out, p)
	}
	return out
}

// Clients is how many clients the fleet runs.
func (f *Fleet) Clients() int {
	n := 0
	for _, p := range f.Pods {
		n += p.Clients
	}
	return n
}

// Stats reads every pod's /stats and sums them (adsload.MergeStats).
func (f *Fleet) Stats(ctx context.Context) (FleetStats, error) {
	pods, err := readAll(ctx, f, "/stats", func(p FleetPod, st *adsload.Stats) error {
		if st.First != p.First || st.Clients != p.Clients {
			return fmt.Errorf("adsload pod %s runs clients %d to %d, not %d to %d", p.Name, st.First, st.First+st.Clients-1, p.First, p.First+p.Clients-1)
		}
		return nil
	})
	if err != nil {
		return FleetStats{}, err
	}
	return FleetStats{Total: adsload.MergeStats(pods...), Pods: pods}, nil
}

// Tracked reads every pod's receipts of the tracked clusters (/tracked) and joins them: one
// entry per client of the fleet, in the fleet's order.
func (f *Fleet) Tracked(ctx context.Context) (*adsload.Tracked, error) {
	pods, err := readAll(ctx, f, "/tracked", func(p FleetPod, t *adsload.Tracked) error {
		if len(t.Clients) != p.Clients {
			return fmt.Errorf("adsload pod %s has the receipts of %d clients, not %d", p.Name, len(t.Clients), p.Clients)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	t, err := adsload.MergeTracked(pods...)
	return &t, err
}

// Summary says how the fleet is spread and what s (its Stats) says of it, for the timeline:
// the totals, then every pod's node, clients, configured clients and RSS.
func (f *Fleet) Summary(s FleetStats) string {
	var b strings.Builder
	t := s.Total
	fmt.Fprintf(&b, "%d ADS clients on %d pod(s): %d connected, %d configured, %d ACKs, %d NACKs, RSS %s in all",
		t.Clients, len(s.Pods), t.Connected, t.Configured, t.ACKs, t.NACKs, mib(t.RSSBytes))
	for i, p := range s.Pods {
		name, node := "?", "any node"
		if i < len(f.Pods) {
			name = f.Pods[i].Name
			if f.Pods[i].Node > 0 {
				node = "node " + strconv.Itoa(f.Pods[i].Node)
			}
		}
		fmt.Fprintf(&b, "; %s (%s): %d clients, %d configured, RSS %s", name, node, p.Clients, p.Configured, mib(p.RSSBytes))
	}
	return b.String()
}

// Result is s (this fleet's Stats, read at) as the run's summary records it.
func (f *Fleet) Result(s FleetStats, at time.Time) results.Fleet {
	t := s.Total
	out := results.Fleet{At: at.UTC(), Clients: t.Clients, Connected: t.Connected, Configured: t.Configured, RSSBytes: t.RSSBytes}
	if t.Clients > 0 {
		out.RSSBytesPerClient = float64(t.RSSBytes) / float64(t.Clients)
	}
	for i, p := range s.Pods {
		fp := results.FleetPod{Clients: p.Clients, Configured: p.Configured, RSSBytes: p.RSSBytes}
		if i < len(f.Pods) {
			fp.Name, fp.Node = f.Pods[i].Name, f.Pods[i].Node
		}
		out.Pods = append(out.Pods, fp)
	}
	return out
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// readAll GETs path from every pod at once and decodes each answer as a T, which check then
// holds against the pod; any pod's failure fails the read, naming the pod.
func readAll[T any](ctx context.Context, f *Fleet, path string, check func(FleetPod, *T) error) ([]T, error) {
	if len(f.Pods) == 0 {
		return nil, errors.New("the fleet has no adsload pod")
	}
	out := make([]T, len(f.Pods))
	errs := make([]error, len(f.Pods))
	var wg sync.WaitGroup
	for i, p := range f.Pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.get(ctx, i, p.URL+path, &out[i]); err != nil {
				errs[i] = fmt.Errorf("adsload pod %s: %w", p.Name, err)
				return
			}
			errs[i] = check(p, &out[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// get GETs url from pod i and decodes its JSON into v.
func (f *Fleet) get(ctx context.Context, i int, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := f.client(i).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// client is pod i's HTTP client, through its Dial.
func (f *Fleet) client(i int) *http.Client {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clients == nil {
		f.clients = map[int]*http.Client{}
	}
	c := f.clients[i]
	if c == nil {
		dial := f.Pods[i].Dial
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		c = &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 10 * time.Second}
		f.clients[i] = c
	}
	return c
}

// Close closes the fleet's idle connections.
func (f *Fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.clients {
		c.CloseIdleConnections()
	}
}

// fleetPort is the adsload pods' HTTP port (/stats, /tracked, /metrics).
const fleetPort = 8080

// fleetProgressEvery is how often a fleet's progress is logged while its pods become Ready.
const fleetProgressEvery = 30 * time.Second

// fleetProgress logs, every every until ctx ends, how many of the fleet's clients the control
// plane has served so far (each pod's /stats, read as soon as the pod has an address), and how
// often the control plane's container restarted meanwhile, with why: a fleet of thousands takes
// minutes to admit at a control plane's new-stream rate, and a control plane killed for memory
// on the way would otherwise show only as the deadline's error, many minutes later.
func (m *Mesh) fleetProgress(ctx context.Context, rec Recorder, pods []FleetPod, deployed time.Time, every time.Duration) {
	f := &Fleet{Pods: pods}
	defer f.Close()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var served, connected int64
		read := 0
		for i := range f.Pods {
			p := &f.Pods[i]
			if p.URL == "" {
				var err error
				if p.URL, p.Dial, err = m.fleetPodAddress(ctx, *p); err != nil {
					continue // not running yet
				}
			}
			var st adsload.Stats
			if err := f.get(ctx, i, p.URL+"/stats", &st); err != nil {
				continue
			}
			served, connected, read = served+st.Configured, connected+st.Connected, read+1
		}
		if ctx.Err() != nil {
			return
		}
		line := fmt.Sprintf("adsload: %d of %d clients served, %d connected (%d of %d pod(s) read), %s after the deployments were applied",
			served, f.Clients(), connected, read, len(f.Pods), time.Since(deployed).Round(time.Second))
		if r := m.controlPlaneRestarts(ctx); r.count > 0 {
			line += "; " + r.String()
		}
		rec.Logf("%s", line)
	}
}

// fleetPodAddress is how to reach adsload pod p: its HTTP base URL and the dialer of its node;
// an error until exactly one of its pods runs.
func (m *Mesh) fleetPodAddress(ctx context.Context, p FleetPod) (string, cluster.DialFunc, error) {
	ips, err := kube.PodIPs(ctx, m.Client, m.Namespace, "app="+p.Name)
	if err != nil {
		return "", nil, err
	}
	if len(ips) != 1 {
		return "", nil, fmt.Errorf("want 1 adsload pod %s, found %d", p.Name, len(ips))
	}
	return "http://" + net.JoinHostPort(ips[0], strconv.Itoa(fleetPort)), m.Cluster.Dialer(max(p.Node, 1)), nil
}

// cpRestarts is how often the control plane's xDS container restarted, and how it last ended.
type cpRestarts struct {
	container string
	count     int32
	last      *corev1.ContainerStateTerminated
}

func (r cpRestarts) oomKilled() bool { return r.last != nil && r.last.Reason == "OOMKilled" }

func (r cpRestarts) String() string {
	s := fmt.Sprintf("the control plane's %s container restarted %d time(s)", r.container, r.count)
	if r.last != nil {
		s += fmt.Sprintf(", last %s (exit %d)", r.last.Reason, r.last.ExitCode)
	}
	return s
}

// controlPlaneRestarts reads the control plane's restarts (none when the control plane is not
// the run's to read, or cannot be read).
func (m *Mesh) controlPlaneRestarts(ctx context.Context) cpRestarts {
	cp := m.Spec.ControlPlane
	if cp == nil || !slices.Contains(m.Namespaces, cp.Namespace()) {
		return cpRestarts{}
	}
	r := cpRestarts{container: cp.Container()}
	pods, err := m.Client.CoreV1().Pods(cp.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: cp.Selector()})
	if err != nil {
		return r
	}
	for i := range pods.Items {
		for _, c := range pods.Items[i].Status.ContainerStatuses {
			if c.Name == r.container && c.RestartCount > 0 {
				r.count += c.RestartCount
				if t := kube.LastTermination(&pods.Items[i], r.container); t != nil {
					r.last = t
				}
			}
		}
	}
	return r
}
