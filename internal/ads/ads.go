// Package ads is the one ADS client core of the module: a State of the World (Open) or Delta
// (OpenDelta) stream on a connection the caller dials, that keeps each type's subscription, and
// ACKs or NACKs every response with the right version and nonce. What a caller does with a
// response (count it, record it, decode it and follow up with a subscription) is its own, in the
// handler it gives Run; callers that misbehave on purpose (adsload's abusers) use Recv and Send
// directly.
//
// Requests go out from a goroutine of their own (internal/adsqueue), as Envoy's do: sent from
// the receive loop, a large subscription and a control plane writing a large push wait on each
// other for good. Options.Inline sends from the caller's goroutine instead, for tests that time
// their ACKs or misbehave at a given moment.
package ads

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshchaos/meshchaos/internal/adsqueue"
)

// MaxResponseBytes is the largest response Dial's connections take: Envoy sets no limit, and
// gRPC's default of 4 MiB is one CDS response of a few thousand services.
const MaxResponseBytes = 1 << 30

// Dial connects to target over plaintext, taking responses up to MaxResponseBytes; opts come
// after those (transport credentials among them replace plaintext).
func Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxResponseBytes))}, opts...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return conn, nil
}

// Options configure a stream.
type Options struct {
	// Node goes on the stream's first request only, as Envoy sends it.
	Node *corev3.Node
	// Versions are the versions a client holds from an earlier stream, by type URL: a
	// subscription on this stream starts from them, as Envoy's after a reconnect.
	Versions map[string]string
	// Inline sends each request from the goroutine that asks for it, and returns the send's
	// error there, instead of queueing it.
	Inline bool
}

// NoReply, returned by a handler, leaves the response without an ACK or NACK.
var NoReply = errors.New("ads: no reply")

// Reject wraps why a handler rejects a response: Run NACKs it with err's message.
func Reject(err error) error { return &rejection{err: err} }

type rejection struct{ err error }

func (r *rejection) Error() string { return "rejected: " + r.err.Error() }
func (r *rejection) Unwrap() error { return r.err }

// errorDetail is a NACK's error detail.
func errorDetail(err error) *statuspb.Status {
	return &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
}

// sender sends one stream's requests: queued (the first, which carries the node, is never
// replaced; each later one replaces a waiting one of the same key) or inline.
type sender[T any] struct {
	inline bool
	mu     sync.Mutex // inline: one send at a time
	send   func(T) error
	queue  *adsqueue.Queue[T]
}

func newSender[T any](ctx context.Context, o Options, send func(T) error, cancel context.CancelFunc) *sender[T] {
	s := &sender[T]{inline: o.Inline, send: send}
	if !o.Inline {
		s.queue = adsqueue.Start(ctx, send, cancel)
	}
	return s
}

func (s *sender[T]) put(key string, req T) error {
	if s.inline {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.send(req)
	}
	s.queue.Put(key, req)
	return nil
}

// err is the queued send error that ended the stream, or nil.
func (s *sender[T]) err() error {
	if s.queue == nil {
		return nil
	}
	return s.queue.Err()
}

// recvErr explains why a stream's receive ended: a failed queued send ends it too.
func recvErr[T any](out *sender[T], err error) error {
	if serr := out.err(); serr != nil {
		return fmt.Errorf("send: %w", serr)
	}
	return err
}

// run is both kinds of stream's receive loop: handle sees each response, the reply follows its
// verdict, then replied (if set) and after (the stream's follow-ups) run.
func run[R any](recv func() (R, error), handle func(R) error, ack func(R) error, nack func(R, error) error,
	after func() error, replied func(R, time.Time)) error {
	for {
		resp, err := recv()
		if err != nil {
			return err
		}
		herr := handle(resp)
		var rej *rejection
		switch {
		case herr == nil:
			err = ack(resp)
		case errors.As(herr, &rej):
			err = nack(resp, rej.err)
		case errors.Is(herr, NoReply):
		default:
			_ = after() // the handler's error says why the stream ends
			return herr
		}
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		if replied != nil {
			replied(resp, time.Now())
		}
		if err := after(); err != nil {
			return fmt.Errorf("send: %w", err)
		}
	}
}

// typeState is one type's subscription on a State of the World stream.
type typeState struct {
	names      []string // nil: wildcard
	subscribed bool
	version    string // the last version ACKed (or held from an earlier stream)
	nonce      string // the last response's
}

// Stream is one State of the World ADS stream.
type Stream struct {
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel context.CancelFunc
	out    *sender[*discoveryv3.DiscoveryRequest]
	node   *corev3.Node

	// Replied, if set before Run, is called with every response Run has replied to, and when
	// the reply was sent (Options.Inline) or queued.
	Replied func(resp *discoveryv3.DiscoveryResponse, at time.Time)

	mu       sync.Mutex
	types    map[string]*typeState
	nodeSent bool
	handling bool     // Run is in its handler
	deferred []string // types whose subscription changed meanwhile
}

// Open opens a State of the World stream on conn; it ends with ctx or Close.
func Open(ctx context.Context, conn grpc.ClientConnInterface, o Options) (*Stream, error) {
	sctx, cancel := context.WithCancel(ctx)
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open ADS stream: %w", err)
	}
	s := &Stream{stream: st, cancel: cancel, node: o.Node, types: map[string]*typeState{}}
	for t, v := range o.Versions {
		s.types[t] = &typeState{version: v}
	}
	s.out = newSender(sctx, o, st.Send, cancel)
	return s, nil
}

// Close ends the stream.
func (s *Stream) Close() { s.cancel() }

func (s *Stream) state(typeURL string) *typeState {
	ts := s.types[typeURL]
	if ts == nil {
		ts = &typeState{}
		s.types[typeURL] = ts
	}
	return ts
}

// Subscribe asks for names of typeURL (none: wildcard), carrying the type's version and nonce so
// far. The same subscription again sends nothing. A subscription changed while Run's handler
// runs goes out after that response's reply, as Envoy sends a follow-up (EDS after CDS) after its
// ACK.
func (s *Stream) Subscribe(typeURL string, names ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.state(typeURL)
	if ts.subscribed && slices.Equal(ts.names, names) {
		return nil
	}
	ts.subscribed, ts.names = true, slices.Clone(names)
	if s.handling {
		if !slices.Contains(s.deferred, typeURL) {
			s.deferred = append(s.deferred, typeURL)
		}
		return nil
	}
	return s.put(ts.request(typeURL))
}

// request is a request of the type's subscription, version and nonce.
func (ts *typeState) request(typeURL string) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: ts.version, ResponseNonce: ts.nonce, ResourceNames: ts.names}
}

// Subscription is the names subscribed to of typeURL (nil: wildcard) and whether it is.
func (s *Stream) Subscription(typeURL string) ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.types[typeURL]
	if ts == nil {
		return nil, false
	}
	return slices.Clone(ts.names), ts.subscribed
}

// Version is the last version ACKed of typeURL.
func (s *Stream) Version(typeURL string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts := s.types[typeURL]; ts != nil {
		return ts.version
	}
	return ""
}

// put sends req, with the node if it is the stream's first; s.mu is held.
func (s *Stream) put(req *discoveryv3.DiscoveryRequest) error {
	if !s.nodeSent {
		req.Node, s.nodeSent = s.node, true
		return s.out.put("", req)
	}
	return s.out.put(req.GetTypeUrl(), req)
}

// Recv receives the next response (its nonce becomes its type's).
func (s *Stream) Recv() (*discoveryv3.DiscoveryResponse, error) {
	resp, err := s.stream.Recv()
	if err != nil {
		return nil, recvErr(s.out, err)
	}
	s.mu.Lock()
	s.state(resp.GetTypeUrl()).nonce = resp.GetNonce()
	s.mu.Unlock()
	return resp, nil
}

// ACK accepts resp: its version becomes its type's.
func (s *Stream) ACK(resp *discoveryv3.DiscoveryResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.state(resp.GetTypeUrl())
	ts.version, ts.nonce = resp.GetVersionInfo(), resp.GetNonce()
	return s.put(ts.request(resp.GetTypeUrl()))
}

// NACK rejects resp for cause: the request names its nonce and the version still held.
func (s *Stream) NACK(resp *discoveryv3.DiscoveryResponse, cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.state(resp.GetTypeUrl())
	ts.nonce = resp.GetNonce()
	req := ts.request(resp.GetTypeUrl())
	req.ErrorDetail = errorDetail(cause)
	return s.put(req)
}

// Send sends req as it is, outside the stream's bookkeeping (it never replaces a waiting request).
func (s *Stream) Send(req *discoveryv3.DiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodeSent = s.nodeSent || req.GetNode() != nil
	return s.out.put("", req)
}

// Run receives responses until the stream ends, and returns why. handle sees each one: nil ACKs
// it, Reject(err) NACKs it, NoReply leaves it, and any other error ends Run with that error.
func (s *Stream) Run(handle func(*discoveryv3.DiscoveryResponse) error) error {
	return run(s.Recv, func(r *discoveryv3.DiscoveryResponse) error {
		s.mu.Lock()
		s.handling = true
		s.mu.Unlock()
		return handle(r)
	}, s.ACK, s.NACK, s.flush, s.Replied)
}

// flush sends the subscriptions deferred while the handler ran.
func (s *Stream) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handling = false
	deferred := s.deferred
	s.deferred = nil
	for _, t := range deferred {
		if err := s.put(s.types[t].request(t)); err != nil {
			return err
		}
	}
	return nil
}
