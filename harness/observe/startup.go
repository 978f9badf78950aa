package observe

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/traffic"
	"github.com/meshchaos/meshchaos/results"
)

// Startup measures how the pods of one app Deployment come up in one sidecar start mode (the
// sidecar-startup experiment): it watches them from creation (the harness's own clock: the API
// keeps whole seconds), and once they are up Collect reads each pod's status (app restarts,
// exit codes), the app's own report of its start-up calls (GET /attempts) and the proxy's time
// to first config (server.initialization_time_ms).
type Startup struct {
	Client              kubernetes.Interface
	Namespace, Selector string
	Mode                string
	// Dial reaches pod IPs; AppPort serves /attempts, AdminPort the proxy's /stats.
	Dial               DialContext
	AppPort, AdminPort int
	// AppContainer and ProxyContainer name the containers.
	AppContainer, ProxyContainer string

	w       *PodWatcher
	mu      sync.Mutex
	created map[string]time.Time // by namespace/name: when the watcher saw the pod
	ready   map[string]time.Time // first Ready seen
	result  *results.Startup
	reads   int
	fails   int
	lastErr error
}

// Name implements Measurement.
func (m *Startup) Name() string { return "startup-" + m.Mode }

// Role implements Measurement.
func (m *Startup) Role() Role { return "app" }

// Start implements Measurement: the watch is in place when it returns, before the app exists.
func (m *Startup) Start(ctx context.Context, sink Sink) error {
	m.created, m.ready = map[string]time.Time{}, map[string]time.Time{}
	m.w = NewPodWatcher(m.Client, m.Namespace, m.Selector, func(e results.Event) {
		m.mu.Lock()
		switch e.Kind {
		case PodCreated:
			m.created[e.Object] = *e.ObservedAt
		case PodReady:
			if _, ok := m.ready[e.Object]; !ok {
				m.ready[e.Object] = *e.ObservedAt
			}
		}
		m.mu.Unlock()
		if e.Kind != PodCreated && e.Kind != PodReady && e.Kind != PodNotReady {
			sink.RecordEvent(e) // restarts and terminations go on the timeline
		}
	})
	if err := m.w.Start(ctx); err != nil {
		return fmt.Errorf("watch the %s app pods: %w", m.Mode, err)
	}
	return nil
}

// startReport is the app's start-up report (workloads/startupapp.Report).
type startReport struct {
	Succeeded bool `json:"succeeded"`
	Attempts  []struct {
		At         time.Time `json:"at"`
		Error      string    `json:"error"`
		DurationMs float64   `json:"durationMs"`
	} `json:"attempts"`
}

// Collect reads every pod's figures now; call it once the Deployment is up.
func (m *Startup) Collect(ctx context.Context) error {
	pods, err := m.Client.CoreV1().Pods(m.Namespace).List(ctx, metav1.ListOptions{LabelSelector: m.Selector})
	if err != nil {
		return fmt.Errorf("list the %s app pods: %w", m.Mode, err)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: m.Dial}, Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	r := &results.Startup{Mode: m.Mode, ExitCodes: map[string]int{}}
	var first, ready, proxy []time.Duration
	for i := range pods.Items {
		p := &pods.Items[i]
		name := p.Namespace + "/" + p.Name
		m.mu.Lock()
		created, watched := m.created[name]
		readyAt, isReady := m.ready[name]
		m.mu.Unlock()
		if !watched {
			continue // not created while watched: no creation instant to measure from
		}
		r.Pods++
		failedFirst := false
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != m.AppContainer {
				continue
			}
			r.AppRestarts += int(cs.RestartCount)
			for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if t != nil {
					r.ExitCodes[strconv.Itoa(int(t.ExitCode))]++
					// The app exits non-zero only when its start-up calls failed.
					failedFirst = failedFirst || t.ExitCode != 0
				}
			}
		}
		if isReady {
			ready = append(ready, readyAt.Sub(created))
		}
		var rep startReport
		if err := m.getJSON(ctx, client, p.Status.PodIP, m.AppPort, "/attempts", &rep); err == nil && rep.Succeeded && len(rep.Attempts) > 0 {
			r.Started++
			failedFirst = failedFirst || rep.Attempts[0].Error != ""
			last := rep.Attempts[len(rep.Attempts)-1]
			first = append(first, last.At.Add(time.Duration(last.DurationMs*float64(time.Millisecond))).Sub(created))
		}
		if failedFirst {
			r.FailedFirstCalls++
		}
		var stats map[string]int64
		if err := m.getJSON(ctx, client, p.Status.PodIP, m.AdminPort, "/stats?format=json", &stats); err == nil {
			if ms, ok := stats["server.initialization_time_ms"]; ok {
				proxy = append(proxy, time.Duration(ms)*time.Millisecond)
			}
		}
	}
	r.FirstSuccessMs, r.ReadyMs, r.ProxyFirstConfigMs = traffic.Quantiles(first), traffic.Quantiles(ready), traffic.Quantiles(proxy)
	m.mu.Lock()
	m.result = r
	m.mu.Unlock()
	if r.Pods == 0 {
		return fmt.Errorf("no %s app pod was seen from its creation", m.Mode)
	}
	return nil
}

func (m *Startup) getJSON(ctx context.Context, c *http.Client, ip string, port int, path string, v any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ip, strconv.Itoa(port))+path, nil)
	resp, err := c.Do(req)
	if err == nil {
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", req.URL, resp.Status)
		} else {
			err = json.NewDecoder(resp.Body).Decode(v)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.fails++
		m.lastErr = err
		return err
	}
	m.reads++
	return nil
}

// Result is what Collect found (nil before).
func (m *Startup) Result() *results.Startup {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.result
}

// SetPodSpec records where the injected pod spec was saved.
func (m *Startup) SetPodSpec(path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.result != nil {
		m.result.PodSpec = path
	}
}

// Gather implements Measurement.
func (m *Startup) Gather(s *results.Summary) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := results.Measurement{Name: m.Name(), Role: string(m.Role()), Samples: m.reads, Failures: m.fails}
	if m.lastErr != nil {
		st.Error = m.lastErr.Error()
	}
	if m.result != nil && m.result.Pods > 0 {
		st.OK = true
		// A new slice: the summary handed in may share its backing array with the recorder's.
		kept := make([]results.Startup, 0, len(s.Startup)+1)
		for _, r := range s.Startup {
			if r.Mode != m.Mode {
				kept = append(kept, r)
			}
		}
		s.Startup = append(kept, *m.result)
	} else if st.Error == "" {
		st.Error = "not collected"
	}
	status(s, st)
}
