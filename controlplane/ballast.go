package controlplane

import (
	"fmt"
	"math"
	"net/http"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"
)

// ballast is a chaos hook on the admin port: POST /debug/ballast?mb=N grows a retained
// allocation step MiB at a time (default 8, every 50ms) until N MiB or the kernel's OOM killer
// ends the process. The growth is gradual on purpose: the harness watches the container's
// memory and captures a heap profile before the kill, as it would before a real leak's OOM.
// GET reports the current size. The memory is real and touched, so the kill is the kernel's.
//
// It is off unless the control plane was started with a bound (--ballast-max, set by the
// harness for the runs that OOM-kill it): the admin port answers every pod of the cluster, and
// an unbounded hook would let any of them take the node's memory.
//
// Near a Go memory limit (GOMEMLIMIT, which the manifest sets from the container's limit) the
// runtime collects on almost every allocation and returns freed pages to stay under the limit;
// under a small CPU limit that collector can take all the CPU the process gets, and 1 MiB steps
// then never reach the kernel's limit (seen: a control plane at 254 of 256 MiB for 2 minutes).
// So once the runtime's memory is within jumpFraction of its limit, the rest of the ballast is
// one allocation, touched page by page without allocating again: the kernel's limit is crossed
// in one step, as a leak's large allocation would.
type ballast struct {
	// max is the largest target in MiB; 0 turns the hook off.
	max int

	mu     sync.Mutex
	chunks [][]byte
	held   int // MiB held
	target int
	active bool
	jumps  int // allocations of the whole remainder

	// limit and inUse are the runtime's memory limit and the memory it holds from the OS
	// (nil: the process's own; tests set them).
	limit func() int64
	inUse func() int64
}

// jumpFraction: the share of the memory limit from which the remainder is one allocation.
const jumpFraction = 0.9

// runtimeMemory is the memory the Go runtime holds from the OS (mapped minus released), the
// figure its memory limit is about.
func runtimeMemory() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
}

// nearLimit reports whether the runtime's memory is within jumpFraction of its memory limit
// (never without one).
func (b *ballast) nearLimit() bool {
	limit, inUse := b.limit, b.inUse
	if limit == nil {
		limit = func() int64 { return debug.SetMemoryLimit(-1) }
	}
	if inUse == nil {
		inUse = runtimeMemory
	}
	l := limit()
	return l > 0 && l < math.MaxInt64 && float64(inUse()) >= jumpFraction*float64(l)
}

func (b *ballast) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		b.mu.Lock()
		fmt.Fprintf(w, "{\"mb\":%d,\"targetMB\":%d,\"jumps\":%d}\n", b.held, b.target, b.jumps)
		b.mu.Unlock()
	case http.MethodPost:
		if b.max <= 0 {
			http.Error(w, "the ballast is off: start the control plane with --ballast-max=MiB to allow it", http.StatusForbidden)
			return
		}
		mb, err := strconv.Atoi(r.URL.Query().Get("mb"))
		if err != nil || mb <= 0 {
			http.Error(w, "give ?mb=N (MiB, > 0)", http.StatusBadRequest)
			return
		}
		if mb > b.max {
			http.Error(w, fmt.Sprintf("mb=%d: at most %d (--ballast-max)", mb, b.max), http.StatusBadRequest)
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
		left := b.target - b.held
		if left <= 0 {
			b.active = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if b.nearLimit() {
			b.add(left, true)
			continue
		}
		for i := 0; i < min(step, left); i++ {
			b.add(1, false)
		}
	}
}

// add allocates mb MiB as one slice and touches every page: resident, not just reserved.
func (b *ballast) add(mb int, jump bool) {
	c := make([]byte, mb<<20)
	for j := 0; j < len(c); j += 4096 {
		c[j] = 1
	}
	b.mu.Lock()
	b.chunks = append(b.chunks, c)
	b.held += mb
	if jump {
		b.jumps++
	}
	b.mu.Unlock()
}
