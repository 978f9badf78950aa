package watchcache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// encodeAll returns the Anys of es, encoding each resource version once for all responses.
func encodeAll(es []*entry) ([]*anypb.Any, error) {
	out := make([]*anypb.Any, len(es))
	for i, e := range es {
		a, err := e.encoded()
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// flight is an answer given to the server for a stream and what the stream had before it.
type flight struct {
	// delivered: the server sent the answer (it asks for the returned resources as it does).
	delivered atomic.Bool
	returned  map[string]string
	sent      uint64
	fresh     map[string]struct{}
	resend    []string
	reply     bool
}

// fullAnswer is the full-state SotW answer at one cache version, shared by every wildcard watch
// answered at that version: built once per version, encoded once.
//
// It is encoded as a whole: body is the resources field (DiscoveryResponse.resources, field 2)
// of every resource, as on the wire. Each stream's DiscoveryResponse carries body as its
// unknown fields and no Resources: encoding it copies body, where encoding the Anys would size
// and write thousands of messages again for every proxy of the scope. A receiver parses the
// resources as if they were set (fields may come in any order on the wire).
type fullAnswer struct {
	entries []*entry
	body    func() ([]byte, error)
}

// buildFull (lock held).
func (c *Cache) buildFull() *fullAnswer {
	f := &fullAnswer{entries: c.allLive()}
	sortEntries(f.entries)
	f.body = sync.OnceValues(func() ([]byte, error) {
		anys, err := encodeAll(f.entries)
		if err != nil {
			return nil, err
		}
		var b []byte
		for _, a := range anys {
			b = protowire.AppendTag(b, resourcesField, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(proto.Size(a)))
			if b, err = (proto.MarshalOptions{Deterministic: true}).MarshalAppend(b, a); err != nil {
				return nil, fmt.Errorf("encode a %s response: %w", a.GetTypeUrl(), err)
			}
		}
		return b, nil
	})
	return f
}

// resourcesField is the field number of DiscoveryResponse.resources.
const resourcesField = 2

// sotwResponse is a SotW answer. The server sets the nonce in the DiscoveryResponse, so each
// stream gets its own, sharing the encoded resources.
type sotwResponse struct {
	fl      *flight
	req     *cachev3.Request
	version string
	entries []*entry
	full    *fullAnswer // instead of entries
	out     func() (*discovery.DiscoveryResponse, error)
}

var _ cachev3.Response = (*sotwResponse)(nil)

func newSotwResponse(fl *flight, req *cachev3.Request, version string, entries []*entry, full *fullAnswer) *sotwResponse {
	r := &sotwResponse{fl: fl, req: req, version: version, entries: entries, full: full}
	r.out = sync.OnceValues(func() (*discovery.DiscoveryResponse, error) {
		out := &discovery.DiscoveryResponse{VersionInfo: r.version, TypeUrl: r.req.GetTypeUrl()}
		if r.full != nil {
			body, err := r.full.body()
			if err != nil {
				return nil, err
			}
			out.ProtoReflect().SetUnknown(body)
			return out, nil
		}
		anys, err := encodeAll(r.entries)
		if err != nil {
			return nil, err
		}
		out.Resources = anys
		return out, nil
	})
	return r
}

// GetDiscoveryResponse encodes the response (resources are encoded once per version, by the
// first stream that sends them, outside the cache's lock).
func (r *sotwResponse) GetDiscoveryResponse() (*discovery.DiscoveryResponse, error) { return r.out() }

// GetRequest is the request the watch answered was created by.
func (r *sotwResponse) GetRequest() *discovery.DiscoveryRequest { return r.req }

// GetVersion is the response's version.
//
// Deprecated: as cachev3.Response's; use GetResponseVersion.
func (r *sotwResponse) GetVersion() (string, error) { return r.version, nil }

// GetResponseVersion is the response's version.
func (r *sotwResponse) GetResponseVersion() string { return r.version }

// GetReturnedResources is the stream's own map, which names the stream to the cache (see
// Cache.stream); the cache keeps what each stream was sent itself (the watch's version). The
// server calls it when it sends the response, and only then: the answer counts as delivered.
func (r *sotwResponse) GetReturnedResources() map[string]string {
	r.fl.delivered.Store(true)
	return r.fl.returned
}

// GetContext is the background context.
func (r *sotwResponse) GetContext() context.Context { return context.Background() }

// deltaResponse is a Delta answer: changed resources and removed names. Wildcard watches
// answered for the same versions share the encoded resources.
type deltaResponse struct {
	fl      *flight
	req     *cachev3.DeltaRequest
	version string
	set     *changeSet
	out     func() (*discovery.DeltaDiscoveryResponse, error)
}

var _ cachev3.DeltaResponse = (*deltaResponse)(nil)

// changeSet is what a Delta stream is sent: resources (with their versions) and removals.
type changeSet struct {
	entries   []*entry
	removed   []string
	resources func() ([]*discovery.Resource, error)
}

func (c *Cache) newChangeSet(entries []*entry, removed []string) *changeSet {
	sortEntries(entries)
	s := &changeSet{entries: entries, removed: removed}
	s.resources = sync.OnceValues(func() ([]*discovery.Resource, error) {
		out := make([]*discovery.Resource, len(s.entries))
		for i, e := range s.entries {
			a, err := e.encoded()
			if err != nil {
				return nil, err
			}
			out[i] = &discovery.Resource{Name: e.name, Resource: a, Version: c.versionString(e.content)}
		}
		return out, nil
	})
	return s
}

func newDeltaResponse(fl *flight, req *cachev3.DeltaRequest, version string, set *changeSet) *deltaResponse {
	r := &deltaResponse{fl: fl, req: req, version: version, set: set}
	r.out = sync.OnceValues(func() (*discovery.DeltaDiscoveryResponse, error) {
		res, err := r.set.resources()
		if err != nil {
			return nil, err
		}
		return &discovery.DeltaDiscoveryResponse{Resources: res, RemovedResources: r.set.removed,
			TypeUrl: r.req.GetTypeUrl(), SystemVersionInfo: r.version}, nil
	})
	return r
}

// GetDeltaDiscoveryResponse encodes the response.
func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discovery.DeltaDiscoveryResponse, error) {
	return r.out()
}

// GetDeltaRequest is the request the watch answered was created by.
func (r *deltaResponse) GetDeltaRequest() *discovery.DeltaDiscoveryRequest { return r.req }

// GetSystemVersion is the cache's version.
//
// Deprecated: as cachev3.DeltaResponse's; use GetResponseVersion.
func (r *deltaResponse) GetSystemVersion() (string, error) { return r.version, nil }

// GetResponseVersion is the cache's version.
func (r *deltaResponse) GetResponseVersion() string { return r.version }

// GetNextVersionMap is GetReturnedResources.
//
// Deprecated: as cachev3.DeltaResponse's; use GetReturnedResources.
func (r *deltaResponse) GetNextVersionMap() map[string]string { return r.GetReturnedResources() }

// GetReturnedResources is the stream's own map, which names the stream to the cache (see
// Cache.stream); the cache keeps what each stream was sent itself. The server calls it when it
// sends the response, and only then: the answer counts as delivered.
func (r *deltaResponse) GetReturnedResources() map[string]string {
	r.fl.delivered.Store(true)
	return r.fl.returned
}

// GetContext is the background context.
func (r *deltaResponse) GetContext() context.Context { return context.Background() }

// initialDelta answers a new Delta stream with what differs from the versions it says it has
// (initial_resource_versions), or arms it (lock held).
func (c *Cache) initialDelta(w *watch, sub cachev3.Subscription) func() {
	known := sub.ReturnedResources()
	var upd []*entry
	var removed []string
	consider := func(e *entry) {
		if e.res != nil && known[e.name] != c.versionString(e.content) {
			upd = append(upd, e)
		}
	}
	if w.wildcard {
		for _, e := range c.entries {
			consider(e)
		}
		for name := range known {
			if e := c.entries[name]; e == nil || e.res == nil {
				removed = append(removed, name)
			}
		}
	} else {
		for name := range w.names {
			e := c.entries[name]
			if e != nil {
				consider(e)
			}
			if _, ok := known[name]; ok && (e == nil || e.res == nil) {
				removed = append(removed, name)
			}
		}
	}
	w.sent = c.version
	if len(upd) > 0 || len(removed) > 0 || (w.wildcard && w.deltaReq.GetResponseNonce() == "") {
		// Dropped by the server, this answer is taken back as "send everything" (sent 0).
		w.flight = &flight{returned: w.returned}
		w.deltaCh <- newDeltaResponse(w.flight, w.deltaReq, c.versionString(c.version), c.newChangeSet(upd, removed))
		w.armed = false
		return c.canceller(w)
	}
	return c.arm(w)
}

// answerDelta sends w the resources changed or removed since it was last answered, those newly
// subscribed and those to send again (lock held).
func (c *Cache) answerDelta(w *watch) bool {
	if w.wildcard && len(w.fresh) == 0 && len(w.resend) == 0 {
		if w.sent == c.version {
			return false
		}
		set := c.since[w.sent]
		if set == nil {
			var upd []*entry
			var removed []string
			for _, ch := range c.changedSince(w.sent) {
				if !c.current(ch) {
					continue
				}
				if e := c.entries[ch.name]; e.res == nil {
					removed = append(removed, ch.name)
				} else if e.content > w.sent {
					upd = append(upd, e)
				}
			}
			set = c.newChangeSet(upd, removed)
			c.since[w.sent] = set
		}
		if len(set.entries) == 0 && len(set.removed) == 0 {
			return false
		}
		w.deltaCh <- newDeltaResponse(w.flight, w.deltaReq, c.versionString(c.version), set)
		return true
	}
	picked := map[string]struct{}{}
	var upd []*entry
	var removed []string
	add := func(name string) {
		if _, ok := picked[name]; ok {
			return
		}
		e := c.entries[name]
		switch {
		case e != nil && e.res != nil:
			upd = append(upd, e)
		case e != nil && e.content > w.sent:
			removed = append(removed, name)
		default:
			return
		}
		picked[name] = struct{}{}
	}
	for name := range w.fresh {
		add(name)
	}
	for _, name := range w.resend {
		if e := c.entries[name]; e == nil || e.res == nil {
			if _, ok := picked[name]; !ok {
				removed = append(removed, name)
				picked[name] = struct{}{}
			}
			continue
		}
		add(name)
	}
	log := c.changedSince(w.sent)
	if w.wildcard || len(log) <= len(w.names) {
		for _, ch := range log {
			if !c.current(ch) {
				continue
			}
			if _, ok := w.names[ch.name]; ok || w.wildcard {
				if e := c.entries[ch.name]; e.content > w.sent {
					add(ch.name)
				}
			}
		}
	} else {
		for name := range w.names {
			if e := c.entries[name]; e != nil && e.content > w.sent {
				add(name)
			}
		}
	}
	if len(upd) == 0 && len(removed) == 0 {
		return false
	}
	w.deltaCh <- newDeltaResponse(w.flight, w.deltaReq, c.versionString(c.version), c.newChangeSet(upd, removed))
	return true
}
