package observe

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as the profiled process: with MESHCHAOS_OBSERVE_CHILD=alloc it serves
// pprof on loopback, prints its address, and on a line from stdin starts growing its heap.
const childEnv = "MESHCHAOS_OBSERVE_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "alloc" {
		runAllocChild()
		return
	}
	os.Exit(m.Run())
}

func runAllocChild() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go http.Serve(ln, mux)
	ballast = makeBallast()
	fmt.Println(ln.Addr().String())
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		os.Exit(0) // parent went away without asking for growth
	}
	growHeap()
}

// ballast gives an idle child's heap profile something to show.
var ballast [][]byte

//go:noinline
func makeBallast() [][]byte {
	var b [][]byte
	for i := 0; i < 8; i++ {
		b = append(b, make([]byte, 1<<20))
	}
	return b
}

// growHeap keeps 2 MiB more every 40 ms (~50 MiB/s), touching every page so it is really charged.
//
//go:noinline
func growHeap() {
	var keep [][]byte
	for {
		b := make([]byte, 2<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
		time.Sleep(40 * time.Millisecond)
	}
}

// child is a running alloc child.
type child struct {
	cmd   *exec.Cmd
	addr  string
	stdin interface{ Write([]byte) (int, error) }
	done  chan struct{}
	ended time.Time
	err   error
}

func startChild(t *testing.T) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=alloc", "GOMAXPROCS=1")
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
		t.Fatalf("start child: %v", err)
	}
	c := &child{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child did not print its address: %v", err)
	}
	c.addr = strings.TrimSpace(line)
	go func() {
		c.err = cmd.Wait()
		c.ended = time.Now()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			cmd.Process.Kill() // our own child, by pid
			<-c.done
		}
	})
	return c
}

func (c *child) grow(t *testing.T) {
	if _, err := c.stdin.Write([]byte("go\n")); err != nil {
		t.Fatalf("tell child to grow: %v", err)
	}
}
