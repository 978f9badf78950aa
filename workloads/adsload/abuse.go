package adsload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshchaos/meshchaos/internal/ads"
	"github.com/meshchaos/meshchaos/workloads/xdscred"
)

// Abuse modes: ADS clients that misbehave, to prove a control plane keeps serving the others.
const (
	// AbuseNACK: clients that subscribe as Envoy does and reject every response.
	AbuseNACK = "nack"
	// AbuseSlow: clients that subscribe to everything and never read (slow consumers); each
	// reopens its stream every Period, so the pressure stays whatever the server does.
	AbuseSlow = "slow"
	// AbuseFlood: Clients streams at once, a few connections, each stream subscribed and read.
	AbuseFlood = "flood"
	// AbuseDisconnect: clients that subscribe and drop the stream and its connection as the
	// first response arrives, or at a random moment within a few milliseconds, over and over.
	AbuseDisconnect = "disconnect"
	// AbuseMalformed: clients that send, in turn, an unknown type URL, an empty one, a huge
	// resource name list, a Delta subscription just as huge, garbage node metadata (a new
	// namespace every time, deep nesting) and a message over the server's receive limit.
	AbuseMalformed = "malformed"
)

// AbuseModes lists the modes.
var AbuseModes = []string{AbuseNACK, AbuseSlow, AbuseFlood, AbuseDisconnect, AbuseMalformed}

// AbuseOptions configure an abuser.
type AbuseOptions struct {
	XDSAddress string
	// Credentials reach a secure xDS port (see Options.Credentials). Without a token, the
	// abusers test that a control plane refuses unauthenticated streams.
	Credentials xdscred.Options
	// Namespace is the namespace of the abusers' node ids (default "abuse"); with a token, the
	// token's.
	Namespace string
	Mode      string
	// Clients is how many misbehaving clients (streams for flood) run at once.
	Clients int
	// Period is how often a slow consumer reopens its stream (default 5 s).
	Period time.Duration
	// OversizeBytes is the size of the malformed mode's oversized request (default 17 MiB,
	// over the reference control plane's 16 MiB limit).
	OversizeBytes int
	Logger        *slog.Logger
}

// AbuseStats count what the abusers did and how the server answered.
type AbuseStats struct {
	Mode      string           `json:"mode"`
	Streams   int64            `json:"streams"`
	Responses int64            `json:"responses"`
	NACKs     int64            `json:"nacks"`
	Ended     map[string]int64 `json:"ended"` // streams ended, by gRPC code
}

// Abuser is a running set of misbehaving clients.
type Abuser struct {
	o         AbuseOptions
	log       *slog.Logger
	streams   atomic.Int64
	responses atomic.Int64
	nacks     atomic.Int64
	mu        sync.Mutex
	ended     map[string]int64
	seq       atomic.Int64
}

// NewAbuser validates o.
func NewAbuser(o AbuseOptions) (*Abuser, error) {
	if o.XDSAddress == "" {
		return nil, errors.New("adsload: an xDS server address is required (--xds host:port)")
	}
	known := false
	for _, m := range AbuseModes {
		known = known || m == o.Mode
	}
	if !known {
		return nil, fmt.Errorf("adsload: unknown abuse mode %q (one of %s)", o.Mode, strings.Join(AbuseModes, ", "))
	}
	if o.Clients <= 0 {
		return nil, errors.New("adsload: --clients must be at least 1")
	}
	if err := o.Credentials.Validate(); err != nil {
		return nil, fmt.Errorf("adsload: %w", err)
	}
	if o.Namespace == "" {
		o.Namespace = "abuse"
	}
	if o.Period <= 0 {
		o.Period = 5 * time.Second
	}
	if o.OversizeBytes <= 0 {
		o.OversizeBytes = 17 << 20
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Abuser{o: o, log: log, ended: map[string]int64{}}, nil
}

// Stats returns the counts so far.
func (a *Abuser) Stats() AbuseStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := AbuseStats{Mode: a.o.Mode, Streams: a.streams.Load(), Responses: a.responses.Load(), NACKs: a.nacks.Load(),
		Ended: map[string]int64{}}
	for k, v := range a.ended {
		s.Ended[k] = v
	}
	return s
}

// Run abuses until ctx ends.
func (a *Abuser) Run(ctx context.Context) error {
	if a.o.Mode == AbuseFlood {
		return a.flood(ctx)
	}
	var wg sync.WaitGroup
	for i := range a.o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				a.once(ctx, i)
				if a.o.Mode == AbuseNACK || a.o.Mode == AbuseMalformed {
					sleep(ctx, 50*time.Millisecond) // reconnect, without spinning on a refusal
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// dial opens a connection of its own. Slow consumers fix their flow-control windows at 64 KiB:
// gRPC's dynamic window would otherwise grow to megabytes and absorb what the server sends.
func (a *Abuser) dial(slow bool) (*grpc.ClientConn, error) {
	creds, err := a.o.Credentials.DialOptions()
	if err != nil {
		return nil, err
	}
	opts := append(creds, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if slow {
		opts = append(opts, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	}
	return grpc.NewClient(a.o.XDSAddress, opts...)
}

func (a *Abuser) node(i int) *corev3.Node {
	ns := a.o.Namespace
	id := fmt.Sprintf("sidecar~10.200.%d.%d~abuse-%s-%d.%s~%s.svc.cluster.local", (i>>8)&0xff, i&0xff, a.o.Mode, i, ns, ns)
	return &corev3.Node{Id: id, Cluster: "abuse", UserAgentName: "adsload-abuse"}
}

func (a *Abuser) end(err error) {
	code := status.Code(err).String()
	if errors.Is(err, io.EOF) {
		code = "EOF"
	}
	a.mu.Lock()
	a.ended[code]++
	a.mu.Unlock()
}

// once runs one stream of client i.
func (a *Abuser) once(ctx context.Context, i int) {
	conn, err := a.dial(a.o.Mode == AbuseSlow)
	if err != nil {
		a.end(err)
		return
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.o.Mode == AbuseMalformed {
		a.malformed(sctx, conn, i)
		return
	}
	// Inline: each misbehaviour goes out when it is meant to, and its send's error ends it.
	s, err := ads.Open(sctx, conn, ads.Options{Node: a.node(i), Inline: true})
	if err != nil {
		a.end(err)
		return
	}
	a.streams.Add(1)
	// Everything, as wildcards: CDS, EDS (every assignment), LDS, RDS.
	for _, t := range types {
		if err := s.Subscribe(t); err != nil {
			a.end(err)
			return
		}
	}
	switch a.o.Mode {
	case AbuseSlow:
		sleep(ctx, a.o.Period) // read nothing, then start over
		a.end(context.Canceled)
	case AbuseDisconnect:
		// Drop mid-push: at the first response's arrival, or before it.
		if rand.IntN(2) == 0 {
			sleep(ctx, time.Duration(rand.IntN(20))*time.Millisecond)
		} else if _, err := s.Recv(); err == nil {
			a.responses.Add(1)
		}
		a.end(context.Canceled)
	case AbuseNACK:
		// Reject every response, keeping no version (none is ever accepted), and say so twice
		// (a repeated NACK of one nonce): once here, once as Run's reply.
		s.Replied = func(*discoveryv3.DiscoveryResponse, time.Time) { a.nacks.Add(1) }
		a.end(s.Run(func(resp *discoveryv3.DiscoveryResponse) error {
			a.responses.Add(1)
			if err := s.NACK(resp, errRejectAll); err != nil {
				return err
			}
			a.nacks.Add(1)
			return ads.Reject(errRejectAll)
		}))
	}
}

var errRejectAll = errors.New("abuse: rejecting everything")

// flood holds Clients streams open over connections of at most 90 streams each, each stream
// subscribed to clusters and read (so it costs the server a watch, not a blocked send).
func (a *Abuser) flood(ctx context.Context) error {
	const perConn = 90
	var wg sync.WaitGroup
	for c := 0; c*perConn < a.o.Clients; c++ {
		conn, err := a.dial(false)
		if err != nil {
			return fmt.Errorf("adsload: dial %s: %w", a.o.XDSAddress, err)
		}
		defer conn.Close()
		for j := c * perConn; j < min((c+1)*perConn, a.o.Clients); j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					// Read, never ACKed: each stream costs the server a watch.
					s, err := ads.Open(ctx, conn, ads.Options{Node: a.node(j), Inline: true})
					if err == nil {
						a.streams.Add(1)
						err = s.Subscribe(types[0])
						for err == nil {
							if _, err = s.Recv(); err == nil {
								a.responses.Add(1)
							}
						}
						s.Close()
					}
					a.end(err)
					sleep(ctx, 100*time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	return nil
}

// malformed sends one of the bad requests (in turn) on a stream of its own and waits for the
// server's answer.
func (a *Abuser) malformed(ctx context.Context, conn *grpc.ClientConn, i int) {
	// A request the server takes without answering (names that do not exist) waits no longer.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n := a.seq.Add(1)
	node := a.node(i)
	var req any
	switch n % 6 {
	case 0:
		req = &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: "type.googleapis.com/abuse.Unknown" + strings.Repeat("x", 1000)}
	case 1:
		req = &discoveryv3.DiscoveryRequest{Node: node}
	case 2:
		req = &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: types[1], ResourceNames: names(100000)}
	case 3:
		req = &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: types[1], ResourceNamesSubscribe: names(100000)}
	case 4:
		node.Metadata = garbageMetadata(n)
		req = &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: types[0]}
	case 5:
		req = &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: types[1],
			ResourceNames: []string{strings.Repeat("o", a.o.OversizeBytes)}}
	}
	// The request goes out as it is, outside any subscription's bookkeeping.
	var err error
	if d, ok := req.(*discoveryv3.DeltaDiscoveryRequest); ok {
		var s *ads.DeltaStream
		if s, err = ads.OpenDelta(ctx, conn, ads.Options{Inline: true}); err == nil {
			a.streams.Add(1)
			if err = s.Send(d); err == nil {
				_, err = s.Recv()
			}
		}
	} else {
		var s *ads.Stream
		if s, err = ads.Open(ctx, conn, ads.Options{Inline: true}); err == nil {
			a.streams.Add(1)
			if err = s.Send(req.(*discoveryv3.DiscoveryRequest)); err == nil {
				_, err = s.Recv()
			}
		}
	}
	if err == nil {
		a.responses.Add(1) // an answer (e.g. to garbage metadata): the stream is dropped now
		err = context.Canceled
	}
	a.end(err)
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("outbound|80||abuse-%d.nowhere.test", i)
	}
	return out
}

// garbageMetadata is node metadata no proxy sends: a NAMESPACE that is new every time (and not
// a namespace name every other time), deep nesting, and values of every kind.
func garbageMetadata(n int64) *structpb.Struct {
	ns := fmt.Sprintf("abuse-ns-%d", n)
	if n%2 == 0 {
		ns = fmt.Sprintf("Not A Namespace! %d %s", n, strings.Repeat("ü", 300))
	}
	deep := map[string]any{"leaf": true}
	for range 60 {
		deep = map[string]any{"d": deep, "n": 1.5, "s": "x", "l": []any{nil, "y", 2.0}}
	}
	md, _ := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "GENERATOR": 42.0, "LABELS": "not a map", "deep": deep})
	return md
}
