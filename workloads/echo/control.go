package echo

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// readiness is /ready's state: steady (always ready) or flapping, ready for up then unready for
// down, repeating from since. The control endpoints change it while the server runs, so chaos
// can make a pod flap without restarting it.
type readiness struct {
	now func() time.Time

	mu       sync.Mutex
	up, down time.Duration
	since    time.Time
}

func newReadiness(now func() time.Time, up, down time.Duration) *readiness {
	r := &readiness{now: now}
	r.set(up, down)
	return r
}

// set starts flapping now, in a ready phase (0, 0: steady).
func (r *readiness) set(up, down time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.up, r.down, r.since = up, down, r.now()
}

func (r *readiness) ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.up <= 0 || r.down <= 0 {
		return true
	}
	return r.now().Sub(r.since)%(r.up+r.down) < r.up
}

// checkFlap reports a flapping configuration that cannot work.
func checkFlap(up, down time.Duration) error {
	switch {
	case up < 0 || down < 0:
		return fmt.Errorf("durations must not be negative")
	case (up == 0) != (down == 0):
		return fmt.Errorf("readiness flapping needs both a ready and an unready duration")
	}
	return nil
}

// controlHandlers serves the run-time switches:
//
//	POST /control/flap?up=2s&down=1s   /ready flaps from now on, starting ready
//	POST /control/steady               /ready answers 200 again
//	POST /control/crash                the process exits with status 1 once it has answered:
//	                                   a container crash, which kubelet restarts
func controlHandlers(mux *http.ServeMux, r *readiness, exit func(code int)) {
	mux.HandleFunc("POST /control/crash", func(w http.ResponseWriter, req *http.Request) {
		body := "crashing: exit status 1\n"
		// A complete answer (its length known) before the process ends under it.
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write([]byte(body))
		_ = http.NewResponseController(w).Flush()
		exit(1)
	})
	mux.HandleFunc("POST /control/flap", func(w http.ResponseWriter, req *http.Request) {
		up, uerr := time.ParseDuration(req.URL.Query().Get("up"))
		down, derr := time.ParseDuration(req.URL.Query().Get("down"))
		if uerr != nil || derr != nil || up == 0 || down == 0 {
			http.Error(w, "want ?up=DURATION&down=DURATION, both above 0 (e.g. up=2s&down=1s)", http.StatusBadRequest)
			return
		}
		if err := checkFlap(up, down); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.set(up, down)
		_, _ = fmt.Fprintf(w, "flapping: ready %s, unready %s\n", up, down)
	})
	mux.HandleFunc("POST /control/steady", func(w http.ResponseWriter, req *http.Request) {
		r.set(0, 0)
		_, _ = w.Write([]byte("steady: ready\n"))
	})
	mux.HandleFunc("/control/", func(w http.ResponseWriter, req *http.Request) {
		http.Error(w, "use POST /control/flap?up=DURATION&down=DURATION, POST /control/steady or POST /control/crash", http.StatusMethodNotAllowed)
	})
}
