package controlplane

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// ballast is a chaos hook on the admin port: POST /debug/ballast?mb=N grows a retained
// allocation step MiB at a time (default 8, every 50ms) until N MiB or the kernel's OOM killer
// ends the process. The growth is gradual on purpose: the harness watches the container's
// memory and captures a heap profile before the kill, as it would before a real leak's OOM.
// GET reports the current size. The memory is real and touched, so the kill is the kernel's.
type ballast struct {
	mu     sync.Mutex
	chunks [][]byte
	target int
	active bool
}

func (b *ballast) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		b.mu.Lock()
		fmt.Fprintf(w, "{\"mb\":%d,\"targetMB\":%d}\n", len(b.chunks), b.target)
		b.mu.Unlock()
	case http.MethodPost:
		mb, err := strconv.Atoi(r.URL.Query().Get("mb"))
		if err != nil || mb <= 0 || mb > 1<<20 {
			http.Error(w, "give ?mb=N (MiB, > 0)", http.StatusBadRequest)
			return
		}
		step := 8
		if s := r.URL.Query().Get("step"); s != "" {
			if step, err = strconv.Atoi(s); err != nil || step <= 0 {
				http.Error(w, "step: MiB per tick, > 0", http.StatusBadRequest)
				return
			}
		}
		every := 50 * time.Millisecond
		if s := r.URL.Query().Get("every"); s != "" {
			if every, err = time.ParseDuration(s); err != nil || every <= 0 {
				http.Error(w, "every: a Go duration, > 0", http.StatusBadRequest)
				return
			}
		}
		b.mu.Lock()
		b.target = mb
		start := !b.active
		b.active = true
		b.mu.Unlock()
		if start {
			go b.grow(step, every)
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "{\"targetMB\":%d,\"stepMB\":%d,\"every\":%q}\n", mb, step, every)
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
	}
}

func (b *ballast) grow(step int, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		b.mu.Lock()
		if len(b.chunks) >= b.target {
			b.active = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		for i := 0; i < step; i++ {
			c := make([]byte, 1<<20)
			for j := 0; j < len(c); j += 4096 { // touch every page: resident, not just reserved
				c[j] = 1
			}
			b.mu.Lock()
			b.chunks = append(b.chunks, c)
			b.mu.Unlock()
		}
	}
}
