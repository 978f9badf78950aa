// Package sotwserver serves SotW xDS streams as go-control-plane's server (v0.14.0) does, but
// keeps a stream's subscription when a request repeats the names it was last set from.
//
// Its stream loop is derived from go-control-plane v0.14.0's pkg/server/sotw/v3 (server.go and
// ads.go), Copyright 2020 Envoyproxy Authors, licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0); the change is sameNames and where it is used.
package sotwserver

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A SotW proxy repeats its whole subscription in every request, its ACKs included, and
// go-control-plane's SotW server (v0.14.0, pkg/server/sotw/v3) builds a new subscription set
// from the names of each one (stream.Subscription.SetResourceSubscription): after an endpoint
// change, each of 1000 proxies subscribed to 1000 clusters has a 1000-name map built for its
// ACK, ≈ 40 µs and 1000 inserts each, though the names are the ones it sent last time.
// Server is that server's stream loop (its unordered mode, the one NewServer gives; legacy
// wildcard on for every type) with one change: a request whose names are the list the
// subscription was last set from keeps the subscription (sameNames). Everything else, the nonce
// check, watch cancel and re-creation, callbacks and sends, is go-control-plane's, in its order.

// Server serves SotW streams (sotw.Server) over a cache, as go-control-plane's does.
type Server struct {
	ctx       context.Context
	cache     cachev3.ConfigWatcher
	callbacks sotw.Callbacks
	streams   atomic.Int64 // stream ids, as go-control-plane's counter
	render    Render       // nil: responses are sent as the cache built them
}

// Render turns the cache's response into the one a stream's proxy (node) is sent: the
// control plane's per-proxy generation mode builds it again for that proxy. It runs on the
// stream's goroutine, before the response callback and the send, so the time it takes is part
// of the push as the callbacks see it. ctx is the stream's.
type Render func(ctx context.Context, node *core.Node, out *discovery.DiscoveryResponse) (*discovery.DiscoveryResponse, error)

// SetRender makes every response go through r before it is sent (nil: none). Call it before
// serving.
func (s *Server) SetRender(r Render) { s.render = r }

var _ sotw.Server = (*Server)(nil)

// New serves SotW streams over cache until ctx ends, calling callbacks (nil: none) where
// go-control-plane's server calls them.
func New(ctx context.Context, cache cachev3.ConfigWatcher, callbacks sotw.Callbacks) *Server {
	return &Server{ctx: ctx, cache: cache, callbacks: callbacks}
}

// sotwWatch is one type's watch on a stream.
type sotwWatch struct {
	cancel   func()
	response chan cachev3.Response
	sub      stream.Subscription
	// names is the list sub was last set from: a request repeating it keeps sub.
	names []string
	nonce string // of the latest response sent for this type
	// askedAt is when the request that created the watch arrived, if the cache answered it at
	// once (its response is in the channel): that response's time starts there (ResponseStart).
	askedAt time.Time
}

// sotwStream is one stream's state.
type sotwStream struct {
	stream    stream.Stream
	id        int64
	nonce     atomic.Int64
	callbacks sotw.Callbacks
	node      *core.Node // only the first request must carry it
	watches   map[string]*sotwWatch
	render    Render
	cases     []reflect.SelectCase // 0: the server's context, 1: requests, then each watch's responses
}

// StreamHandler reads the stream's requests in a goroutine of their own and processes them.
func (s *Server) StreamHandler(str stream.Stream, typeURL string) error {
	reqCh := make(chan *discovery.DiscoveryRequest)
	go func() {
		defer close(reqCh)
		for {
			req, err := str.Recv()
			if err != nil {
				return
			}
			select {
			case reqCh <- req:
			case <-str.Context().Done():
				return
			case <-s.ctx.Done():
				return
			}
		}
	}()
	return s.process(str, reqCh, typeURL)
}

func (s *Server) process(str stream.Stream, reqCh chan *discovery.DiscoveryRequest, defaultTypeURL string) error {
	sw := &sotwStream{stream: str, id: s.streams.Add(1), callbacks: s.callbacks, node: &core.Node{},
		watches: map[string]*sotwWatch{}, render: s.render}
	defer sw.shutdown()
	if s.callbacks != nil {
		if err := s.callbacks.OnStreamOpen(str.Context(), sw.id, defaultTypeURL); err != nil {
			return err
		}
	}
	sw.recompute(s.ctx, reqCh)
	for {
		index, value, ok := reflect.Select(sw.cases)
		switch index {
		case 0:
			return nil
		case 1:
			if !ok {
				return nil // the stream ended or failed
			}
			req := value.Interface().(*discovery.DiscoveryRequest)
			if req == nil {
				return status.Errorf(codes.Unavailable, "empty request")
			}
			if err := s.request(sw, req, defaultTypeURL, time.Now()); err != nil {
				return err
			}
			sw.recompute(s.ctx, reqCh)
		default:
			if value.IsNil() || !ok {
				return status.Errorf(codes.Unavailable, "resource watch %d -> failed", index)
			}
			if err := sw.send(value.Interface().(cachev3.Response)); err != nil {
				return err
			}
		}
	}
}

// request handles one request of sw, which arrived at arrived: its subscription, then a new
// watch.
func (s *Server) request(sw *sotwStream, req *discovery.DiscoveryRequest, defaultTypeURL string, arrived time.Time) error {
	if req.GetNode() != nil {
		sw.node = req.GetNode()
	} else {
		req.Node = sw.node
	}
	switch {
	case defaultTypeURL == resourcev3.AnyType && req.GetTypeUrl() == "":
		return status.Errorf(codes.InvalidArgument, "type URL is required for ADS")
	case req.GetTypeUrl() == "":
		req.TypeUrl = defaultTypeURL
	}
	if s.callbacks != nil {
		if err := s.callbacks.OnStreamRequest(sw.id, req); err != nil {
			return err
		}
	}
	typeURL := req.GetTypeUrl()
	names := req.GetResourceNames()
	var sub stream.Subscription
	w, ok := sw.watches[typeURL]
	if ok {
		if w.nonce != "" && req.GetResponseNonce() != w.nonce {
			// A stale nonce: ignored, as the protocol says (and go-control-plane does).
			return nil
		}
		// Cancelled before the subscription changes, so the cache does not answer meanwhile.
		if w.cancel != nil {
			w.cancel()
		}
		sub = w.sub
		if sameNames(w.names, names) {
			keepSubscription(&sub)
		} else {
			sub.SetResourceSubscription(names)
		}
	} else {
		sub = stream.NewSotwSubscription(names, true)
	}
	responder := make(chan cachev3.Response, 1)
	cancel, err := s.cache.CreateWatch(req, sub, responder)
	if err != nil {
		return err
	}
	// A new watch has no nonce until its first response, as go-control-plane's: a request
	// after an ACK is not held to the ACKed nonce.
	nw := &sotwWatch{cancel: cancel, response: responder, sub: sub, names: names}
	if len(responder) > 0 {
		nw.askedAt = arrived // answered at once: an initial fetch, or new names
	}
	sw.watches[typeURL] = nw
	return nil
}

// sameNames reports whether a request's names are the list a subscription was last set from:
// the same slice (the control plane's codec hands a repeated list out as one shared slice) or equal.
func sameNames(prev, names []string) bool {
	if len(prev) != len(names) {
		return false
	}
	if len(names) == 0 || unsafe.SliceData(prev) == unsafe.SliceData(names) {
		return true
	}
	return slices.Equal(prev, names)
}

// keepSubscription does to sub what SetResourceSubscription does with the names sub was last
// set from, without building their set again. That call left the legacy-wildcard flag and the
// wildcard state as they must stay, and its set holds those names; what it would still do is
// drop the returned resources not in the set (a response may have recorded some since),
// unless the subscription is wildcard: legacy (no names: it returns early) or explicit ("*":
// nothing is dropped).
func keepSubscription(sub *stream.Subscription) {
	if sub.IsWildcard() {
		return
	}
	set, returned := sub.SubscribedResources(), sub.ReturnedResources()
	for name := range returned {
		if _, ok := set[name]; !ok {
			delete(returned, name)
		}
	}
}

// recompute rebuilds the select cases: the server's context, the requests, each watch.
func (sw *sotwStream) recompute(ctx context.Context, reqCh <-chan *discovery.DiscoveryRequest) {
	sw.cases = append(sw.cases[:0],
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(reqCh)})
	for _, w := range sw.watches {
		sw.cases = append(sw.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.response)})
	}
}

// send sends a response of the cache, recording its nonce and returned resources. The context
// the response callback gets carries when the response's own time began (ResponseStart), as
// istiod's pilot_xds_push_time counts it: when the request it answers arrived, for an answer
// the cache gave at once (the request's handling, a scope generated on the way, included);
// else (a push) when the stream took it up, before encoding it.
func (sw *sotwStream) send(resp cachev3.Response) error {
	if resp == nil {
		return errors.New("missing response")
	}
	start := time.Now()
	typeURL := resp.GetRequest().GetTypeUrl()
	w, ok := sw.watches[typeURL]
	if !ok {
		return fmt.Errorf("no current watch for %s", typeURL)
	}
	if !w.askedAt.IsZero() {
		start, w.askedAt = w.askedAt, time.Time{}
	}
	out, err := resp.GetDiscoveryResponse()
	if err != nil {
		return err
	}
	if sw.render != nil {
		if out, err = sw.render(sw.stream.Context(), sw.node, out); err != nil {
			return err
		}
	}
	out.Nonce = strconv.FormatInt(sw.nonce.Add(1), 10)
	w.sub.SetReturnedResources(resp.GetReturnedResources())
	w.nonce = out.Nonce
	if sw.callbacks != nil {
		sw.callbacks.OnStreamResponse(context.WithValue(resp.GetContext(), startKey{}, start), sw.id, resp.GetRequest(), out)
	}
	return sw.stream.Send(out)
}

// shutdown cancels every watch and tells the callbacks the stream closed.
func (sw *sotwStream) shutdown() {
	for _, w := range sw.watches {
		if w.cancel != nil {
			w.cancel()
		}
	}
	if sw.callbacks != nil {
		sw.callbacks.OnStreamClosed(sw.id, sw.node)
	}
}

type startKey struct{}

// ResponseStart is when the own time of the response whose callback got ctx began (see send):
// its request's arrival for an answer given at once, else when the stream took it up, before
// encoding it (false: not a context of this server's response callback).
func ResponseStart(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(startKey{}).(time.Time)
	return t, ok
}
