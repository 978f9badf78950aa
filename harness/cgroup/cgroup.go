// Package cgroup creates, fills, limits and removes cgroups on cgroup v1 (each controller its
// own hierarchy, as on these hosts) and reads them on v2. The local substrate uses it for
// kubelet's cgroup root and for the kube-proxy group whose CPU quota chaos throttles.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Hierarchy is one mounted cgroup hierarchy.
type Hierarchy struct {
	// Dir is the mount point, e.g. /sys/fs/cgroup/cpu.
	Dir string
	// Controllers the hierarchy carries, e.g. ["cpu"], or ["name=systemd"]; empty for v2.
	Controllers []string
	// V2 is the unified hierarchy.
	V2 bool
}

// Hierarchies lists the mounted cgroup hierarchies from /proc/self/mounts.
func Hierarchies() ([]Hierarchy, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMounts(f)
}

// ParseMounts reads the cgroup hierarchies from a mounts table (/proc/PID/mounts).
func ParseMounts(r io.Reader) ([]Hierarchy, error) {
	var out []Hierarchy
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		switch fields[2] {
		case "cgroup2":
			out = append(out, Hierarchy{Dir: fields[1], V2: true})
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(fields[3], ",") {
				switch o {
				case "rw", "ro", "relatime", "nosuid", "nodev", "noexec", "clone_children", "xattr":
					continue
				}
				ctrls = append(ctrls, o)
			}
			out = append(out, Hierarchy{Dir: fields[1], Controllers: ctrls})
		}
	}
	return out, sc.Err()
}

// Group is a cgroup path, the same in every hierarchy (e.g. /meshchaos/c1/n1/kube-proxy).
type Group struct {
	Path string
	hs   []Hierarchy
	// fs is nil for this host's files.
	fs FS
}

// FS reads and writes a group's files. A group on this host uses the host's files; a group on
// another machine (a node of a cluster the harness reaches only through its API server) uses an
// FS that forwards each read and write to an agent on that machine.
type FS interface {
	ReadFile(name string) ([]byte, error)
	WriteFile(name string, data []byte) error
}

// Host is this host's file system.
var Host FS = hostFS{}

type hostFS struct{}

func (hostFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }
func (hostFS) WriteFile(name string, data []byte) error {
	return os.WriteFile(name, data, 0o644)
}

// OpenOn returns the group at path on the hierarchies hs, whose files fsys reads and writes.
// Such a group limits and reads (SetCPUQuota, CPUQuota, CPUStat, CPUUsage, Exists, Dir);
// creating, filling and removing groups (Create, AddProcess, Procs, Remove) are for this host's
// groups only.
func OpenOn(fsys FS, hs []Hierarchy, path string) *Group {
	return &Group{Path: path, hs: hs, fs: fsys}
}

// Files is the file system the group's files are on.
func (g *Group) Files() FS {
	if g.fs == nil {
		return Host
	}
	return g.fs
}

// Open returns the group at path without creating it.
func Open(path string) (*Group, error) {
	hs, err := Hierarchies()
	if err != nil {
		return nil, err
	}
	if len(hs) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return &Group{Path: path, hs: hs}, nil
}

// Create makes the group in every hierarchy. On v1 cpuset, a new cgroup starts with no CPUs or
// memory nodes, so each level copies its parent's.
func Create(path string) (*Group, error) {
	g, err := Open(path)
	if err != nil {
		return nil, err
	}
	for _, h := range g.hs {
		if h.V2 && !v2HasControllers(hostFS{}, h.Dir) {
			continue // hybrid hosts: an empty unified hierarchy is not needed
		}
		if err := mkdirLevels(h, path); err != nil {
			return nil, fmt.Errorf("create cgroup %s in %s: %w", path, h.Dir, err)
		}
	}
	return g, nil
}

func v2HasControllers(fsys FS, dir string) bool {
	b, err := fsys.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	return err == nil && strings.TrimSpace(string(b)) != ""
}

func mkdirLevels(h Hierarchy, path string) error {
	cur := h.Dir
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		parent := cur
		cur = filepath.Join(cur, part)
		if err := os.Mkdir(cur, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		if has(h.Controllers, "cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, _ := os.ReadFile(filepath.Join(cur, f))
				if strings.TrimSpace(string(v)) != "" {
					continue
				}
				pv, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(cur, f), pv, 0o644); err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
			}
		}
	}
	return nil
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Dir is the group's directory in the hierarchy carrying controller (the unified one if none
// does), "" when no hierarchy has it.
func (g *Group) Dir(controller string) string {
	d, _ := g.dir(controller)
	return d
}

// dir returns the group's directory in the hierarchy carrying controller (v2 if none does).
func (g *Group) dir(controller string) (string, bool) {
	for _, h := range g.hs {
		if has(h.Controllers, controller) {
			return filepath.Join(h.Dir, g.Path), true
		}
	}
	for _, h := range g.hs {
		if h.V2 && v2HasControllers(g.Files(), h.Dir) {
			return filepath.Join(h.Dir, g.Path), true
		}
	}
	return "", false
}

// AddProcess moves pid (all its threads) into the group in every hierarchy where it exists.
func (g *Group) AddProcess(pid int) error {
	var errs []error
	for _, h := range g.hs {
		d := filepath.Join(h.Dir, g.Path)
		if _, err := os.Stat(d); err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("add pid %d to %s: %w", pid, d, err))
		}
	}
	return errors.Join(errs...)
}

// Period is the CFS period SetCPUQuota uses, unless the quota would fall below the kernel's
// 1 ms minimum; then the period grows (up to MaxPeriod) to keep the ratio.
const (
	Period    = 100 * time.Millisecond
	MaxPeriod = time.Second
	minQuota  = 1000 // µs
)

// SetCPUQuota limits the group to cpus CPUs (0.1 = 10 % of one CPU); cpus <= 0 clears the limit.
// The smallest limit is 0.001 CPU (1 ms per second).
func (g *Group) SetCPUQuota(cpus float64) error {
	d, ok := g.dir("cpu")
	if !ok {
		return errors.New("no cpu controller is mounted")
	}
	period := Period.Microseconds()
	quota := int64(-1)
	if cpus > 0 {
		quota = int64(cpus * float64(period))
		if quota < minQuota {
			period = int64(float64(minQuota) / cpus)
			if period > MaxPeriod.Microseconds() {
				period = MaxPeriod.Microseconds()
			}
			quota = minQuota
		}
	}
	if isV2(g.Files(), d) {
		v := "max"
		if quota > 0 {
			v = strconv.FormatInt(quota, 10)
		}
		return g.Files().WriteFile(filepath.Join(d, "cpu.max"), []byte(fmt.Sprintf("%s %d", v, period)))
	}
	// The kernel checks the ratio on each write; lift the old quota first so a period change
	// can never be refused against it.
	if err := g.Files().WriteFile(filepath.Join(d, "cpu.cfs_quota_us"), []byte("-1")); err != nil {
		return err
	}
	if err := g.Files().WriteFile(filepath.Join(d, "cpu.cfs_period_us"), []byte(strconv.FormatInt(period, 10))); err != nil {
		return err
	}
	return g.Files().WriteFile(filepath.Join(d, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(quota, 10)))
}

// CPUQuota returns the current limit in CPUs (0 = unlimited).
func (g *Group) CPUQuota() (float64, error) {
	d, ok := g.dir("cpu")
	if !ok {
		return 0, errors.New("no cpu controller is mounted")
	}
	if isV2(g.Files(), d) {
		b, err := g.Files().ReadFile(filepath.Join(d, "cpu.max"))
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) != 2 || f[0] == "max" {
			return 0, nil
		}
		q, _ := strconv.ParseFloat(f[0], 64)
		p, _ := strconv.ParseFloat(f[1], 64)
		return q / p, nil
	}
	q, err := readInt(g.Files(), filepath.Join(d, "cpu.cfs_quota_us"))
	if err != nil || q < 0 {
		return 0, err
	}
	p, err := readInt(g.Files(), filepath.Join(d, "cpu.cfs_period_us"))
	if err != nil {
		return 0, err
	}
	return float64(q) / float64(p), nil
}

// CPUStat is the CFS bandwidth statistics of a group.
type CPUStat struct {
	Periods, ThrottledPeriods int64
	ThrottledTime             time.Duration
}

// CPUStat reads the group's throttling counters (cpu.stat).
func (g *Group) CPUStat() (CPUStat, error) {
	d, ok := g.dir("cpu")
	if !ok {
		return CPUStat{}, errors.New("no cpu controller is mounted")
	}
	kv, err := readKV(g.Files(), filepath.Join(d, "cpu.stat"))
	if err != nil {
		return CPUStat{}, err
	}
	st := CPUStat{Periods: kv["nr_periods"], ThrottledPeriods: kv["nr_throttled"]}
	if v, ok := kv["throttled_time"]; ok { // v1: nanoseconds
		st.ThrottledTime = time.Duration(v)
	} else if v, ok := kv["throttled_usec"]; ok { // v2
		st.ThrottledTime = time.Duration(v) * time.Microsecond
	}
	return st, nil
}

// CPUUsage is the CPU time the group's processes (and its descendants') have used since the
// group was created: cpuacct.usage on v1, usage_usec of cpu.stat on v2.
func (g *Group) CPUUsage() (time.Duration, error) {
	d, ok := g.dir("cpuacct")
	if !ok {
		return 0, errors.New("no cpuacct controller is mounted (nor a unified hierarchy)")
	}
	if isV2(g.Files(), d) {
		kv, err := readKV(g.Files(), filepath.Join(d, "cpu.stat"))
		if err != nil {
			return 0, fmt.Errorf("cpu usage of %s: %w", g.Path, err)
		}
		v, ok := kv["usage_usec"]
		if !ok {
			return 0, fmt.Errorf("cpu usage of %s: no usage_usec in %s/cpu.stat", g.Path, d)
		}
		return time.Duration(v) * time.Microsecond, nil
	}
	ns, err := readInt(g.Files(), filepath.Join(d, "cpuacct.usage"))
	if err != nil {
		return 0, fmt.Errorf("cpu usage of %s: %w", g.Path, err)
	}
	return time.Duration(ns), nil
}

// Procs lists every pid in the group and its descendants (from one hierarchy that has it).
func (g *Group) Procs() []int {
	seen := map[int]bool{}
	for _, h := range g.hs {
		root := filepath.Join(h.Dir, g.Path)
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// Exists reports whether the group exists in any hierarchy.
func (g *Group) Exists() bool {
	for _, h := range g.hs {
		// Every cgroup directory, v1 or v2, has cgroup.procs.
		if _, err := g.Files().ReadFile(filepath.Join(h.Dir, g.Path, "cgroup.procs")); err == nil {
			return true
		}
	}
	return false
}

// Remove kills every process left in the group's tree, then removes the tree deepest-first in
// every hierarchy.
func (g *Group) Remove(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := g.Procs()
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v still alive", g.Path, pids)
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var errs []error
	for _, h := range g.hs {
		root := filepath.Join(h.Dir, g.Path)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		// Deepest first: a cgroup with children cannot be removed.
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := rmdirRetry(d, deadline); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func rmdirRetry(d string, deadline time.Time) error {
	for {
		err := syscall.Rmdir(d)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		// EBUSY: a dying process still holds it for a moment.
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isV2(fsys FS, dir string) bool {
	_, err := fsys.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	return err == nil
}

func readInt(fsys FS, p string) (int64, error) {
	b, err := fsys.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func readKV(fsys FS, p string) (map[string]int64, error) {
	b, err := fsys.ReadFile(p)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				out[f[0]] = v
			}
		}
	}
	return out, nil
}
