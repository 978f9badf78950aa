// Package watchcache is an xDS resource cache for one type URL that serves go-control-plane's
// SotW and Delta servers (cachev3.ConfigWatcher) at the scale of thousands of proxies.
//
// go-control-plane's LinearCache indexes a watch once per subscribed name every time a proxy
// ACKs, removes it from every name each time it fires, and computes each proxy's answer by
// walking its names or the whole cache: O(proxies × names) per change, under one lock. This
// cache keeps what istiod keeps per connection (WatchedResources) instead:
//
//   - One watch object per stream (known by the stream's subscription state, see
//     Cache.stream), indexed by name once; an ACK that leaves the subscription unchanged
//     re-arms it without touching the index (a SotW ACK repeats every name: they are compared,
//     outside the lock, with the previous request's; a Delta ACK names none). The reverse
//     index (name → watches, plus a set of wildcard watches) changes only when a
//     subscription does.
//   - Every resource carries the cache version at which it last changed, and a change log
//     (ordered by version, compacted to the latest change of each name) answers "what changed
//     since the version this proxy was last answered at" by a binary search.
//   - Full-state answers (SotW CDS/LDS to wildcard watches) are built and encoded once per
//     cache version and shared by every proxy at that version; encoded resources are shared by
//     all answers.
//   - An answer counts as sent when the server sends it; one the server drops (a request of
//     the stream came first) is given again.
//
// A stream's watch is dropped when its stream has not re-armed it for parkedGrace after the
// server cancelled it (the server cancels both before re-arming and when the stream ends, and
// does not say which): a re-arm after that is answered as a new stream (the whole subscribed
// state), which is correct, only not minimal.
package watchcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// parkedGrace is how long a cancelled watch waits for its stream to re-arm it before it is
// dropped. go-control-plane's SotW and Delta servers cancel a stream's watch and create the
// next one in the same goroutine, a few statements apart (its ordered-ADS mode, unused here,
// sends other types' queued responses in between). A watch dropped too early costs its stream
// a whole answer, not a wrong one; one kept too long keeps an ended stream's index entries.
const parkedGrace = 10 * time.Second

// entry is one resource (or the tombstone of a deleted one: res nil) at the version it was last
// set (SotW answers resend what was set) and the version its content last changed (Delta
// answers send only changed content).
type entry struct {
	name    string
	res     types.Resource
	version uint64
	content uint64
	// encoded is the resource as an Any, encoded once on first use (by a stream goroutine,
	// outside the cache's lock) and shared by every response that carries this version.
	encoded func() (*anypb.Any, error)
}

func newEntry(typeURL, name string, res types.Resource, version uint64) *entry {
	e := &entry{name: name, res: res, version: version, content: version}
	e.encoded = sync.OnceValues(func() (*anypb.Any, error) {
		b, err := cachev3.MarshalResource(res)
		if err != nil {
			return nil, fmt.Errorf("encode %s %q: %w", typeURL, name, err)
		}
		return &anypb.Any{TypeUrl: typeURL, Value: b}, nil
	})
	return e
}

// sameEncoding reports whether e is encoded as a (e is encoded if it was not yet).
func sameEncoding(e *entry, a *anypb.Any) bool {
	old, err := e.encoded()
	return err == nil && bytes.Equal(old.GetValue(), a.GetValue())
}

// change is one entry of the change log: name changed (or was deleted) at version.
type change struct {
	version uint64
	name    string
}

// Cache holds the resources of one type and the watches of the streams asking for them.
// Versions are "PREFIX" + a counter: the prefix distinguishes this cache instance's versions
// from another's, so a proxy reconnecting with a version it got elsewhere gets a full answer.
type Cache struct {
	typeURL string
	prefix  string
	// fullState: SotW answers carry every subscribed resource, not only the changed ones
	// (CDS and LDS; see cachev3.ResourceRequiresFullStateInSotw).
	fullState bool

	mu      sync.Mutex
	version uint64
	entries map[string]*entry // live resources and tombstones
	live    int
	// log holds, in version order, the changes of the names in entries; compact drops all but
	// the latest of each name (only the latest matters to "changed since").
	log       []change
	compacted int // len(log) after the latest compaction

	byName   map[string]map[*watch]struct{} // named subscriptions, by name
	wildcard map[*watch]struct{}
	streams  map[unsafe.Pointer]*watch // by stream (see stream)
	indexed  int                       // names added to byName, ever (for tests: re-arms add none)
	parked   map[*watch]struct{}
	swept    time.Time

	// full is the full-state SotW answer for wildcard watches at its version (built on demand).
	full *fullAnswer
	// since holds the wildcard change sets (what changed since a version, up to the current
	// one), shared by the wildcard watches answered at the same versions.
	since map[uint64]*changeSet
	now   func() time.Time
}

// New creates an empty cache for typeURL whose versions start with prefix.
func New(typeURL, prefix string) *Cache {
	return &Cache{typeURL: typeURL, prefix: prefix, fullState: cachev3.ResourceRequiresFullStateInSotw(typeURL),
		entries: map[string]*entry{}, byName: map[string]map[*watch]struct{}{}, wildcard: map[*watch]struct{}{},
		streams: map[unsafe.Pointer]*watch{}, parked: map[*watch]struct{}{}, since: map[uint64]*changeSet{}, now: time.Now}
}

var _ cachev3.Cache = (*Cache)(nil)

func (c *Cache) versionString(v uint64) string { return c.prefix + strconv.FormatUint(v, 10) }

// UpdateResource sets one resource.
func (c *Cache) UpdateResource(name string, res types.Resource) error {
	if res == nil {
		return errors.New("watchcache: nil resource " + name)
	}
	return c.UpdateResources(map[string]types.Resource{name: res}, nil)
}

// DeleteResource deletes one resource.
func (c *Cache) DeleteResource(name string) error { return c.UpdateResources(nil, []string{name}) }

// UpdateResources sets toUpdate and deletes toDelete in one new version, and answers the
// watches of the names changed.
func (c *Cache) UpdateResources(toUpdate map[string]types.Resource, toDelete []string) error {
	for name, r := range toUpdate {
		if r == nil {
			return errors.New("watchcache: nil resource " + name)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep()
	c.version++
	changed := make([]string, 0, len(toUpdate)+len(toDelete))
	for name, r := range toUpdate {
		c.put(name, r, nil)
		changed = append(changed, name)
	}
	for _, name := range toDelete {
		if c.remove(name) {
			changed = append(changed, name)
		}
	}
	c.changed(changed)
	return nil
}

// SetResources replaces the whole content: every resource given counts as set again (SotW
// streams are sent it, as istiod's full push), the ones not given are deleted. A resource
// encoded as the one it replaces keeps its content version: Delta streams are not sent it again.
func (c *Cache) SetResources(resources map[string]types.Resource) {
	// Encoded before the lock when some stream watches this cache: every resource will be sent
	// to it, and the encoding tells whether the content changed. Unwatched (a scope's Envoy
	// listeners when only proxyless clients are connected, or the other way round), each is
	// encoded when first sent.
	c.mu.Lock()
	watched := len(c.streams) > 0
	c.mu.Unlock()
	encoded := map[string]*anypb.Any{}
	for name, r := range resources {
		if !watched {
			break
		}
		if b, err := cachev3.MarshalResource(r); err == nil {
			encoded[name] = &anypb.Any{TypeUrl: c.typeURL, Value: b}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep()
	c.version++
	changed := make([]string, 0, len(resources))
	for name, e := range c.entries {
		if _, keep := resources[name]; !keep && e.res != nil && c.remove(name) {
			changed = append(changed, name)
		}
	}
	for name, r := range resources {
		c.put(name, r, encoded[name])
		changed = append(changed, name)
	}
	c.changed(changed)
}

// put sets name at the current version. With its encoding (nil: encoded when first sent), a
// resource encoded as the one it replaces keeps its content version and encoding (lock held).
func (c *Cache) put(name string, r types.Resource, encoded *anypb.Any) {
	old := c.entries[name]
	if old == nil || old.res == nil {
		c.live++
	}
	switch {
	case encoded != nil && old != nil && old.res != nil && sameEncoding(old, encoded):
		c.entries[name] = &entry{name: name, res: old.res, version: c.version, content: old.content, encoded: old.encoded}
	case encoded != nil:
		c.entries[name] = &entry{name: name, res: r, version: c.version, content: c.version,
			encoded: func() (*anypb.Any, error) { return encoded, nil }}
	default:
		c.entries[name] = newEntry(c.typeURL, name, r, c.version)
	}
	c.log = append(c.log, change{c.version, name})
}

// remove deletes name at the current version, leaving a tombstone so that watches answered
// before learn of the deletion; false if it did not exist (lock held).
func (c *Cache) remove(name string) bool {
	old := c.entries[name]
	if old == nil || old.res == nil {
		return false
	}
	c.live--
	c.entries[name] = &entry{name: name, version: c.version, content: c.version}
	c.log = append(c.log, change{c.version, name})
	return true
}

// GetResources returns a copy of the resources.
func (c *Cache) GetResources() map[string]types.Resource {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]types.Resource, c.live)
	for name, e := range c.entries {
		if e.res != nil {
			out[name] = e.res
		}
	}
	return out
}

// Resource returns the resource called name, if there is one.
func (c *Cache) Resource(name string) (types.Resource, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[name]; e != nil && e.res != nil {
		return e.res, true
	}
	return nil, false
}

// NumResources is the number of resources.
func (c *Cache) NumResources() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// NumWatches is the number of streams with a watch on this cache, armed or not.
func (c *Cache) NumWatches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}

// Fetch implements cachev3.ConfigFetcher: REST xDS is not served.
func (c *Cache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("watchcache: fetch (REST xDS) is not served")
}

// changed answers the armed watches of names and every armed wildcard watch, and compacts the
// log once it has doubled (lock held).
func (c *Cache) changed(names []string) {
	c.full = nil
	clear(c.since)
	notify := map[*watch]struct{}{}
	for _, name := range names {
		for w := range c.byName[name] {
			if w.armed {
				notify[w] = struct{}{}
			}
		}
	}
	for w := range c.wildcard {
		if w.armed {
			notify[w] = struct{}{}
		}
	}
	for w := range notify {
		c.answer(w)
	}
	// After the answers: the armed watches have been offered this change.
	if len(c.log) > max(1024, 2*c.compacted) { // amortized: at most once per doubling
		c.compact()
	}
}

// compact drops the tombstones no stream can still need, and the log entries of changes
// superseded or dropped (lock held). An armed watch was offered every change since it was last
// answered as it happened: only the others (answered and not re-armed yet, or parked) may still
// have to learn of a deletion, at their next request; an answer the server dropped sends them
// back to the version before it.
func (c *Cache) compact() {
	oldest := c.version
	for _, w := range c.streams {
		if w.armed {
			continue
		}
		oldest = min(oldest, w.sent)
		if w.flight != nil {
			oldest = min(oldest, w.flight.sent)
		}
	}
	for name, e := range c.entries {
		if e.res == nil && e.version <= oldest {
			delete(c.entries, name)
		}
	}
	c.log = slices.DeleteFunc(c.log, func(ch change) bool {
		e := c.entries[ch.name]
		return e == nil || e.version != ch.version
	})
	c.compacted = len(c.log)
}

// changedSince lists the names changed after version v (deduplicated: only each name's latest
// change counts) (lock held).
func (c *Cache) changedSince(v uint64) []change {
	i := sort.Search(len(c.log), func(i int) bool { return c.log[i].version > v })
	return c.log[i:]
}

// current reports whether log entry ch is its name's latest change (lock held).
func (c *Cache) current(ch change) bool { return c.entries[ch.name].version == ch.version }

// watch is a stream's subscription to this cache's type, kept across the stream's requests.
type watch struct {
	key      unsafe.Pointer    // names the stream (see stream); nil: a watch of one request
	returned map[string]string // the stream's map that key points to
	delta    bool

	// The subscription as indexed.
	names    map[string]struct{}
	wildcard bool
	// reqNames are the names of the SotW request last indexed, as sent: a proxy that ACKs
	// sends the same list again, and comparing it is cheaper than comparing sets.
	reqNames []string

	// sent is the cache version the stream was last answered at (0: never): the stream has
	// every subscribed resource as of sent, or has rejected it (a NACK waits for the next
	// change instead of getting the same config again).
	sent uint64
	// fresh are subscribed names the stream has not been answered for yet (added to the
	// subscription since sent); resend are names whose state must be sent again whether or not
	// they changed (Delta: unsubscribed while wildcard).
	fresh  map[string]struct{}
	resend []string
	// reply: answer now even with nothing to send (the first request, or a version from
	// elsewhere).
	reply bool

	// flight is the latest answer given to the server, with the state before it: an answer
	// the server drops instead of sending is taken back at the stream's next request.
	flight *flight

	armed    bool
	gen      uint64 // counts arms: a cancel of an earlier arm does nothing
	parkedAt time.Time

	sotwReq  *cachev3.Request
	sotwCh   chan cachev3.Response
	deltaReq *cachev3.DeltaRequest
	deltaCh  chan cachev3.DeltaResponse
}

// CreateWatch implements cachev3.ConfigWatcher (SotW).
func (c *Cache) CreateWatch(r *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	if r.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("watchcache: request for %s on the cache of %s", r.GetTypeUrl(), c.typeURL)
	}
	c.mu.Lock()
	w := c.stream(sub, ch, false)
	prev := w.reqNames
	c.mu.Unlock()
	// Only this stream's requests touch w.reqNames, one at a time, and w is neither armed nor
	// parked until this request arms it: the names (all of them, in every SotW request) are
	// compared outside the lock every stream shares.
	same := prev != nil && sameList(prev, r.GetResourceNames())
	c.mu.Lock()
	defer c.mu.Unlock()
	isNew := w.sent == 0 && w.names == nil && !w.wildcard && w.reqNames == nil
	v := r.GetVersionInfo()
	// A stream that says it has nothing, or has a version of another instance, gets the whole
	// subscribed state, unless it is rejecting what it was sent (a NACK must not bring the
	// same config back at once, forever).
	if (v == "" || !strings.HasPrefix(v, c.prefix)) && (r.GetErrorDetail() == nil || isNew) {
		w.sent, w.reply = 0, true
	}
	if isNew || w.wildcard != sub.IsWildcard() || !same {
		c.subscribe(w, sub.IsWildcard(), sub.SubscribedResources(), nil)
		w.reqNames = r.GetResourceNames() // the server does not change a request's names
		if w.reqNames == nil {
			w.reqNames = []string{} // known: nil means no request yet
		}
	}
	w.sotwReq, w.deltaReq = r, nil
	return c.arm(w), nil
}

// sameList reports whether a and b are the same list of names: the same slice (the control
// plane's codec hands a repeated list out as one shared slice, so an ACK is O(1)) or equal.
func sameList(a, b []string) bool {
	if len(a) == len(b) && len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b) {
		return true
	}
	return slices.Equal(a, b)
}

// CreateDeltaWatch implements cachev3.ConfigWatcher (Delta).
func (c *Cache) CreateDeltaWatch(r *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	if r.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("watchcache: request for %s on the cache of %s", r.GetTypeUrl(), c.typeURL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.stream(sub, ch, true)
	if w.names == nil {
		// A new stream: what it has is what it says it has (initial_resource_versions).
		c.subscribe(w, sub.IsWildcard(), sub.SubscribedResources(), nil)
		w.fresh = nil
		w.deltaReq = r
		cancel := c.initialDelta(w, sub)
		clear(w.returned)
		return cancel, nil
	}
	if len(r.GetResourceNamesSubscribe()) > 0 || len(r.GetResourceNamesUnsubscribe()) > 0 || w.wildcard != sub.IsWildcard() {
		var resend []string
		if sub.IsWildcard() {
			resend = r.GetResourceNamesUnsubscribe() // the protocol: say whether they still exist
		}
		c.subscribe(w, sub.IsWildcard(), sub.SubscribedResources(), resend)
	}
	clear(w.returned) // what the server wrote for an unsubscription: resend covers it
	w.deltaReq, w.sotwReq = r, nil
	return c.arm(w), nil
}

// stream returns the watch of sub's stream, creating it (lock held).
//
// A stream is known by its subscription's map of returned resources: the server keeps that map
// for the stream's life and hands back whatever map the cache's responses return, and this
// cache's responses return the very map they were created with. (The server creates a new
// response channel for every request, so the channel does not name the stream.) A watch keeps
// its map, so the map cannot be freed and its address reused by another stream while the
// watch is known.
func (c *Cache) stream(sub cachev3.Subscription, ch any, delta bool) *watch {
	c.sweep()
	returned := sub.ReturnedResources()
	var key unsafe.Pointer
	if returned != nil {
		key = reflect.ValueOf(returned).UnsafePointer()
	}
	w := c.streams[key]
	if w != nil && w.delta != delta {
		c.drop(w)
		w = nil
	}
	if w == nil {
		w = &watch{key: key, returned: returned, delta: delta}
		if key != nil {
			c.streams[key] = w
		}
	}
	delete(c.parked, w)
	w.armed = false
	if fl := w.flight; fl != nil && !fl.delivered.Load() {
		// The server dropped the stream's last answer (a request came first: it replaces the
		// response channel): the stream has what it had before.
		w.sent, w.fresh, w.resend, w.reply = fl.sent, fl.fresh, fl.resend, fl.reply
	}
	w.flight = nil
	switch ch := ch.(type) {
	case chan cachev3.Response:
		w.sotwCh = ch
	case chan cachev3.DeltaResponse:
		w.deltaCh = ch
	}
	return w
}

// subscribe indexes w's new subscription: only the names that differ from the indexed ones
// (lock held). A SotW subscription's set is kept as the server made it (the server makes a new
// one for each request and never changes it); a Delta one is copied.
func (c *Cache) subscribe(w *watch, wildcard bool, names map[string]struct{}, resend []string) {
	if wildcard != w.wildcard {
		if wildcard {
			c.wildcard[w] = struct{}{}
			w.sent = 0 // everything is new to a stream that was not wildcard
		} else {
			delete(c.wildcard, w)
			w.reply = w.reply || c.fullState // its set shrinks to the names
		}
		w.wildcard = wildcard
	}
	for name := range w.names {
		if _, ok := names[name]; !ok {
			c.unindex(w, name)
			delete(w.fresh, name)
			// A full-state answer lists every subscribed resource: one no longer subscribed
			// that the stream has must go out of its set.
			if e := c.entries[name]; c.fullState && !w.wildcard && e != nil && (e.res != nil || e.version > w.sent) {
				w.reply = true
			}
		}
	}
	own := names
	if w.delta {
		own = make(map[string]struct{}, len(names)) // the server changes a Delta stream's set in place
	}
	for name := range names {
		if w.delta {
			own[name] = struct{}{}
		}
		if _, ok := w.names[name]; ok {
			continue
		}
		ws := c.byName[name]
		if ws == nil {
			ws = map[*watch]struct{}{}
			c.byName[name] = ws
		}
		ws[w] = struct{}{}
		c.indexed++
		if w.fresh == nil {
			w.fresh = map[string]struct{}{}
		}
		w.fresh[name] = struct{}{}
	}
	w.names = own
	w.resend = append(w.resend, resend...)
}

func (c *Cache) unindex(w *watch, name string) {
	ws := c.byName[name]
	delete(ws, w)
	if len(ws) == 0 {
		delete(c.byName, name)
	}
}

// drop forgets w (lock held).
func (c *Cache) drop(w *watch) {
	for name := range w.names {
		c.unindex(w, name)
	}
	delete(c.wildcard, w)
	delete(c.parked, w)
	if c.streams[w.key] == w {
		delete(c.streams, w.key)
	}
	w.armed = false
}

// sweep drops the watches cancelled more than parkedGrace ago: their streams have ended
// (lock held; at most every tenth of parkedGrace).
func (c *Cache) sweep() {
	now := c.now()
	if now.Sub(c.swept) < parkedGrace/10 {
		return
	}
	c.swept = now
	for w := range c.parked {
		if now.Sub(w.parkedAt) > parkedGrace {
			c.drop(w)
		}
	}
}

// arm answers w at once if it has something to send, else leaves it armed for the next
// change; it returns the cancel function of this arm (lock held).
func (c *Cache) arm(w *watch) func() {
	cancel := c.canceller(w)
	w.armed = true
	c.answer(w)
	return cancel
}

// canceller returns the cancel function of w's current request: it parks w (see sweep), unless
// w has been re-armed since (lock held).
func (c *Cache) canceller(w *watch) func() {
	w.gen++
	gen := w.gen
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		switch {
		case w.gen != gen:
		case w.key == nil || c.streams[w.key] != w:
			c.drop(w)
		default:
			w.armed = false
			w.parkedAt = c.now()
			c.parked[w] = struct{}{}
		}
	}
}

// answer sends w what changed since it was last answered, if anything; an answered watch is
// disarmed until its stream's next request (lock held).
func (c *Cache) answer(w *watch) {
	w.flight = &flight{returned: w.returned, sent: w.sent, fresh: w.fresh, resend: w.resend, reply: w.reply}
	var sent bool
	if w.delta {
		sent = c.answerDelta(w)
	} else {
		sent = c.answerSotw(w)
	}
	if sent {
		w.armed = false
		w.sent = c.version
		w.fresh, w.resend, w.reply = nil, nil, false
	}
}

// answerSotw (lock held).
func (c *Cache) answerSotw(w *watch) bool {
	if w.wildcard && c.fullState {
		if !w.reply && w.sent == c.version {
			return false
		}
		if c.full == nil {
			c.full = c.buildFull()
		}
		w.sotwCh <- newSotwResponse(w.flight, w.sotwReq, c.versionString(c.version), nil, c.full)
		return true
	}
	var out []*entry
	switch {
	case w.sent == 0 || (c.fullState && (w.reply || c.anyChanged(w))):
		// Everything subscribed: a first answer, or a full-state one.
		if w.wildcard {
			out = c.allLive()
		} else {
			out = c.liveOf(w.names)
		}
		// A full-state answer is sent even when it lists nothing: it is how a stream learns
		// that the last resource it subscribes to is gone (grpc-go's one listener and one
		// cluster by name). Without it, a deleted ServiceEntry never reached such a client.
		if len(out) == 0 && !w.reply && !c.fullState {
			return false
		}
	case c.fullState:
		return false
	default:
		out = c.changedOf(w)
		if len(out) == 0 && !w.reply {
			return false
		}
	}
	sortEntries(out)
	w.sotwCh <- newSotwResponse(w.flight, w.sotwReq, c.versionString(c.version), out, nil)
	return true
}

// anyChanged reports whether a resource w subscribes to changed since w.sent, or w has names
// it was not answered for that exist (lock held).
func (c *Cache) anyChanged(w *watch) bool {
	for name := range w.fresh {
		if e := c.entries[name]; e != nil && e.res != nil {
			return true
		}
	}
	if w.wildcard {
		return c.version > w.sent
	}
	log := c.changedSince(w.sent)
	if len(log) <= len(w.names) {
		for _, ch := range log {
			if _, ok := w.names[ch.name]; ok {
				return true
			}
		}
		return false
	}
	for name := range w.names {
		if e := c.entries[name]; e != nil && e.version > w.sent {
			return true
		}
	}
	return false
}

// changedOf lists the live resources of w changed since w.sent, and the fresh ones (lock held).
func (c *Cache) changedOf(w *watch) []*entry {
	var out []*entry
	seen := func(name string) bool { _, ok := w.fresh[name]; return ok }
	for name := range w.fresh {
		if e := c.entries[name]; e != nil && e.res != nil {
			out = append(out, e)
		}
	}
	log := c.changedSince(w.sent)
	if w.wildcard || len(log) <= len(w.names) {
		for _, ch := range log {
			if !c.current(ch) || seen(ch.name) {
				continue
			}
			if _, ok := w.names[ch.name]; !ok && !w.wildcard {
				continue
			}
			if e := c.entries[ch.name]; e.res != nil {
				out = append(out, e)
			}
		}
		return out
	}
	for name := range w.names {
		if e := c.entries[name]; e != nil && e.res != nil && e.version > w.sent && !seen(name) {
			out = append(out, e)
		}
	}
	return out
}

func (c *Cache) liveOf(names map[string]struct{}) []*entry {
	out := make([]*entry, 0, len(names))
	for name := range names {
		if e := c.entries[name]; e != nil && e.res != nil {
			out = append(out, e)
		}
	}
	return out
}

func (c *Cache) allLive() []*entry {
	out := make([]*entry, 0, c.live)
	for _, e := range c.entries {
		if e.res != nil {
			out = append(out, e)
		}
	}
	return out
}

func sortEntries(es []*entry) {
	slices.SortFunc(es, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
}
