// Package proc starts and stops the long-running component processes of a local cluster
// (etcd, kube-apiserver, kubelet, containerd, …), optionally inside a network namespace, with
// their output in a log file and their pid on disk so a later `cluster down` can end them after
// a crash.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Spec describes a process to start.
type Spec struct {
	// Name identifies the process in logs and pid files, e.g. "kube-apiserver" or "node1-kubelet".
	Name string
	// Path and Args: the executable and its arguments (without argv[0]).
	Path string
	Args []string
	// Netns, when set, is a network namespace path (/var/run/netns/X); the process runs inside it.
	// nsenter is used rather than `ip netns exec`, which remounts /sys and hides the cgroup mounts.
	Netns string
	// Dir is where the log (<Name>.log) and pid file (<Name>.pid) go.
	Dir string
	// Env is added to the environment of meshchaos itself.
	Env []string
}

// Process is a started component.
type Process struct {
	Spec Spec
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

// Start starts the process. It runs in its own process group so a terminal's Ctrl-C reaches
// meshchaos only, which then tears components down in order.
func Start(s Spec) (*Process, error) {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	logf, err := os.OpenFile(LogPath(s.Dir, s.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log: %w", s.Name, err)
	}
	path, args := s.Path, s.Args
	if s.Netns != "" {
		path = "nsenter"
		args = append([]string{"--net=" + s.Netns, "--", s.Path}, s.Args...)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	p := &Process{Spec: s, cmd: cmd, done: make(chan struct{}), log: logf}
	if err := os.WriteFile(PidPath(s.Dir, s.Name), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		_ = p.Stop(time.Second)
		return nil, fmt.Errorf("start %s: write pid file: %w", s.Name, err)
	}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id (nsenter execs the component, so it is the component's own pid).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and its wait error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group and SIGKILL after grace; it returns once the process
// is gone. Some components (kube-apiserver) can take long on SIGTERM, hence the bound.
func (p *Process) Stop(grace time.Duration) error {
	if ok, _ := p.Exited(); ok {
		os.Remove(PidPath(p.Spec.Dir, p.Spec.Name))
		return nil
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("stop %s (pid %d): still running after SIGKILL", p.Spec.Name, p.Pid())
		}
	}
	os.Remove(PidPath(p.Spec.Dir, p.Spec.Name))
	return nil
}

// Tail returns the last n lines of the process's log, for error messages.
func (p *Process) Tail(n int) string { return TailFile(LogPath(p.Spec.Dir, p.Spec.Name), n) }

// ExitError returns an error describing an early exit, with the end of the log.
func (p *Process) ExitError() error {
	ok, err := p.Exited()
	if !ok {
		return nil
	}
	return fmt.Errorf("%s exited (%v); last log lines:\n%s", p.Spec.Name, err, p.Tail(15))
}

// LogPath is where a process's output goes.
func LogPath(dir, name string) string { return filepath.Join(dir, name+".log") }

// PidPath is where a process's pid is recorded.
func PidPath(dir, name string) string { return filepath.Join(dir, name+".pid") }

// TailFile returns the last n lines of a file ("" if unreadable).
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// KillRecorded ends every process whose pid file is in dir and whose command line mentions
// marker (the cluster's state directory), so a recycled pid is never hit. It is the crash-safe
// half of teardown: pid files survive a killed meshchaos.
func KillRecorded(dir, marker string, grace time.Duration) ([]int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.pid"))
	if err != nil {
		return nil, err
	}
	var killed []int
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			os.Remove(f)
			continue
		}
		if !Mentions(pid, marker) {
			os.Remove(f)
			continue
		}
		killed = append(killed, pid)
		os.Remove(f)
	}
	if err := KillPids(killed, grace); err != nil {
		errs = append(errs, err)
	}
	return killed, errors.Join(errs...)
}

// Mentions reports whether the command line of pid contains marker.
func Mentions(pid int, marker string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte(marker))
}

// Args returns the command line of pid, one element per argument (nil when pid is gone).
func Args(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// FindByMarker lists pids whose command line contains marker: the sweep for processes that have
// no pid file (for example containerd shims, which containerd starts itself).
func FindByMarker(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if Mentions(pid, marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillPids ends the given processes: SIGTERM to all, SIGKILL to those still alive after grace.
// They are signalled together so one slow process does not hold up the rest.
func KillPids(pids []int, grace time.Duration) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var alive []int
	for _, pid := range pids {
		if !waitGone(ctx, pid) {
			alive = append(alive, pid)
		}
	}
	var errs []error
	for _, pid := range alive {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	for _, pid := range alive {
		if !waitGone(ctx2, pid) {
			errs = append(errs, fmt.Errorf("pid %d still running after SIGKILL", pid))
		}
	}
	return errors.Join(errs...)
}

// waitGone polls until pid no longer exists (or is a zombie nobody reaps, which is as good).
func waitGone(ctx context.Context, pid int) bool {
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		// Field 3 of /proc/PID/stat is the state; Z means exited but not reaped.
		if i := bytes.LastIndexByte(b, ')'); i > 0 && len(b) > i+2 && b[i+2] == 'Z' {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}
