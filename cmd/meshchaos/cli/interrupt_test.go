package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
)

// smallRun is a cp-oom-restart small enough to bring up many times: one node, a few
// ServiceEntries, a short traffic window. It goes through every phase (setup, steady, chaos with
// a kernel OOM kill, recovery, teardown).
var smallRun = []string{"run", "cp-oom-restart", "--set", "nodes=1", "--set", "serviceEntries=20", "--set", "hosts=2",
	"--set", "gateways=1", "--set", "duration=40s", "--set", "steady=8s", "--set", "throttleWindow=8s", "--set", "cpMemoryLimit=192Mi"}

// interruptPoint is a moment of a run, recognised by a line of its progress output, at which a
// signal is sent (after a random delay of up to defaultMaxDelay, teardownMaxDelay in teardown).
type interruptPoint struct {
	// marker is a substring of a progress line; phase is the run's phase when it is printed.
	marker, phase string
	sig           syscall.Signal
}

// defaultMaxDelay spreads the signals over the few seconds after a marker; teardownMaxDelay
// keeps the signal inside the teardown, which takes about 1.5 s for one node (a 3 s delay let
// the run finish first).
const (
	defaultMaxDelay  = 3 * time.Second
	teardownMaxDelay = 300 * time.Millisecond
)

// runMarkers are progress lines of smallRun in the order they come, with their phase: every
// phase, and within the setup every step of the cluster's and the mesh's bring-up.
var runMarkers = []struct{ marker, phase string }{
	{"cluster ", "setup"}, // "cluster NAME: 1 node(s) on the local substrate"
	{"network: hub", "setup"},
	{"control plane: etcd", "setup"},
	{"nodes: containerd", "setup"},
	{"waiting for 1 node(s) Ready", "setup"},
	{"cluster DNS", "setup"},
	{"cluster.up", "setup"},
	{"gateway.ready", "setup"},
	{"phase steady", "steady"},
	{"traffic.start", "steady"},
	{"phase chaos", "chaos"},
	{"chaos.injected", "chaos"},
	{"cp.oomkilled", "chaos"},
	{"phase recovery", "recovery"},
	{"phase teardown", "teardown"},
}

// interruptPoints: MESHCHAOS_INTERRUPT=full gives every marker with every signal in turn,
// twice over with different signals (30 points: `make interrupt`); otherwise four points, one
// per phase group and each signal (SIGINT, SIGTERM, SIGHUP, SIGKILL) once.
func interruptPoints() []interruptPoint {
	sigs := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGKILL}
	if os.Getenv("MESHCHAOS_INTERRUPT") == "full" {
		var out []interruptPoint
		for round := range 2 {
			for i, m := range runMarkers {
				out = append(out, interruptPoint{m.marker, m.phase, sigs[(i+round)%len(sigs)]})
			}
		}
		return out
	}
	return []interruptPoint{
		{"nodes: containerd", "setup", syscall.SIGINT},
		{"traffic.start", "steady", syscall.SIGTERM},
		{"chaos.injected", "chaos", syscall.SIGKILL},
		{"phase recovery", "recovery", syscall.SIGHUP},
	}
}

// TestInterruptAnywhere starts real runs and stops each with a signal at a chosen moment: after
// SIGINT or SIGTERM the run tears its cluster down by itself and leaves a valid summary (verdict
// error, the signal and the phase it came in, what was measured until then); SIGHUP the same;
// after SIGKILL `cluster down --stale --prefix` (only this test's clusters) finds the run's
// cluster by its dead owner, and after any signal nothing is left on the host.
func TestInterruptAnywhere(t *testing.T) {
	bin, home, env := integrationCLI(t)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("delays seeded with %d", seed)
	prefix := fmt.Sprintf("rlbi%d-", os.Getpid()%10000)
	for i, p := range interruptPoints() {
		maxDelay := defaultMaxDelay
		if p.phase == "teardown" {
			maxDelay = teardownMaxDelay
		}
		delay := time.Duration(rng.Int64N(int64(maxDelay)))
		t.Run(fmt.Sprintf("%02d-%s-%s", i, strings.ReplaceAll(p.marker, " ", "_"), p.sig), func(t *testing.T) {
			name := fmt.Sprintf("%s%d", prefix, i)
			out := filepath.Join(t.TempDir(), "run")
			r := startRun(t, bin, env, append(slices.Clone(smallRun), "--name", name, "--out", out))
			r.signalAt(p.marker, delay, p.sig)
			code := r.wait()
			require.True(t, r.sent(), "the run ended (exit %d) before %q: %s", code, p.marker, r.tail())
			t.Logf("%s %s after %q: exit %d", p.sig, delay.Round(time.Millisecond), p.marker, code)

			s, err := results.Read(out)
			require.NoError(t, err, "the run directory holds a valid summary.json")
			assert.Equal(t, results.VerdictError, s.Verdict)
			reached := phaseNames(s)
			assert.Contains(t, reached, "setup", "the phases reached")
			if p.sig == syscall.SIGKILL {
				assert.Equal(t, -1, code, "killed")
				assert.Nil(t, s.FinishedAt, "a killed run never finished")
			} else {
				assert.Equal(t, 2, code, r.tail())
				require.NotNil(t, s.Interrupted, r.tail())
				assert.Equal(t, p.sig.String(), s.Interrupted.Signal)
				assert.Contains(t, s.Error, "interrupted by "+p.sig.String())
				// The delay may carry the signal into a later phase, never an earlier one.
				assert.GreaterOrEqual(t, slices.Index(phaseOrder, s.Interrupted.Phase), slices.Index(phaseOrder, p.phase), "interrupted in %s", s.Interrupted.Phase)
				assert.Equal(t, "teardown", reached[len(reached)-1], "the teardown ran")
				if slices.Index(phaseOrder, s.Interrupted.Phase) >= slices.Index(phaseOrder, "steady") {
					assert.NotNil(t, s.Traffic, "the traffic measured until the signal is kept")
					assert.NotEmpty(t, s.Measurements, "the measurements' health is kept")
				}
				// The run cleaned up after itself: nothing is left before `cluster down`.
				assert.Empty(t, local.Leftovers(home, name), "left by the interrupted run itself")
			}
			// What a killed run left is stale (its owner is gone): --stale finds it; after the
			// other signals there is nothing left to find.
			code, downOut := cli(t, bin, env, "cluster", "down", "--stale", "--prefix", prefix)
			assert.Equal(t, 0, code, downOut)
			if p.sig == syscall.SIGKILL {
				assert.Contains(t, downOut, "removed "+name, "the killed run's cluster is stale")
			}
			assert.Empty(t, local.Leftovers(home, name), "after cluster down --stale --prefix %s", prefix)
		})
	}
}

// phaseOrder is the lifecycle's order of phases.
var phaseOrder = []string{"setup", "steady", "chaos", "recovery", "teardown"}

func phaseNames(s *results.Summary) []string {
	var out []string
	for _, p := range s.Phases {
		out = append(out, p.Name)
	}
	return out
}

// integrationCLI skips without integration, builds the CLI and gives it a home of its own.
func integrationCLI(t *testing.T) (bin, home string, env []string) {
	t.Helper()
	prereq.Integration(t)
	require.NoError(t, local.Preflight())
	bin = buildCLI(t)
	home, err := os.MkdirTemp("", "mc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	return bin, home, append(os.Environ(), "MESHCHAOS_HOME="+home, "CI=true")
}

// cli runs the CLI to completion and returns its exit code and output.
func cli(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, bin, args...)
	c.Env = env
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err)
	return 0, string(out)
}

// runProc is a `meshchaos run` subprocess whose progress lines are watched.
type runProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	subs []lineWatch
	done chan struct{}
}

type lineWatch struct {
	substr string
	fn     func()
}

func startRun(t *testing.T, bin string, env, args []string) *runProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	t.Cleanup(cancel)
	r := &runProc{t: t, cmd: exec.CommandContext(ctx, bin, args...), done: make(chan struct{})}
	r.cmd.Env = env
	r.cmd.Stdout = lockedWriter{r}
	stderr, err := r.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, r.cmd.Start())
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.out.WriteString(line + "\n")
			subs := r.subs
			r.subs = nil
			for _, s := range subs {
				if strings.Contains(line, s.substr) {
					go s.fn()
				} else {
					r.subs = append(r.subs, s)
				}
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// lockedWriter appends the process's stdout to the output under the lock the stderr reader
// takes.
type lockedWriter struct{ r *runProc }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.out.Write(p)
}

// on calls fn once, when a progress line containing substr appears.
func (r *runProc) on(substr string, fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs = append(r.subs, lineWatch{substr, fn})
}

// signalAt sends sig delay after the first line containing marker (sent says whether it did).
func (r *runProc) signalAt(marker string, delay time.Duration, sig syscall.Signal) {
	r.on(marker, func() {
		time.Sleep(delay)
		if r.cmd.Process.Signal(sig) == nil {
			r.mu.Lock()
			r.out.WriteString(fmt.Sprintf("--- test: sent %s\n", sig))
			r.mu.Unlock()
		}
	})
}

// wait waits for the process and returns its exit code (-1: killed by a signal).
func (r *runProc) wait() int {
	<-r.done
	err := r.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(r.t, err)
	return 0
}

// sent says whether the test's signal reached the process.
func (r *runProc) sent() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Contains(r.out.String(), "--- test: sent")
}

// tail is the end of the output, for failure messages.
func (r *runProc) tail() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.out.String()
	return s[max(0, len(s)-3000):]
}
