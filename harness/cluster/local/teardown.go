package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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
// namespaces, CNI state, kubelet's device-plugins socket once no kubelet on the host uses it, and
// last, only when all the rest succeeded, the state directory (so a failed teardown can be run
// again). logf gets one "[down] step: time" line per teardown step and, unprefixed, what a user
// should know (state found under another home).
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

// OwnerStatus says whether the process that owns a local cluster (the one that brought it up and
// tears it down on exit: `cluster up`, `run`, a test) still runs.
type OwnerStatus struct {
	// Name is the cluster's name.
	Name string
	// Stale is true when the owner is gone: its pid no longer exists, or now belongs to a later
	// process (another start time). Only such a cluster may be removed without asking anyone.
	Stale bool
	// Why says what was found, for the user ("its owner, pid 4242, is running", …).
	Why string
}

// ownerVerdict is what an owner record says about its process.
type ownerVerdict int

const (
	// ownerUnknown: no usable record, or one that cannot tell the owner from a later process
	// with its pid. Treated as alive: nothing is removed on a guess.
	ownerUnknown ownerVerdict = iota
	ownerAlive
	ownerGone
)

// checkOwner reads the owner record (owner.json) in the state directory dir and says whether its
// process still runs.
func checkOwner(dir string) (ownerVerdict, string) {
	f := filepath.Join(dir, "owner.json")
	b, err := os.ReadFile(f)
	if errors.Is(err, fs.ErrNotExist) {
		return ownerUnknown, fmt.Sprintf("%s has no owner.json (still being brought up, or its owner died before writing it)", dir)
	}
	if err != nil {
		return ownerUnknown, fmt.Sprintf("cannot read its owner: %v", err)
	}
	var o owner
	if err := json.Unmarshal(b, &o); err != nil || o.Pid <= 0 {
		return ownerUnknown, fmt.Sprintf("%s names no owner process", f)
	}
	switch now := processStartTime(o.Pid); {
	case now == "":
		return ownerGone, fmt.Sprintf("its owner, pid %d, is gone", o.Pid)
	case o.StartTime == "":
		return ownerUnknown, fmt.Sprintf("pid %d runs, and %s records no start time to tell its owner from a later process with that pid", o.Pid, f)
	case now == o.StartTime:
		return ownerAlive, fmt.Sprintf("its owner, pid %d, is running", o.Pid)
	default:
		return ownerGone, fmt.Sprintf("its owner, pid %d, is gone (the pid now belongs to another process)", o.Pid)
	}
}

// CheckOwner says whether local cluster name is stale: it has an owner record, under home or under
// any other home its processes keep their state in, and every such owner is gone. A cluster
// whose owner cannot be found (only namespaces or cgroups left, an unreadable owner.json) is not
// stale: Why says so, and 'cluster down --name' removes it.
func CheckOwner(home, name string) OwnerStatus { return checkOwnerOf(home, name, homesOf(name)) }

// checkOwnerOf is CheckOwner with the homes the cluster's processes name already found.
func checkOwnerOf(home, name string, procHomes []string) OwnerStatus {
	st := OwnerStatus{Name: name}
	if err := ValidateName(name); err != nil {
		st.Why = err.Error()
		return st
	}
	if home == "" {
		home = Home()
	}
	var homes []string
	if _, err := os.Stat(layout{name: name, home: home}.dir()); err == nil {
		homes = append(homes, home)
	}
	// Down takes the cluster down under every home its processes name: each must be stale.
	for _, h := range procHomes {
		if !slices.Contains(homes, h) {
			homes = append(homes, h)
		}
	}
	if len(homes) == 0 {
		st.Why = fmt.Sprintf("no owner record (no state directory under %s, no process naming one)", home)
		return st
	}
	var whys []string
	for _, h := range homes {
		v, why := checkOwner(layout{name: name, home: h}.dir())
		if h != home {
			why = "under " + h + ": " + why
		}
		if v != ownerGone {
			st.Why = why
			return st
		}
		whys = append(whys, why)
	}
	st.Stale, st.Why = true, strings.Join(whys, "; ")
	return st
}

// Owners checks the owner of every local cluster List(home) finds, in name order.
func Owners(home string) ([]OwnerStatus, error) {
	if home == "" {
		home = Home()
	}
	// List reads the directory too but cannot say it failed: a home that cannot be read must
	// not look like one without clusters.
	if _, err := os.ReadDir(filepath.Join(home, "clusters")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list local clusters: %w", err)
	}
	procs := running() // one scan of /proc for all of them
	var out []OwnerStatus
	for _, n := range List(home) {
		out = append(out, checkOwnerOf(home, n, procs[n]))
	}
	return out, nil
}

// Stale names the local clusters on this host whose owner process is gone (see CheckOwner): what
// `meshchaos cluster down --stale` removes.
func Stale(home string) ([]string, error) {
	all, err := Owners(home)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range all {
		if o.Stale {
			out = append(out, o.Name)
		}
	}
	return out, nil
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

// teardown works from the layout alone so it also cleans up after a crash.
func teardown(ctx context.Context, l layout, logf func(string, ...any)) error {
	return runTeardown(l, teardownSteps(ctx, l, logf), logf)
}

// step is one teardown step: what it does (for the log and errors), and the doing.
type step struct {
	what string
	run  func() error
}

// teardownSteps lists the steps that remove cluster l from the host. Order matters: first what
// recreates things (controllers, kubelets), then containers, then containerd and its shims, then
// the API, then mounts, cgroups and namespaces. The state directory is not a step: runTeardown
// removes it last.
func teardownSteps(ctx context.Context, l layout, logf func(string, ...any)) []step {
	// Read before anything goes: the CNI cache of the pods is keyed by their sandbox ids.
	sandboxes := sandboxIDs(l)
	return []step{
		// 1. Components with pid files, except the API and the runtimes.
		{"stop kubelets and controllers", func() error {
			_, err := killRecordedMatching(l, func(n string) bool {
				return strings.HasSuffix(n, "kubelet") || strings.HasSuffix(n, "kube-proxy") ||
					n == "kube-controller-manager" || n == "kube-scheduler"
			})
			return err
		}},
		// 2. Every container: all processes in the cluster's cgroup tree.
		{"kill containers", func() error {
			if g, err := cgroup.Open(l.cgroupRoot()); err == nil && g.Exists() {
				return proc.KillPids(g.Procs(), 2*time.Second)
			}
			return nil
		}},
		// 3. containerd, its shims, and anything else whose command line names the state dir.
		{"stop containerd", func() error {
			_, err := killRecordedMatching(l, func(n string) bool { return strings.HasSuffix(n, "containerd") })
			return err
		}},
		{"stop shims", func() error { return proc.KillPids(shims(l), 5*time.Second) }},
		// 4. The API. Its data is disposable: no need to wait for a graceful shutdown.
		{"stop kube-apiserver and etcd", func() error {
			_, err := proc.KillRecorded(l.cpDir(), l.marker(), time.Second)
			return err
		}},
		{"stop remaining components", func() error {
			_, err := proc.KillRecorded(l.logDir(), l.marker(), 10*time.Second)
			return err
		}},
		{"stop strays", func() error { return proc.KillPids(proc.FindByMarker(l.marker()), 2*time.Second) }},
		// 5. What every kubelet on the host shares: their kubelets are gone, maybe all of them.
		{"release kubelet device-plugins socket", func() error {
			running, err := releaseDevicePluginDirLocked(listKubelets)
			if len(running) > 0 {
				logf("[down] kept %s: kubelet pid(s) %v still use it", filepath.Join(devicePluginDir, kubeletSocketName), running)
			}
			return err
		}},
		// 6. Mounts under the state dir: container rootfs, pod volumes, pod network namespaces.
		{"unmount", func() error { return unmountUnder(l.dir()) }},
		// 7. cgroups.
		{"remove cgroups", func() error {
			var err error
			if g, gerr := cgroup.Open(l.cgroupRoot()); gerr == nil && g.Exists() {
				err = g.Remove(10 * time.Second)
			}
			removeEmptyParentCgroup()
			return err
		}},
		// 8. Network namespaces (their veths and bridges go with them), then CNI's cache.
		{"delete network namespaces", func() error { return deleteNetns(ctx, l) }},
		{"remove CNI cache", func() error { return removeCNICache(l, sandboxes) }},
	}
}

// runTeardown runs every step, even after one failed, so one failure leaves as little as
// possible. The state directory goes last and only when every step succeeded and nothing of the
// cluster is left: it holds the pid files and owner record through which a later 'cluster down'
// finds (--all, --stale) and finishes (--name) the cluster, and a mount left under it would
// take RemoveAll into whatever is mounted there.
func runTeardown(l layout, steps []step, logf func(string, ...any)) error {
	var errs []error
	last := time.Now()
	for _, s := range steps {
		err := s.run()
		logf("[down] %s: %s", s.what, time.Since(last).Round(time.Millisecond))
		last = time.Now()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.what, err))
		}
	}
	if len(errs) == 0 {
		if left := leftovers(l, false); len(left) > 0 {
			errs = append(errs, fmt.Errorf("still present after teardown: %s", strings.Join(left, "; ")))
		}
	}
	if len(errs) > 0 {
		if _, err := os.Stat(l.dir()); err == nil {
			errs = append(errs, fmt.Errorf("teardown incomplete: the state directory %s is kept so the cluster can still be found; remove the cluster again with '%s'", l.dir(), downCommand(l)))
		}
		return errors.Join(errs...)
	}
	err := os.RemoveAll(l.dir())
	logf("[down] remove state: %s", time.Since(last).Round(time.Millisecond))
	if err != nil {
		return fmt.Errorf("remove state directory: %w; remove the cluster again with '%s'", err, downCommand(l))
	}
	return nil
}

// downCommand is the command that takes cluster l down again. A cluster whose state is under
// another home is found from the default one only while its processes live: name the home.
func downCommand(l layout) string {
	cmd := "meshchaos cluster down --name " + l.name
	if l.home != Home() {
		cmd = "MESHCHAOS_HOME=" + l.home + " " + cmd
	}
	return cmd
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
	return leftovers(layout{name: name, home: home}, true)
}

// leftovers is Leftovers, with the state directory only when withState: teardown checks the
// rest before it removes that.
func leftovers(l layout, withState bool) []string {
	name := l.name
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
	if _, err := os.Stat(l.dir()); err == nil && withState {
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
