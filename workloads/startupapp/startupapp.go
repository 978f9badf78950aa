// Package startupapp is the app of the sidecar start-order incident: at start it calls a
// dependency through its sidecar proxy; if that fails it exits non-zero (and the pod
// crash-loops), otherwise it serves HTTP. It reports every attempt on stderr, in the container's
// termination message, and on GET /attempts.
package startupapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/meshchaos/meshchaos/results/respflags"
)

// Options configure the app.
type Options struct {
	// Target is the URL called at start, through the sidecar (e.g. http://127.0.0.1:15001/).
	Target string
	// Host is the Host header of that call (the dependency's name; default: Target's host).
	Host string
	// Attempts is how many calls are made before giving up (default 1: the incident's app).
	Attempts int
	// Interval is the pause between attempts.
	Interval time.Duration
	// MaxInterval, when above Interval, makes the pause double after each failed attempt up to
	// it: the resilient app's exponential backoff.
	MaxInterval time.Duration
	// Timeout bounds each attempt (default 2s).
	Timeout time.Duration
	// Addr is where the app serves once started (default 127.0.0.1:8080; in a pod the manifest gives ":PORT").
	Addr string
	// TerminationLog receives the report when the app gives up (Kubernetes shows it as the
	// container's termination message); "" disables it.
	TerminationLog string
	// Stderr receives one JSON line per attempt (default os.Stderr).
	Stderr io.Writer
}

// Attempt is one start-up call.
type Attempt struct {
	At         time.Time `json:"at"`
	Status     int       `json:"status,omitempty"`
	Flag       string    `json:"flag,omitempty"` // the proxy's response flag, if it answered itself
	Error      string    `json:"error,omitempty"`
	DurationMs float64   `json:"durationMs"`
}

// Report is the outcome of start-up.
type Report struct {
	Target    string    `json:"target"`
	Succeeded bool      `json:"succeeded"`
	Attempts  []Attempt `json:"attempts"`
}

func (o *Options) defaults() {
	if o.Attempts <= 0 {
		o.Attempts = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:8080" // loopback unless told: a pod's manifest gives :PORT
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
}

// CallDependency makes up to Attempts calls and reports them; the error says why the last failed.
func CallDependency(ctx context.Context, o Options) (Report, error) {
	o.defaults()
	rep := Report{Target: o.Target}
	client := &http.Client{Timeout: o.Timeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	var lastErr error
	pause := o.Interval
	for i := range o.Attempts {
		if i > 0 {
			select {
			case <-ctx.Done():
				return rep, ctx.Err()
			case <-time.After(pause):
			}
			if pause < o.MaxInterval {
				pause = min(2*pause, o.MaxInterval)
			}
		}
		a, err := call(ctx, client, o)
		rep.Attempts = append(rep.Attempts, a)
		line, _ := json.Marshal(a)
		fmt.Fprintf(o.Stderr, "startup-app: attempt %d: %s\n", i+1, line)
		if err == nil {
			rep.Succeeded = true
			return rep, nil
		}
		lastErr = err
	}
	return rep, fmt.Errorf("dependency %s failed after %d attempt(s): %w", o.Target, len(rep.Attempts), lastErr)
}

func call(ctx context.Context, client *http.Client, o Options) (Attempt, error) {
	start := time.Now()
	a := Attempt{At: start}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.Target, nil)
	if err != nil {
		a.Error = err.Error()
		return a, err
	}
	if o.Host != "" {
		req.Host = o.Host
	}
	resp, err := client.Do(req)
	a.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		a.Error = err.Error()
		return a, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	a.Status, a.Flag = resp.StatusCode, resp.Header.Get(respflags.Header)
	if resp.StatusCode/100 != 2 {
		err = fmt.Errorf("status %s", resp.Status)
		if a.Flag != "" {
			err = fmt.Errorf("status %s (response flag %s)", resp.Status, a.Flag)
		}
		a.Error = err.Error()
		return a, err
	}
	return a, nil
}

// Run calls the dependency, then serves until ctx ends. When the calls fail it writes the report
// to the termination log and returns the error: the process must exit non-zero.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	if o.Target == "" {
		return errors.New("startup-app: --target URL is required")
	}
	rep, err := CallDependency(ctx, o)
	if err != nil {
		if o.TerminationLog != "" {
			b, _ := json.Marshal(rep)
			_ = os.WriteFile(o.TerminationLog, b, 0o644)
		}
		return err
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("startup-app: listen %s: %w", o.Addr, err)
	}
	return serve(ctx, ln, rep)
}

func serve(ctx context.Context, ln net.Listener, rep Report) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/attempts", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rep)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "started after %d attempt(s)\n", len(rep.Attempts))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
