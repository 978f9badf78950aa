package observe

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// PromMemory reads a process's memory from its own Prometheus endpoint, for where the cgroup is
// out of reach (a kind or remote cluster): a gauge such as process_resident_memory_bytes against
// the limit the experiment set on the container. Each read is one scrape, so poll it at a
// modest interval (OOMTrigger.Interval of a second or so).
type PromMemory struct {
	URL    string
	Metric string // default process_resident_memory_bytes
	Limit  int64
	Client *http.Client
}

// ReadMemory scrapes and returns the gauge as the working set.
func (p *PromMemory) ReadMemory() (MemoryUsage, error) {
	metric := p.Metric
	if metric == "" {
		metric = "process_resident_memory_bytes"
	}
	client := p.Client
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fams, err := fetchFamilies(ctx, client, p.URL)
	if err != nil {
		return MemoryUsage{}, fmt.Errorf("read memory: %w", err)
	}
	mf := fams[metric]
	if mf == nil || len(mf.GetMetric()) == 0 {
		return MemoryUsage{}, fmt.Errorf("read memory from %s: no metric %s", p.URL, metric)
	}
	m := mf.GetMetric()[0]
	v := m.GetGauge().GetValue()
	if m.GetGauge() == nil {
		v = m.GetUntyped().GetValue()
	}
	return MemoryUsage{At: time.Now(), Usage: int64(v), WorkingSet: int64(v), Limit: p.Limit}, nil
}
