package observe

import (
	"context"
	"fmt"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/workloads/adsload"
)

// EventEndpointsChanged is the timeline kind of a followed service's ready endpoints changing in
// the API.
const EventEndpointsChanged = "endpoints.changed"

// Convergence measures, at the proxies, how long an endpoint change takes to reach them: from
// the moment the harness sees a Service's ready endpoints change in its EndpointSlices to each
// proxy's receipt of the new endpoint count (adsload --track, served on /tracked). It is the
// convergence a user feels, whatever the control plane says of itself.
type Convergence struct {
	Client kubernetes.Interface
	// Namespace and Service name the Service followed.
	Namespace, Service string
	// Receipts reads every proxy's receipts of the tracked clusters (adsload's /tracked, over
	// every pod of the fleet: mesh.Fleet.Tracked); an error when any proxy's are out of reach.
	Receipts func(ctx context.Context) (*adsload.Tracked, error)
	As       Role
	// Pushes, when set, is the control plane's map of measures to metrics: each change is then
	// given the full and EDS pushes from it to the next change. It reads the scraped metrics
	// in the summary, so register this measurement after the control plane's metrics.
	Pushes map[subject.Measure]subject.Metric
	// SyncTimeout bounds Start's wait for every proxy to hold the Service's current endpoints
	// (default 2 min); Every is the receipts' poll interval (default 2 s).
	SyncTimeout, Every time.Duration
	// Debounce is the control plane's debounce quiet period (default 100 ms, istiod's
	// PILOT_DEBOUNCE_AFTER and the reference's): a change undone within it is coalesced.
	Debounce time.Duration

	mu       sync.Mutex
	changes  []apiChange // after the baseline
	ready    int         // the API's current ready endpoints (-1 before the baseline)
	syncedAt time.Time
	tracked  *adsload.Tracked
	polls    int
	fails    int
	lastErr  error
	// stale: the latest read failed, so tracked may lack the latest receipts (a pod of the
	// fleet out of reach): the measurement is missing, not a proxy that missed a change.
	stale bool
}

// apiChange is one change of the Service's ready endpoints, as the harness saw it.
type apiChange struct {
	at    time.Time
	ready int
}

// Name implements Measurement.
func (c *Convergence) Name() string { return "convergence" }

// Role implements Measurement.
func (c *Convergence) Role() Role { return c.As }

// Start implements Measurement: it returns once every proxy holds the Service's current ready
// endpoints, so changes from then on are measured from a common baseline.
func (c *Convergence) Start(ctx context.Context, sink Sink) error {
	c.ready = -1
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(c.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=" + c.Service }))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	changed := func(any) {
		now := time.Now()
		n := readyEndpoints(inf.GetStore())
		c.mu.Lock()
		if c.ready < 0 || n == c.ready {
			c.mu.Unlock()
			return
		}
		c.ready = n
		c.changes = append(c.changes, apiChange{at: now, ready: n})
		c.mu.Unlock()
		// Outside c.mu: the recorder's flush holds its own lock while it calls Gather, which
		// takes c.mu — recording under c.mu deadlocked a run.
		sink.RecordEvent(results.Event{At: now.UTC(), Kind: EventEndpointsChanged, Object: c.Namespace + "/" + c.Service,
			Detail: fmt.Sprintf("%d ready endpoint(s)", n)})
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: changed,
		UpdateFunc: func(_, o any) { changed(o) }, DeleteFunc: changed}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("watch the EndpointSlices of %s/%s: %w", c.Namespace, c.Service, context.Cause(ctx))
	}
	c.mu.Lock()
	c.ready = readyEndpoints(inf.GetStore())
	c.mu.Unlock()

	if err := c.WaitConverged(ctx, orDefault(c.SyncTimeout, 2*time.Minute)); err != nil {
		return err
	}
	c.mu.Lock()
	c.syncedAt, c.changes = time.Now(), nil
	c.mu.Unlock()
	sink.Background(func(ctx context.Context) {
		t := time.NewTicker(orDefault(c.Every, 2*time.Second))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				// A last look after the window: the receipts of the latest changes.
				fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = c.fetch(fctx)
				return
			case <-t.C:
				_, _ = c.fetch(ctx)
			}
		}
	})
	return nil
}

// WaitConverged waits until every proxy holds the Service's current ready endpoints: after
// the last change, so that its receipts are measured before the run ends.
func (c *Convergence) WaitConverged(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		t, err := c.fetch(ctx)
		c.mu.Lock()
		want := c.ready
		c.mu.Unlock()
		if err == nil && allHold(t, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the proxies (%s) did not all hold the %d ready endpoint(s) of %s/%s within %s (last: %v, %s): are they connected to the control plane, and does the cluster name they track (adsload's track option) match the service's cluster?",
				c.As, want, c.Namespace, c.Service, timeout, err, holding(t, want))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// readyEndpoints counts the ready addresses in a store of EndpointSlices (unset Ready is ready).
func readyEndpoints(s cache.Store) int {
	n := 0
	for _, o := range s.List() {
		es, ok := o.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		for _, e := range es.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n += len(e.Addresses)
			}
		}
	}
	return n
}

func allHold(t *adsload.Tracked, want int) bool {
	if t == nil || len(t.Clients) == 0 {
		return false
	}
	for _, r := range t.Clients {
		if len(r) == 0 || r[len(r)-1].Endpoints != want {
			return false
		}
	}
	return true
}

func holding(t *adsload.Tracked, want int) string {
	if t == nil {
		return "no receipts read"
	}
	n := 0
	for _, r := range t.Clients {
		if len(r) > 0 && r[len(r)-1].Endpoints == want {
			n++
		}
	}
	out := fmt.Sprintf("%d of %d proxies hold them", n, len(t.Clients))
	if len(t.Clients) > 0 {
		out += fmt.Sprintf("; the first proxy's receipts of %q: %v", t.Track, t.Clients[0])
	}
	return out
}

// fetch reads the receipts and keeps them.
func (c *Convergence) fetch(ctx context.Context) (*adsload.Tracked, error) {
	t, err := c.Receipts(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			c.fails++
			c.lastErr = err
			c.stale = true
		}
		return nil, err
	}
	c.polls++
	c.tracked, c.stale = t, false
	return t, nil
}

// convergenceBounds are the histogram's bucket bounds in milliseconds.
var convergenceBounds = []float64{10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// Gather implements Measurement.
func (c *Convergence) Gather(s *results.Summary) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := results.Measurement{Name: c.Name(), Role: string(c.As), Samples: c.polls, Failures: c.fails,
		OK: !c.syncedAt.IsZero() && c.tracked != nil}
	if c.lastErr != nil {
		st.Error = c.lastErr.Error()
	}
	if c.syncedAt.IsZero() {
		st.OK, st.Error = false, "the proxies never all held the service's endpoints"
	} else if c.stale {
		st.OK, st.Error = false, fmt.Sprintf("the latest read of the proxies' receipts failed, so they lack the latest changes: %v", c.lastErr)
	}
	status(s, st)
	if !st.OK {
		return
	}
	debounce := c.Debounce
	if debounce == 0 {
		debounce = 100 * time.Millisecond
	}
	s.Convergence = converge(c.Namespace+"/"+c.Service, c.syncedAt, c.changes, c.tracked.Clients, debounce)
	if c.Pushes != nil && s.ControlPlaneStats != nil {
		attributePushes(s.Convergence.Changes, s.ControlPlaneStats.Metrics, c.Pushes)
	}
}

// attributePushes gives each change the pushes counted from its start (the earlier of the
// API's change and its first receipt) to the next change's start (to the end of the scrapes for
// the last one), when the control plane's push counters were scraped.
func attributePushes(changes []results.EndpointChange, series []results.Series, measures map[subject.Measure]subject.Metric) {
	full, fok := measures[subject.FullPushes]
	eds, eok := measures[subject.EDSPushes]
	if !fok || !eok {
		return
	}
	first := firstScrape(series)
	between := func(ref subject.Metric, from, to time.Time) (int64, bool) {
		var n float64
		found := false
		for _, sr := range series {
			if ref.Matches(sr.Name, sr.Labels) && len(sr.Samples) > 0 {
				found = true
				n += counterAt(sr, first, to) - counterAt(sr, first, from)
			}
		}
		return int64(n + 0.5), found
	}
	start := func(c results.EndpointChange) time.Time {
		if c.FirstReceivedAt != nil && c.FirstReceivedAt.Before(c.At) {
			return *c.FirstReceivedAt
		}
		return c.At
	}
	for i := range changes {
		to := time.Now()
		if i+1 < len(changes) {
			to = start(changes[i+1])
		}
		f, ok1 := between(full, start(changes[i]), to)
		e, ok2 := between(eds, start(changes[i]), to)
		if ok1 && ok2 {
			changes[i].Pushes = &results.Pushes{Full: f, EDS: e}
		}
	}
}

// counterAt is a counter's last scraped value at or before t (0 before a series that appeared
// after the first scrape, which started from zero; its first value before one that did not).
func counterAt(sr results.Series, first, t time.Time) float64 {
	v := 0.0
	if !sr.Samples[0].At.After(first) {
		v = sr.Samples[0].Value
	}
	for _, x := range sr.Samples {
		if x.At.After(t) {
			break
		}
		v = x.Value
	}
	return v
}

// converge matches the API's endpoint changes after syncedAt with each proxy's receipts: the
// receipt of a change is the proxy's first receipt, after the one it matched for the previous
// change, that carries the new endpoint count and arrives before the change after next (which
// brings the same count back: a later receipt cannot be told from that change's). A change
// without such a receipt is missed by that proxy, whether it came too late or never.
//
// A change undone by the next one within debounce (the count goes back to what it was before)
// is coalesced: a control plane merges the two in its debounce window — istiod does — so no
// proxy is expected to see either, and neither counts as missed.
func converge(service string, syncedAt time.Time, changes []apiChange, clients [][]adsload.Receipt, debounce time.Duration) *results.Convergence {
	out := &results.Convergence{Service: service, Proxies: len(clients), Changes: make([]results.EndpointChange, len(changes))}
	per := make([][]time.Duration, len(changes))
	firstAt := make([]time.Time, len(changes))
	coalesced := make([]bool, len(changes))
	var eff []int // the changes proxies should see, in order
	for i := 0; i < len(changes); i++ {
		if i >= 1 && i+1 < len(changes) && changes[i+1].at.Sub(changes[i].at) <= debounce && changes[i+1].ready == changes[i-1].ready {
			coalesced[i], coalesced[i+1] = true, true
			out.Coalesced += 2
			i++
			continue
		}
		eff = append(eff, i)
	}
	var all []time.Duration
	for _, recs := range clients {
		j := -1 // the receipt the proxy held at syncedAt
		for k, r := range recs {
			if !r.At.After(syncedAt) {
				j = k
			}
		}
		for e, i := range eff {
			ch := changes[i]
			var limit time.Time
			if e+2 < len(eff) {
				limit = changes[eff[e+2]].at
			}
			match := -1
			for q := j + 1; q < len(recs) && (limit.IsZero() || recs[q].At.Before(limit)); q++ {
				if recs[q].Endpoints == ch.ready {
					match = q
					break
				}
			}
			if match < 0 {
				out.Missed++
				continue
			}
			j = match
			if firstAt[i].IsZero() || recs[match].At.Before(firstAt[i]) {
				firstAt[i] = recs[match].At
			}
			d := recs[match].At.Sub(ch.at)
			if d < 0 {
				out.Early++
				d = 0
			}
			per[i] = append(per[i], d)
			all = append(all, d)
		}
	}
	for i, ch := range changes {
		h := ExactHistogram(per[i], nil)
		out.Changes[i] = results.EndpointChange{At: ch.at.UTC(), Ready: ch.ready, Coalesced: coalesced[i], Received: len(per[i]), P50Ms: h.P50Ms, P99Ms: h.P99Ms, MaxMs: h.MaxMs}
		if !firstAt[i].IsZero() {
			first := firstAt[i].UTC()
			out.Changes[i].FirstReceivedAt = &first
		}
	}
	out.Latency = ExactHistogram(all, convergenceBounds)
	return out
}
