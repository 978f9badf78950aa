// Package memhog is a real process for observer tests: a test binary re-executes itself as a
// memhog that serves pprof on loopback and, when told on stdin, grows its heap until the memory
// cgroup's limit makes the kernel kill it. A package's TestMain calls MaybeRun first.
package memhog

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	envMode = "MESHCHAOS_MEMHOG"
	envAddr = "MESHCHAOS_MEMHOG_ADDR"
	envStep = "MESHCHAOS_MEMHOG_STEP_MIB"
	envCg   = "MESHCHAOS_MEMHOG_CGROUP"
)

// MaybeRun turns the process into a memhog when the environment asks for one (it then never
// returns); otherwise it returns at once.
func MaybeRun() {
	if os.Getenv(envMode) != "1" {
		return
	}
	if cg := os.Getenv(envCg); cg != "" {
		// Join the cgroup before allocating anything, so all the heap is charged there (a
		// process moved in later leaves its earlier charges behind on cgroup v1).
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "memhog: join cgroup:", err)
			os.Exit(3)
		}
	}
	addr := os.Getenv(envAddr)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "memhog:", err)
		os.Exit(3)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go http.Serve(ln, mux)
	ballast = makeBallast()
	fmt.Println(ln.Addr().String())
	step, _ := strconv.Atoi(os.Getenv(envStep))
	if step <= 0 {
		step = 2
	}
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		os.Exit(0) // the parent went away without asking for growth
	}
	growHeap(step << 20)
}

// ballast gives an idle memhog's heap profile something to show.
var ballast [][]byte

//go:noinline
func makeBallast() [][]byte {
	var b [][]byte
	for i := 0; i < 8; i++ {
		b = append(b, make([]byte, 1<<20))
	}
	return b
}

// growHeap keeps step bytes more every 40 ms, touching every page so it is really charged.
//
//go:noinline
func growHeap(step int) {
	var keep [][]byte
	for {
		b := make([]byte, step)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
		time.Sleep(40 * time.Millisecond)
	}
}

// Options for Start.
type Options struct {
	// Addr to serve pprof on (default a free loopback port); a fixed one lets a restarted memhog
	// keep its address.
	Addr string
	// StepMiB is how much the heap grows every 40 ms (default 2).
	StepMiB int
	// Cgroup, when set, is joined before the memhog allocates anything.
	Cgroup *Cgroup
}

// Process is a running memhog.
type Process struct {
	Cmd  *exec.Cmd
	Addr string

	stdin interface{ Write([]byte) (int, error) }
	done  chan struct{}
	mu    sync.Mutex
	ended time.Time
	err   error
}

// Start runs the current test binary as a memhog and waits for its address. t's cleanup kills it
// (by pid) if it is still running.
func Start(t testing.TB, o Options) *Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envMode+"=1", envAddr+"="+o.Addr, envStep+"="+strconv.Itoa(o.StepMiB), "GOMAXPROCS=1")
	if o.Cgroup != nil {
		cmd.Env = append(cmd.Env, envCg+"="+o.Cgroup.Dir)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start memhog: %v", err)
	}
	p := &Process{Cmd: cmd, stdin: stdin, done: make(chan struct{})}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("memhog did not print its address: %v", err)
	}
	p.Addr = strings.TrimSpace(line)
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err, p.ended = err, time.Now()
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(p.Kill)
	return p
}

// Grow tells the memhog to start growing its heap.
func (p *Process) Grow() error {
	_, err := p.stdin.Write([]byte("go\n"))
	return err
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Ended returns when and how the process ended (valid after Done).
func (p *Process) Ended() (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended, p.err
}

// Kill kills the process (our own child, by pid) if it still runs, and waits for it.
func (p *Process) Kill() {
	select {
	case <-p.done:
	default:
		p.Cmd.Process.Kill()
		<-p.done
	}
}
