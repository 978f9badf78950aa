// Package agent is the node side of the existing substrate: `meshchaos agent` runs in one pod per
// node the run uses (a DaemonSet in the run's own namespace). It listens on no port: the harness
// reaches it only through the API server's pod exec, as `meshchaos agent dial|serve|exec`.
//
// Without node access allowed the pod is unprivileged and only dials (pod IPs and ClusterIPs, from
// its node). With it the pod is privileged with the node's PID and network namespaces, so it can
// find the node's cgroups (kube-proxy by its process, kubelet's pods by its own cgroup, a pod by
// its UID), read and write their files, and run node commands (iptables-save) in the node's root.
package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/meshchaos/meshchaos/harness/cgroup"
)

// HostRoot is where the node's root file system is mounted in the agent's pod (a hostPath
// volume, mounts below it included): cgroup hierarchies and node tools are found there. (Going
// through /proc/1/root instead was refused with EACCES on cgroup files on a cgroup v1 node.)
const HostRoot = "/host"

// Request is one line the harness writes to `meshchaos agent serve`.
type Request struct {
	// Op is read, write (a cgroup file), mounts (the node's cgroup hierarchies), kube-proxy,
	// pods (kubelet's pods cgroup) or pod (a pod's cgroup, by UID): those three answer a
	// cgroup path; or exec (Argv run as Exec runs it, its stdout answered as Data).
	Op   string   `json:"op"`
	Path string   `json:"path,omitempty"`
	Data []byte   `json:"data,omitempty"`
	UID  string   `json:"uid,omitempty"`
	Argv []string `json:"argv,omitempty"`
}

// Response answers a Request; Err is set when it failed.
type Response struct {
	Data        []byte             `json:"data,omitempty"`
	Path        string             `json:"path,omitempty"`
	Hierarchies []cgroup.Hierarchy `json:"hierarchies,omitempty"`
	Err         string             `json:"err,omitempty"`
}

// Wait is the pod's main process: it does nothing until the pod is deleted.
func Wait(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}

// Dial connects to addr from this pod's network (the node's, when privileged) and copies stdin to
// it and it to stdout. One byte 0 on stdout says the connection is up, so the harness's dial
// fails like a dial when the address refuses.
func Dial(ctx context.Context, addr string, stdin io.Reader, stdout io.Writer) error {
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := stdout.Write([]byte{0}); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, stdin)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- err
	}()
	_, err = io.Copy(stdout, c)
	return err
}

// Exec runs argv in the node's root file system and this pod's network namespace (the node's):
// node tools such as iptables-save, whatever this image lacks.
func Exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return execIn(ctx, HostRoot, argv, stdin, stdout, stderr)
}

// execIn is Exec in the root file system at root.
func execIn(ctx context.Context, root string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(argv) == 0 {
		return errors.New("agent exec: no command")
	}
	// exec.Command would look the name up in this image (which has no node tools), before the
	// chroot: find it in the node's PATH directories instead.
	name := argv[0]
	if !strings.Contains(name, "/") {
		for _, dir := range nodePath {
			// Lstat: node tools are often absolute symlinks (/etc/alternatives), which resolve
			// only after the chroot.
			if fi, err := os.Lstat(filepath.Join(root, dir, name)); err == nil && !fi.IsDir() {
				name = filepath.Join(dir, name)
				break
			}
		}
		if !strings.Contains(name, "/") {
			return fmt.Errorf("agent exec: %s not found in the node's %s", name, strings.Join(nodePath, ":"))
		}
	}
	cmd := exec.CommandContext(ctx, name, argv[1:]...)
	// The lookup Command made in this image fails; the path is the node's, valid after chroot.
	cmd.Path, cmd.Err = name, nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + strings.Join(nodePath, ":")}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	return cmd.Run()
}

// nodePath is where node tools are looked up in the node's root.
var nodePath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Serve answers Requests, one JSON line each, until stdin ends.
func Serve(stdin io.Reader, stdout io.Writer) error {
	dec := json.NewDecoder(bufio.NewReader(stdin))
	enc := json.NewEncoder(stdout)
	n := node{root: HostRoot, proc: "/proc"}
	for {
		var req Request
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		resp := n.answer(req)
		if err := enc.Encode(resp); err != nil {
			return err
		}
	}
}

// node is what the agent reads: the node's root and /proc (fields so tests can point elsewhere).
type node struct {
	root, proc string
}

func (n node) answer(req Request) Response {
	var r Response
	var err error
	switch req.Op {
	case "mounts":
		r.Hierarchies, err = n.hierarchies()
	case "read":
		if err = n.inCgroupfs(req.Path); err == nil {
			r.Data, err = os.ReadFile(req.Path)
		}
	case "write":
		if err = n.inCgroupfs(req.Path); err == nil {
			err = os.WriteFile(req.Path, req.Data, 0o644)
		}
	case "kube-proxy":
		r.Path, err = n.kubeProxy()
	case "pods":
		r.Path, err = n.pods()
	case "pod":
		r.Path, err = n.pod(req.UID)
	case "exec":
		r.Data, err = n.exec(req.Argv)
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// execTimeout bounds a node command run for a session (the harness gives up on an answer after
// 30 s and reopens the session).
const execTimeout = 25 * time.Second

// maxExecOutput bounds a node command's stdout carried back in one answer.
const maxExecOutput = 16 << 20

// exec runs argv in the node's root as Exec does, as a child of this long-running session
// instead of one pod exec per command (the harness's NodeQuery, for polled reads). Bounded by
// execTimeout: a command that runs on (a memory hog) is not for a session, which it would hold.
func (n node) exec(argv []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	var out boundedBuffer
	var errOut strings.Builder
	out.max = maxExecOutput
	err := execIn(ctx, n.root, argv, nil, &out, &errOut)
	if err == nil && out.cut {
		err = fmt.Errorf("%s: output longer than %d bytes", argv[0], maxExecOutput)
	}
	if err != nil {
		if msg := strings.TrimSpace(errOut.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, lastLine(msg))
		}
		return nil, err
	}
	return out.b, nil
}

// boundedBuffer keeps the first max bytes written to it and notes that more came.
type boundedBuffer struct {
	b   []byte
	max int
	cut bool
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	if room := w.max - len(w.b); room < len(p) {
		w.b = append(w.b, p[:max(room, 0)]...)
		w.cut = true
		return len(p), nil
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// hierarchies are the node's cgroup hierarchies, their directories as this pod reaches them.
func (n node) hierarchies() ([]cgroup.Hierarchy, error) {
	f, err := os.Open(filepath.Join(n.proc, "1", "mounts"))
	if err != nil {
		return nil, fmt.Errorf("the node's mounts (does the agent have the node's PID namespace?): %w", err)
	}
	defer f.Close()
	hs, err := cgroup.ParseMounts(f)
	if err != nil {
		return nil, err
	}
	for i := range hs {
		hs[i].Dir = filepath.Join(n.root, hs[i].Dir)
	}
	if len(hs) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted on the node")
	}
	return hs, nil
}

// inCgroupfs refuses any file outside the node's cgroup hierarchies: the agent reads and writes
// cgroups, nothing else of the node.
func (n node) inCgroupfs(p string) error {
	hs, err := n.hierarchies()
	if err != nil {
		return err
	}
	clean := filepath.Clean(p)
	for _, h := range hs {
		if strings.HasPrefix(clean, h.Dir+"/") {
			return nil
		}
	}
	return fmt.Errorf("%s is not in a cgroup hierarchy of the node", p)
}

// cgroupOf is the cgroup path of pid in the cpu hierarchy (v1) or the unified one (v2).
func (n node) cgroupOf(pid string) (string, error) {
	b, err := os.ReadFile(filepath.Join(n.proc, pid, "cgroup"))
	if err != nil {
		return "", err
	}
	var v2 string
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				return parts[2], nil
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
	}
	if v2 == "" {
		return "", fmt.Errorf("pid %s: no cpu cgroup in /proc/%s/cgroup", pid, pid)
	}
	return v2, nil
}

// kubeProxy finds the node's kube-proxy: the kube-proxy process in this pod's network namespace
// (kube-proxy runs in its node's), whichever way it was started (static pod, DaemonSet, unit).
func (n node) kubeProxy() (string, error) {
	self, err := os.Readlink(filepath.Join(n.proc, "self", "ns", "net"))
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(n.proc)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(n.proc, pid, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "kube-proxy" {
			continue
		}
		if ns, err := os.Readlink(filepath.Join(n.proc, pid, "ns", "net")); err != nil || ns != self {
			continue
		}
		return n.cgroupOf(pid)
	}
	return "", errors.New("no kube-proxy process in this node's network namespace (is kube-proxy running in iptables/ipvs mode on the node?)")
}

// pods is kubelet's cgroup for every pod on the node: the agent's own cgroup up to its
// kubepods element (kubepods with cgroupfs, kubepods.slice with systemd).
func (n node) pods() (string, error) {
	own, err := n.cgroupOf("self")
	if err != nil {
		return "", err
	}
	parts := strings.Split(own, "/")
	for i, p := range parts {
		if p == "kubepods" || strings.HasPrefix(p, "kubepods.") {
			return strings.Join(parts[:i+1], "/"), nil
		}
	}
	return "", fmt.Errorf("the agent's cgroup %s has no kubepods element", own)
}

// pod is the cgroup of the pod with uid: pod<uid> (cgroupfs) or …pod<uid with _>.slice (systemd)
// at most two levels below kubepods (the QoS class's group).
func (n node) pod(uid string) (string, error) {
	if uid == "" {
		return "", errors.New("pod: no UID")
	}
	pods, err := n.pods()
	if err != nil {
		return "", err
	}
	hs, err := n.hierarchies()
	if err != nil {
		return "", err
	}
	var base string
	for _, h := range hs {
		if h.V2 || hasController(h.Controllers, "cpu") {
			base = h.Dir
			if !h.V2 {
				break
			}
		}
	}
	want := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"}
	var found string
	root := filepath.Join(base, pods)
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			return nil
		}
		depth := strings.Count(strings.TrimPrefix(p, root), "/")
		for _, w := range want {
			if d.Name() == w || strings.HasSuffix(d.Name(), "-"+w) {
				found = strings.TrimPrefix(p, base)
				return filepath.SkipAll
			}
		}
		if depth >= 2 {
			return filepath.SkipDir
		}
		return nil
	})
	if found == "" {
		return "", fmt.Errorf("no cgroup for pod %s under %s", uid, root)
	}
	return found, nil
}

func hasController(cs []string, c string) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}
