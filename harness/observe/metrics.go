package observe

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meshchaos/meshchaos/results"
)

// Scraper scrapes a Prometheus text endpoint (a control plane's /metrics) on an interval and
// keeps every sample as a time series: counters, gauges and untyped values under their name;
// summaries as name{quantile}, name_sum, name_count; histograms as name_bucket{le}, name_sum,
// name_count.
type Scraper struct {
	url    string
	client *http.Client
	// Keep, when set, selects the metric families to record (others are parsed and dropped).
	Keep func(family string) bool

	mu     sync.Mutex
	series map[string]*results.Series
	order  []string
	errs   int
	ok     int
}

// NewScraper scrapes url (e.g. "http://127.0.0.1:15014/metrics"). dial may be nil.
func NewScraper(url string, dial DialContext) *Scraper {
	tr := &http.Transport{}
	if dial != nil {
		tr.DialContext = dial
	}
	return &Scraper{url: url, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, series: map[string]*results.Series{}}
}

// Scrape fetches and records one scrape.
func (s *Scraper) Scrape(ctx context.Context) error {
	families, err := fetchFamilies(ctx, s.client, s.url)
	if err != nil {
		return err
	}
	s.Record(time.Now().UTC(), families)
	s.mu.Lock()
	s.ok++
	s.mu.Unlock()
	return nil
}

// fetchFamilies GETs a Prometheus text endpoint and parses it.
func fetchFamilies(ctx context.Context, client *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return families, nil
}

// Record adds parsed families as samples at time at.
func (s *Scraper) Record(at time.Time, families map[string]*dto.MetricFamily) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if s.Keep != nil && !s.Keep(name) {
			continue
		}
		mf := families[name]
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				s.add(name, labels, at, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				s.add(name, labels, at, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				s.add(name, labels, at, m.GetUntyped().GetValue())
			case dto.MetricType_SUMMARY:
				sm := m.GetSummary()
				for _, q := range sm.GetQuantile() {
					s.add(name, with(labels, "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)), at, q.GetValue())
				}
				s.add(name+"_sum", labels, at, sm.GetSampleSum())
				s.add(name+"_count", labels, at, float64(sm.GetSampleCount()))
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					s.add(name+"_bucket", with(labels, "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)), at, float64(b.GetCumulativeCount()))
				}
				s.add(name+"_sum", labels, at, h.GetSampleSum())
				s.add(name+"_count", labels, at, float64(h.GetSampleCount()))
			}
		}
	}
}

func with(labels map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(labels)+1)
	for a, b := range labels {
		out[a] = b
	}
	out[k] = v
	return out
}

func seriesKey(name string, labels map[string]string) string {
	var b strings.Builder
	b.WriteString(name)
	for _, k := range results.SortedKeys(labels) {
		fmt.Fprintf(&b, "\x00%s=%s", k, labels[k])
	}
	return b.String()
}

func (s *Scraper) add(name string, labels map[string]string, at time.Time, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return // JSON cannot carry them, and no check can use them
	}
	k := seriesKey(name, labels)
	sr := s.series[k]
	if sr == nil {
		sr = &results.Series{Name: name, Samples: []results.Sample{}}
		if len(labels) > 0 {
			sr.Labels = labels
		}
		s.series[k] = sr
		s.order = append(s.order, k)
	}
	sr.Samples = append(sr.Samples, results.Sample{At: at, Value: v})
}

// Run scrapes every interval until ctx ends. Failed scrapes (the process is restarting) are
// counted and passed to onErr; they do not stop the loop.
func (s *Scraper) Run(ctx context.Context, interval time.Duration, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.Scrape(ctx); err != nil && ctx.Err() == nil {
			s.mu.Lock()
			s.errs++
			s.mu.Unlock()
			if onErr != nil {
				onErr(err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Series returns copies of the recorded series, in first-seen order.
func (s *Scraper) Series() []results.Series {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]results.Series, 0, len(s.order))
	for _, k := range s.order {
		sr := *s.series[k]
		sr.Samples = append([]results.Sample(nil), sr.Samples...)
		out = append(out, sr)
	}
	return out
}

// Last returns the latest value of the series name with exactly labels.
func (s *Scraper) Last(name string, labels map[string]string) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.series[seriesKey(name, labels)]
	if sr == nil || len(sr.Samples) == 0 {
		return 0, false
	}
	return sr.Samples[len(sr.Samples)-1].Value, true
}

// Max returns the largest value ever seen of the series name with exactly labels.
func (s *Scraper) Max(name string, labels map[string]string) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.series[seriesKey(name, labels)]
	if sr == nil || len(sr.Samples) == 0 {
		return 0, false
	}
	m := sr.Samples[0].Value
	for _, x := range sr.Samples {
		m = max(m, x.Value)
	}
	return m, true
}

// Scrapes counts successful scrapes.
func (s *Scraper) Scrapes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok
}

// Failures counts failed scrapes.
func (s *Scraper) Failures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs
}
