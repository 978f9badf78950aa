// Package echo is the backend workload: an HTTP server that answers with the pod's name and IP,
// so traffic through a proxy shows which endpoint served each request, and serves gRPC's health
// service on the same port for proxyless gRPC clients (grpc.go).
package echo

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"time"
)

// Options configure the server.
type Options struct {
	// Addr to listen on (default 127.0.0.1:8080; in a pod the manifest gives ":PORT").
	Addr string
	// PodName and PodIP are reported in every answer (default: $POD_NAME / hostname, $POD_IP).
	PodName, PodIP string
	// ReadyFor and UnreadyFor make /ready flap: ready for ReadyFor, then 503 for UnreadyFor,
	// repeating from start (both 0: always ready), until POST /control/steady or /control/flap
	// changes it. Env: ECHO_READY_FOR, ECHO_UNREADY_FOR.
	ReadyFor, UnreadyFor time.Duration
	// Latency delays every answer of GET / (env ECHO_LATENCY).
	Latency time.Duration
	// ErrorRate is the fraction (0..1) of GET / answered with ErrorCode instead (env
	// ECHO_ERROR_RATE, ECHO_ERROR_CODE; code default 500).
	ErrorRate float64
	ErrorCode int
	// now is the clock (tests).
	now func() time.Time
	// exit ends the process on POST /control/crash (default os.Exit; tests).
	exit func(code int)
	// BallastMB is memory allocated and touched at start, for memory-limit (OOM) tests.
	BallastMB int
}

// ballast keeps the start-up allocation reachable so the collector cannot return it.
var ballast [][]byte

// LookupReply is the JSON body of GET /lookup?host=NAME: what this pod's resolver (cluster DNS,
// through the resolv.conf kubelet wrote) answers for NAME.
type LookupReply struct {
	Host  string   `json:"host"`
	Addrs []string `json:"addrs,omitempty"`
	Error string   `json:"error,omitempty"`
}

// Reply is the JSON body of GET /.
type Reply struct {
	Pod  string `json:"pod"`
	IP   string `json:"ip,omitempty"`
	Host string `json:"host"`
	Path string `json:"path"`
}

func (o *Options) defaults() {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:8080" // loopback unless told: a pod's manifest gives :PORT
	}
	if o.PodName == "" {
		o.PodName = os.Getenv("POD_NAME")
	}
	if o.PodName == "" {
		o.PodName, _ = os.Hostname()
	}
	if o.PodIP == "" {
		o.PodIP = os.Getenv("POD_IP")
	}
	if o.exit == nil {
		o.exit = os.Exit
	}
	o.envDefaults()
}

// Handler serves GET / (the reply, with injected latency and errors), /healthz (liveness,
// always 200), /ready (readiness, flapping as configured) and POST /control/flap and
// /control/steady, which switch the flapping at run time, and /control/crash (control.go).
func Handler(o Options) http.Handler {
	o.defaults()
	mux := http.NewServeMux()
	ready := newReadiness(o.now, o.ReadyFor, o.UnreadyFor)
	controlHandlers(mux, ready, o.exit)
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		if !ready.ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/lookup", func(w http.ResponseWriter, r *http.Request) {
		host := r.URL.Query().Get("host")
		if host == "" {
			http.Error(w, "missing ?host=NAME", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		rep := LookupReply{Host: host}
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			rep.Error = err.Error()
			w.WriteHeader(http.StatusBadGateway)
		}
		rep.Addrs = addrs
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if !o.inject(w, r) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Echo-Pod", o.PodName)
		_ = json.NewEncoder(w).Encode(Reply{Pod: o.PodName, IP: o.PodIP, Host: r.Host, Path: r.URL.Path})
	})
	return mux
}

// Serve runs the server until ctx ends, then shuts down gracefully.
func Serve(ctx context.Context, o Options) error {
	o.defaults()
	if err := o.Validate(); err != nil {
		return err
	}
	for i := 0; i < o.BallastMB; i++ {
		b := make([]byte, 1<<20)
		for j := range b { // touch every page so it is resident, not just reserved
			b[j] = byte(j)
		}
		ballast = append(ballast, b)
	}
	l, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: withGRPC(Handler(o)), ReadHeaderTimeout: 10 * time.Second, Protocols: protocols()}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
