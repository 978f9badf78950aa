package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster/internal/proc"
)

// Down removes everything cluster name left on this host, whether it stopped cleanly, crashed,
// or is still running in another process: processes, containers, mounts, cgroups, network
// namespaces, CNI state and the state directory. logf gets one "[down] step: time" line per
// teardown step and, unprefixed, what a user should know (state found under another home).
func Down(ctx context.Context, home, name string, logf func(string, ...any)) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if home == "" {
		home = Home()
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	l := layout{name: name, home: home}
	var errs []error
	found := false
	// A cluster started under another MESHCHAOS_HOME (a test's temp dir, another user's shell)
	// has its pid files and state there: tear it down from there, or its kubelets survive and
	// restart the containers the cgroup sweep killed.
	for _, other := range homesOf(name) {
		if other == home {
			continue
		}
		logf("%s: its processes keep their state under %s (another MESHCHAOS_HOME); taking it down from there", name, other)
		found = true
		errs = append(errs, teardown(ctx, layout{name: name, home: other}, logf))
	}
	if l.exists() {
		errs = append(errs, teardown(ctx, l, logf))
	} else if !found {
		return fmt.Errorf("no cluster named %q on this host (state in %s)", name, filepath.Join(home, "clusters"))
	}
	return errors.Join(errs...)
}

// processMarker is in the command line of every process of cluster name, whatever home it was
// started under: names are unique on a host, like the network namespaces and cgroups named after
// them.
func processMarker(name string) string { return "/clusters/" + name + "/" }

// running maps the name of every local cluster with a living process to the homes its processes
// name. A home counts only when its state directory is a cluster's (it has owner.json), so an
// unrelated process that happens to mention a "/clusters/" path is never taken for one.
func running() map[string][]string {
	const sep = "/clusters/"
	out := map[string][]string{}
	for _, pid := range proc.FindByMarker(sep) {
		for _, arg := range proc.Args(pid) {
			// "--kubeconfig=HOME/clusters/NAME/kubeconfig": HOME is what precedes a separator,
			// from the last "=", ":", "," or space on.
			parts := strings.Split(arg, sep)
			for i := 1; i < len(parts); i++ {
				name, _, ok := strings.Cut(parts[i], "/")
				home := strings.Join(parts[:i], sep)
				home = home[strings.LastIndexAny(home, "=:, ")+1:]
				if !ok || ValidateName(name) != nil || !filepath.IsAbs(home) || slices.Contains(out[name], home) {
					continue
				}
				if _, err := os.Stat(filepath.Join(home, "clusters", name, "owner.json")); err == nil {
					out[name] = append(out[name], home)
				}
			}
		}
	}
	return out
}

// homesOf lists the homes that living processes of cluster name keep their state under.
func homesOf(name string) []string { return running()[name] }

// List returns the names of clusters that left anything on this host.
func List(home string) []string {
	if home == "" {
		home = Home()
	}
	seen := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(home, "clusters"))
	for _, e := range ents {
		if e.IsDir() && ValidateName(e.Name()) == nil {
			seen[e.Name()] = true
		}
	}
	// A cluster started under another home is found by its processes.
	for n := range running() {
		seen[n] = true
	}
	cg, _ := os.ReadDir("/sys/fs/cgroup/cpu/meshchaos")
	for _, e := range cg {
		if e.IsDir() && ValidateName(e.Name()) == nil {
			seen[e.Name()] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (l layout) exists() bool {
	if _, err := os.Stat(l.dir()); err == nil {
		return true
	}
	if len(clusterNetns(l)) > 0 {
		return true
	}
	g, err := cgroup.Open(l.cgroupRoot())
	return err == nil && g.Exists()
}

// teardown works from the layout alone so it also cleans up after a crash. Order matters:
// first what recreates things (controllers, kubelets), then containers, then containerd and
// its shims, then the API, then mounts, cgroups, namespaces and files.
func teardown(ctx context.Context, l layout, logf func(string, ...any)) error {
	var errs []error
	last := time.Now()
	add := func(what string, err error) {
		logf("[down] %s: %s", what, time.Since(last).Round(time.Millisecond))
		last = time.Now()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	sandboxes := sandboxIDs(l)
	// 1. Components with pid files, except the API and the runtimes.
	_, err := killRecordedMatching(l, func(n string) bool {
		return strings.HasSuffix(n, "kubelet") || strings.HasSuffix(n, "kube-proxy") ||
			n == "kube-controller-manager" || n == "kube-scheduler"
	})
	add("stop kubelets and controllers", err)
	// 2. Every container: all processes in the cluster's cgroup tree.
	if g, err := cgroup.Open(l.cgroupRoot()); err == nil && g.Exists() {
		add("kill containers", proc.KillPids(g.Procs(), 2*time.Second))
	}
	// 3. containerd, its shims, and anything else whose command line names the state dir.
	_, err = killRecordedMatching(l, func(n string) bool { return strings.HasSuffix(n, "containerd") })
	add("stop containerd", err)
	add("stop shims", proc.KillPids(shims(l), 5*time.Second))
	// 4. The API. Its data is disposable: no need to wait for a graceful shutdown.
	_, err = proc.KillRecorded(l.cpDir(), l.marker(), time.Second)
	add("stop kube-apiserver and etcd", err)
	_, err = proc.KillRecorded(l.logDir(), l.marker(), 10*time.Second)
	add("stop remaining components", err)
	add("stop strays", proc.KillPids(proc.FindByMarker(l.marker()), 2*time.Second))
	// 5. Mounts under the state dir: container rootfs, pod volumes, pod network namespaces.
	add("unmount", unmountUnder(l.dir()))
	// 6. cgroups.
	if g, err := cgroup.Open(l.cgroupRoot()); err == nil && g.Exists() {
		add("remove cgroups", g.Remove(10*time.Second))
	}
	removeEmptyParentCgroup()
	// 7. Network namespaces (their veths and bridges go with them), then CNI's cache.
	add("delete network namespaces", deleteNetns(ctx, l))
	add("remove CNI cache", removeCNICache(l, sandboxes))
	// 8. Files.
	add("remove state", os.RemoveAll(l.dir()))
	if len(errs) == 0 {
		if left := Leftovers(l.home, l.name); len(left) > 0 {
			errs = append(errs, fmt.Errorf("still present after teardown: %s", strings.Join(left, "; ")))
		}
	}
	return errors.Join(errs...)
}

// removeCNICache deletes the CNI result cache entries (/var/lib/cni/results) of the cluster's
// pods: those of its bridge networks (named after the nodes) and containerd's loopback entries,
// which are keyed by pod sandbox id.
func removeCNICache(l layout, sandboxes map[string]bool) error {
	files, _ := filepath.Glob(filepath.Join(cniResultsDir, "*"))
	var errs []error
	for _, f := range files {
		base := filepath.Base(f)
		mine := strings.HasPrefix(base, l.hubNetns()+"-n")
		if parts := strings.Split(base, "-"); !mine && len(parts) >= 3 {
			mine = sandboxes[parts[len(parts)-2]]
		}
		if mine {
			if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// sandboxIDs lists the pod sandbox ids containerd recorded for the cluster's nodes.
func sandboxIDs(l layout) map[string]bool {
	ids := map[string]bool{}
	for _, pat := range []string{"n*/ctr-root/io.containerd.grpc.v1.cri/sandboxes/*", "n*/ctr-state/io.containerd.grpc.v1.cri/sandboxes/*"} {
		m, _ := filepath.Glob(filepath.Join(l.dir(), pat))
		for _, p := range m {
			ids[filepath.Base(p)] = true
		}
	}
	return ids
}

// shims lists the containerd shims of the cluster's nodes (their command line names the node's
// containerd socket, under the state dir).
func shims(l layout) []int {
	var out []int
	for _, pid := range proc.FindByMarker(l.marker()) {
		if proc.Mentions(pid, "containerd-shim") {
			out = append(out, pid)
		}
	}
	return out
}

func killRecordedMatching(l layout, match func(name string) bool) ([]int, error) {
	files, _ := filepath.Glob(filepath.Join(l.logDir(), "*.pid"))
	tmp, err := os.MkdirTemp("", "meshchaos-kill-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".pid")
		if match(name) {
			if err := os.Rename(f, filepath.Join(tmp, filepath.Base(f))); err != nil {
				return nil, err
			}
		}
	}
	return proc.KillRecorded(tmp, l.marker(), 5*time.Second)
}

// unmountUnder detaches every mount point below dir, deepest first.
func unmountUnder(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	prefix := strings.TrimSuffix(dir, "/") + "/"
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if strings.HasPrefix(mp, prefix) {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, …).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeEmptyParentCgroup removes /meshchaos when no cluster is left under it.
func removeEmptyParentCgroup() {
	hs, _ := cgroup.Hierarchies()
	for _, h := range hs {
		_ = unix.Rmdir(filepath.Join(h.Dir, "meshchaos"))
	}
}

// Leftovers lists anything cluster name still has on the host: processes, network namespaces
// (with them their veths, bridges, routes and iptables rules, which live nowhere else), mounts
// (pod namespaces, rootfs, volumes), cgroups, CNI state, the state directory, and iptables
// rules in the host's own namespace that name the cluster (the cluster never adds any: one
// would be a leak out of its namespaces). Empty means clean; tests assert it after teardown.
func Leftovers(home, name string) []string {
	if home == "" {
		home = Home()
	}
	l := layout{name: name, home: home}
	var out []string
	// By name, not by home: a process of the cluster under another home is a leftover too.
	if pids := proc.FindByMarker(processMarker(name)); len(pids) > 0 {
		out = append(out, fmt.Sprintf("processes %v", pids))
	}
	if ns := clusterNetns(l); len(ns) > 0 {
		out = append(out, fmt.Sprintf("network namespaces %v", ns))
	}
	if m, _ := mountsUnder(l.dir()); len(m) > 0 {
		out = append(out, fmt.Sprintf("%d mounts under %s", len(m), l.dir()))
	}
	if g, err := cgroup.Open(l.cgroupRoot()); err == nil && g.Exists() {
		out = append(out, "cgroup "+l.cgroupRoot())
	}
	if _, err := os.Stat(l.dir()); err == nil {
		out = append(out, "state directory "+l.dir())
	}
	if m, _ := filepath.Glob(filepath.Join(cniResultsDir, l.hubNetns()+"-n*")); len(m) > 0 {
		out = append(out, fmt.Sprintf("CNI results %v", m))
	}
	if rules := hostRulesNaming(l.hubNetns() + "-n"); len(rules) > 0 {
		out = append(out, fmt.Sprintf("host iptables rules naming the cluster %q", rules))
	}
	return out
}

// cniResultsDir is where the CNI library caches results (keyed by network name).
const cniResultsDir = "/var/lib/cni/results"

// hostRulesNaming returns the host namespace's iptables rules that mention s (read only, with
// iptables-save; none when iptables is not installed).
func hostRulesNaming(s string) []string {
	b, err := exec.Command("iptables-save").Output()
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// loadArchive imports an image tarball into the containerd of every node of the cluster.
func loadArchive(ctx context.Context, l layout, path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("load image: %w", err)
	}
	socks, _ := filepath.Glob(filepath.Join(l.dir(), "n*", "containerd.sock"))
	if len(socks) == 0 {
		return fmt.Errorf("cluster %q has no running node (no containerd socket under %s)", l.name, l.dir())
	}
	sort.Strings(socks)
	for _, s := range socks {
		var k int
		if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(s)), "n%d", &k); err != nil {
			continue
		}
		n := &node{k: k, l: l}
		if err := n.importImage(ctx, path); err != nil {
			return fmt.Errorf("node %d: %w", k, err)
		}
	}
	return nil
}

// LoadArchive imports an image tarball into every node of a running cluster by name (for
// `meshchaos cluster load`, from another process than the one that brought the cluster up).
func LoadArchive(ctx context.Context, home, name, path string) error {
	if home == "" {
		home = Home()
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	return loadArchive(ctx, layout{name: name, home: home}, path)
}

// NodeNetnsPath returns the network namespace path of node k (0: the control-plane hub) of the
// named cluster, checking that it exists.
func NodeNetnsPath(name string, k int) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	l := layout{name: name}
	p := l.hubNetnsPath()
	if k > 0 {
		p = l.nodeNetnsPath(k)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("cluster %q has no node %d (no namespace %s)", name, k, p)
	}
	return p, nil
}
