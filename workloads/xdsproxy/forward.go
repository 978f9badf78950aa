package xdsproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/meshchaos/meshchaos/results/respflags"
)

// Envoy's local reply bodies for the flags experiments count.
const (
	bodyUH = "no healthy upstream"
	bodyUF = "upstream connect error or disconnect/reset before headers. reset reason: connection failure"
	bodyUC = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
	bodyUT = "upstream request timeout"
)

// maxRetryBody is the largest request body buffered so it can be re-sent on retry (Envoy buffers
// up to its per-request buffer limit too).
const maxRetryBody = 64 << 10

// localReply answers for the proxy itself, with Envoy's status, body and response flag.
func (p *Proxy) localReply(w http.ResponseWriter, code int, flag, body string) {
	h := w.Header()
	if flag != "" {
		h.Set(respflags.Header, flag)
		for _, f := range strings.Split(flag, ",") {
			p.stats.flag(f)
		}
	}
	if body != "" {
		h.Set("Content-Type", "text/plain")
	}
	w.WriteHeader(code)
	io.WriteString(w, body)
}

// statusWriter records the status for the per-class counters.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (p *Proxy) listenerHandler(b *boundListener) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.stats.requests.Add(1)
		sw := &statusWriter{ResponseWriter: w}
		// A draining listener serves its open connections with its last configuration.
		ll := b.draining.Load()
		if ll == nil {
			ll = p.snap.Load().listeners[b.name]
		}
		p.route(ll, sw, r)
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		p.stats.response(sw.code)
	})
}

// route is listener → virtual host → route → cluster → endpoint.
func (p *Proxy) route(ll *liveListener, w http.ResponseWriter, r *http.Request) {
	snap := p.snap.Load()
	if ll == nil {
		p.localReply(w, http.StatusNotFound, respflags.NoRouteFound, "")
		return
	}
	host := strings.ToLower(r.Host)
	if ll.cfg.stripAnyPort || ll.cfg.stripMatch {
		if h, port, err := net.SplitHostPort(host); err == nil && (ll.cfg.stripAnyPort || port == ll.cfg.port) {
			host = h
		}
	}
	vh := ll.table.virtualHost(host)
	if vh == nil {
		p.localReply(w, http.StatusNotFound, respflags.NoRouteFound, "")
		return
	}
	rt := vh.match(r)
	if rt == nil {
		p.localReply(w, http.StatusNotFound, respflags.NoRouteFound, "")
		return
	}
	if rt.direct != nil {
		w.WriteHeader(rt.direct.status)
		io.WriteString(w, rt.direct.body)
		return
	}
	up := snap.clusters[rt.pickCluster()]
	if up == nil {
		p.localReply(w, rt.notFoundCode, respflags.NoClusterFound, "")
		return
	}
	if len(up.hosts) == 0 {
		p.localReply(w, http.StatusServiceUnavailable, respflags.NoHealthyUpstream, bodyUH)
		return
	}
	ctx := r.Context()
	if rt.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rt.timeout)
		defer cancel()
	}
	if rt.retry != nil && r.Body != nil && r.Body != http.NoBody && r.ContentLength > 0 && r.ContentLength <= maxRetryBody {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			p.localReply(w, http.StatusBadRequest, "DPE", "")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	f := &forward{up: up, rt: rt, proxy: p}
	p.fwd.rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, forwardKey{}, f)))
}

type forwardKey struct{}

// forward is the routing decision handed from the handler to the transport.
type forward struct {
	up    *upstream
	rt    *route
	proxy *Proxy
}

// upstreamError is a failed upstream attempt with Envoy's flag for it.
type upstreamError struct {
	flag string
	err  error
	// retriesExhausted: the failure was one the route retries on and no retry was left; Envoy
	// then also sets URX (UpstreamRetryLimitExceeded).
	retriesExhausted bool
}

func (e *upstreamError) Error() string { return e.flag + ": " + e.err.Error() }

// flags are the response flags of the local reply: the failure's, and URX beside it when the
// retries were exhausted, as Envoy's %RESPONSE_FLAGS% joins them ("UF,URX").
func (e *upstreamError) flags() string {
	if e.retriesExhausted {
		return e.flag + "," + respflags.UpstreamRetryLimitExceeded
	}
	return e.flag
}
func (e *upstreamError) Unwrap() error { return e.err }

// dialError marks a failure to connect, as opposed to a failure on an open connection.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// forwarder holds the reverse proxy and the upstream connection pool.
type forwarder struct {
	rp    *httputil.ReverseProxy
	stats *stats
	pool  *upstreamPool
}

func newForwarder(st *stats) *forwarder {
	f := &forwarder{stats: st, pool: newUpstreamPool()}
	f.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			fw := pr.In.Context().Value(forwardKey{}).(*forward)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = fw.up.name // replaced by the chosen endpoint in RoundTrip
			pr.Out.Host = pr.In.Host
			if fw.rt.hostRewrite != "" {
				pr.Out.Host = fw.rt.hostRewrite
			}
			if fw.rt.prefixRewrite != "" && fw.rt.prefix != "" && strings.HasPrefix(pr.In.URL.Path, fw.rt.prefix) {
				pr.Out.URL.Path = fw.rt.prefixRewrite + strings.TrimPrefix(pr.In.URL.Path, fw.rt.prefix)
				pr.Out.URL.RawPath = ""
			}
			pr.Out.Header.Set("X-Forwarded-Proto", "http")
			// Envoy appends the downstream address to X-Forwarded-For.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
			pr.Out.Header.Del("X-Forwarded-Host")
		},
		Transport:    f,
		BufferPool:   bufferPool{},
		ErrorHandler: f.errorHandler,
		ErrorLog:     log.New(io.Discard, "", 0),
	}
	return f
}

func (f *forwarder) close() { f.pool.close() }

// RoundTrip picks an endpoint round robin and forwards, retrying as the route's retry policy
// allows (a retry goes to the next endpoint, as Envoy's default retry host selection does).
func (f *forwarder) RoundTrip(req *http.Request) (*http.Response, error) {
	fw := req.Context().Value(forwardKey{}).(*forward)
	rp := fw.rt.retry
	retries := 0
	if rp != nil {
		retries = rp.numRetries
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := retryBackOff(req.Context(), attempt); err != nil {
				return nil, classify(req.Context(), req.Context(), err)
			}
		}
		hosts := fw.up.hosts
		host := hosts[int(fw.up.rr.Add(1)-1)%len(hosts)]
		// req is already the reverse proxy's private copy: a shallow copy with its own URL is
		// enough per attempt.
		o := *req
		u := *req.URL
		u.Host = host
		o.URL = &u
		out := &o
		if attempt > 0 && req.GetBody != nil {
			b, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			out.Body = b
		}
		ctx, cancel := out.Context(), context.CancelFunc(nil)
		if rp != nil && rp.perTryTimeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, rp.perTryTimeout)
			out = out.WithContext(ctx)
		}
		resp, err := f.pool.roundTrip(out, fw.up.connectTimeout)
		canRetry := attempt < retries && replayable && req.Context().Err() == nil
		if err != nil {
			if cancel != nil {
				cancel()
			}
			ue := classify(req.Context(), ctx, err)
			if ue.flag == respflags.UpstreamConnectionFailure {
				f.stats.upstreamCxFail.Add(1)
			}
			if canRetry && rp.retriable(ue.flag) {
				continue
			}
			ue.retriesExhausted = retries > 0 && attempt == retries && rp.retriable(ue.flag)
			return nil, ue
		}
		if canRetry && rp.retriableStatus(resp.StatusCode) {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if cancel != nil {
				cancel()
			}
			continue
		}
		if cancel != nil {
			// The attempt's context must live as long as its body is read.
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		}
		return resp, nil
	}
}

// bufferPool reuses the reverse proxy's copy buffers (32 KiB each otherwise per request).
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

func classify(reqCtx, tryCtx context.Context, err error) *upstreamError {
	var de *dialError
	switch {
	case errors.As(err, &de) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
		return &upstreamError{flag: respflags.UpstreamConnectionFailure, err: err}
	case errors.As(err, &de):
		// The dial was cut short: by the route timeout (UT) or because it took longer than
		// connect_timeout (UF). net.Dialer reports both as timeouts.
		if reqCtx.Err() != nil || tryCtx.Err() != nil {
			return &upstreamError{flag: respflags.UpstreamRequestTimeout, err: err}
		}
		return &upstreamError{flag: respflags.UpstreamConnectionFailure, err: err}
	case reqCtx.Err() == context.DeadlineExceeded || tryCtx.Err() == context.DeadlineExceeded,
		// The connection's deadline (set from the context's) can fire just before the context's own timer.
		errors.Is(err, os.ErrDeadlineExceeded) && (deadlinePassed(reqCtx) || deadlinePassed(tryCtx)):
		return &upstreamError{flag: respflags.UpstreamRequestTimeout, err: err}
	case reqCtx.Err() != nil:
		return &upstreamError{flag: "DC", err: err} // downstream went away
	default:
		return &upstreamError{flag: respflags.UpstreamConnectionTermination, err: err}
	}
}

// Envoy's default retry back-off: fully jittered exponential, base 25 ms, at most 10 × base
// (route.RetryPolicy.retry_back_off's defaults).
const (
	retryBackOffBase = 25 * time.Millisecond
	retryBackOffMax  = 10 * retryBackOffBase
)

// retryBackOff waits before retry n (1, 2, ...): a uniform draw in [0, (2^n - 1) × base),
// capped at the maximum, as Envoy's JitteredExponentialBackOffStrategy; it returns early with
// ctx's error.
func retryBackOff(ctx context.Context, n int) error {
	t := time.NewTimer(rand.N(retryBackOffCeil(n)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryBackOffCeil is the bound of retry n's back-off: (2^n - 1) × base, at most the maximum.
func retryBackOffCeil(n int) time.Duration {
	return min(retryBackOffBase*time.Duration(1<<min(n, 16)-1), retryBackOffMax)
}

func deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

func (p *retryPolicy) retriable(flag string) bool {
	switch flag {
	case respflags.UpstreamConnectionFailure:
		return p.connectFailure || p.fiveXX || p.gatewayError
	case respflags.UpstreamConnectionTermination:
		return p.reset || p.fiveXX || p.gatewayError
	case respflags.UpstreamRequestTimeout:
		return p.perTryTimeout > 0 && (p.fiveXX || p.gatewayError)
	}
	return false
}

func (p *retryPolicy) retriableStatus(code int) bool {
	switch {
	case p.fiveXX && code >= 500:
		return true
	case p.gatewayError && (code == 502 || code == 503 || code == 504):
		return true
	}
	return p.retriableCodes[code]
}

func (f *forwarder) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	fw := r.Context().Value(forwardKey{}).(*forward)
	var ue *upstreamError
	if !errors.As(err, &ue) {
		ue = &upstreamError{flag: respflags.UpstreamConnectionTermination, err: err}
	}
	switch ue.flag {
	case respflags.UpstreamConnectionFailure:
		fw.proxy.localReply(w, http.StatusServiceUnavailable, ue.flags(), bodyUF)
	case respflags.UpstreamRequestTimeout:
		fw.proxy.localReply(w, http.StatusGatewayTimeout, ue.flags(), bodyUT)
	case "DC":
		fw.proxy.stats.flag("DC")
	default:
		fw.proxy.localReply(w, http.StatusServiceUnavailable, ue.flags(), bodyUC)
	}
}

// slogErrorLog routes net/http's server errors (malformed requests, TLS noise) to the logger.
func slogErrorLog(l *slog.Logger) *log.Logger {
	return slog.NewLogLogger(l.Handler(), slog.LevelDebug)
}
