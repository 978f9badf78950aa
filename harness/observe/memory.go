package observe

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/harness/cgroup"
)

// MemoryUsage is a container's memory against its limit.
type MemoryUsage struct {
	At time.Time
	// Usage is what the cgroup charges, page cache included.
	Usage int64
	// WorkingSet is Usage minus inactive file cache: what the kernel cannot easily reclaim, and
	// what the OOM killer (and kubelet) effectively act on.
	WorkingSet int64
	// Limit is the hard limit; 0 means none.
	Limit int64
}

// Fraction is WorkingSet / Limit (0 without a limit).
func (m MemoryUsage) Fraction() float64 {
	if m.Limit <= 0 {
		return 0
	}
	return float64(m.WorkingSet) / float64(m.Limit)
}

// MemoryReader reads a container's memory. CgroupMemory is one; a reader over the metrics API
// fits where cgroups are out of reach (a remote cluster).
type MemoryReader interface {
	ReadMemory() (MemoryUsage, error)
}

// CgroupMemory reads a memory cgroup: v1 (memory.usage_in_bytes, memory.limit_in_bytes) or v2
// (memory.current, memory.max).
type CgroupMemory struct {
	Dir string
	V2  bool
	// Files reads the cgroup's files: nil for this host's; a node's through an agent when the
	// cluster's nodes are other machines (cgroup.Group.Files).
	Files cgroup.FS
}

// v1 reports "no limit" as a huge page-aligned number rather than "max".
const v1Unlimited = math.MaxInt64 / 2

// OpenCgroupMemory recognises the cgroup version from the files in dir.
func OpenCgroupMemory(dir string) (*CgroupMemory, error) {
	if _, err := os.Stat(filepath.Join(dir, "memory.current")); err == nil {
		return &CgroupMemory{Dir: dir, V2: true}, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.usage_in_bytes")); err == nil {
		return &CgroupMemory{Dir: dir}, nil
	}
	return nil, fmt.Errorf("%s is not a memory cgroup (no memory.current or memory.usage_in_bytes)", dir)
}

// OpenGroupMemory opens the memory controller of a cgroup wherever its files are (this host or a
// node behind an agent).
func OpenGroupMemory(g *cgroup.Group) (*CgroupMemory, error) {
	dir, fsys := g.Dir("memory"), g.Files()
	for _, f := range []string{"memory.current", "memory.usage_in_bytes"} {
		if _, err := fsys.ReadFile(filepath.Join(dir, f)); err == nil {
			return &CgroupMemory{Dir: dir, V2: f == "memory.current", Files: fsys}, nil
		}
	}
	return nil, fmt.Errorf("cgroup %s has no memory controller (no memory.current or memory.usage_in_bytes in %q)", g.Path, dir)
}

// CgroupMemoryForPID finds the memory cgroup of a process from /proc/<pid>/cgroup: the v1 memory
// hierarchy when mounted (hybrid hosts), the unified v2 hierarchy otherwise.
func CgroupMemoryForPID(pid int) (*CgroupMemory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("memory cgroup of pid %d: %w", pid, err)
	}
	defer f.Close()
	var v1, v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1 = parts[2]
			}
		}
	}
	if v1 != "" {
		return OpenCgroupMemory(filepath.Join("/sys/fs/cgroup/memory", v1))
	}
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if m, err := OpenCgroupMemory(filepath.Join(root, v2)); err == nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("memory cgroup of pid %d: no memory controller found in /proc/%d/cgroup", pid, pid)
}

// ReadMemory reads usage, working set and limit.
func (c *CgroupMemory) ReadMemory() (MemoryUsage, error) {
	usageFile, limitFile, inactive := "memory.usage_in_bytes", "memory.limit_in_bytes", "total_inactive_file"
	if c.V2 {
		usageFile, limitFile, inactive = "memory.current", "memory.max", "inactive_file"
	}
	m := MemoryUsage{At: time.Now()}
	var err error
	if m.Usage, err = readInt(c.files(), filepath.Join(c.Dir, usageFile)); err != nil {
		return m, err
	}
	if m.Limit, err = readInt(c.files(), filepath.Join(c.Dir, limitFile)); err != nil {
		return m, err
	}
	if m.Limit >= v1Unlimited {
		m.Limit = 0
	}
	m.WorkingSet = m.Usage
	if v, err := statValue(c.files(), filepath.Join(c.Dir, "memory.stat"), inactive); err == nil && v < m.Usage {
		m.WorkingSet = m.Usage - v
	}
	return m, nil
}

// files is where the cgroup's files are read.
func (c *CgroupMemory) files() cgroup.FS {
	if c.Files == nil {
		return cgroup.Host
	}
	return c.Files
}

// readInt reads a cgroup file holding one integer; "max" (v2, no limit) reads as 0.
func readInt(fsys cgroup.FS, path string) (int64, error) {
	b, err := fsys.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func statValue(fsys cgroup.FS, path, key string) (int64, error) {
	b, err := fsys.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}

// OOMTrigger polls a container's memory and fires when its working set crosses Fraction of the
// limit — the moment to take a heap profile, before the kernel's OOM killer takes the process.
// After firing it re-arms once the working set falls below Fraction minus Hysteresis (e.g. the
// process was killed and restarted), so every approach to the limit is captured once.
type OOMTrigger struct {
	Memory MemoryReader
	// Fraction of the limit that fires (default 0.8).
	Fraction float64
	// Hysteresis below Fraction that re-arms (default 0.2).
	Hysteresis float64
	// Interval between reads (default 50 ms): a process growing by 50 MiB/s gets within 2.5 MiB.
	Interval time.Duration
	// Fire runs synchronously (polling pauses) when the threshold is crossed.
	Fire func(ctx context.Context, m MemoryUsage)
	// Sample, when set, receives every reading (for the memory series).
	Sample func(m MemoryUsage)
}

// Run polls until ctx ends. Read errors (the cgroup disappears while a container restarts) are
// retried; Run returns the last of them when it never read anything at all.
func (t *OOMTrigger) Run(ctx context.Context) error {
	frac, hyst, iv := t.Fraction, t.Hysteresis, t.Interval
	if frac <= 0 {
		frac = 0.8
	}
	if hyst <= 0 {
		hyst = 0.2
	}
	if iv <= 0 {
		iv = 50 * time.Millisecond
	}
	armed, readOnce := true, false
	var lastErr error
	tick := time.NewTicker(iv)
	defer tick.Stop()
	for {
		m, err := t.Memory.ReadMemory()
		if err != nil {
			lastErr = err
		} else {
			readOnce = true
			if t.Sample != nil {
				t.Sample(m)
			}
			f := m.Fraction()
			switch {
			case armed && m.Limit > 0 && f >= frac:
				armed = false
				if t.Fire != nil {
					t.Fire(ctx, m)
				}
			case !armed && f < frac-hyst:
				armed = true
			}
		}
		select {
		case <-ctx.Done():
			if !readOnce && lastErr != nil {
				return fmt.Errorf("oom trigger: never read memory: %w", lastErr)
			}
			return nil
		case <-tick.C:
		}
	}
}

// readOOMKills reads the kernel's count of OOM kills in a memory cgroup (v1 memory.oom_control,
// v2 memory.events); ok is false for readers that are not cgroups or kernels without the count.
func readOOMKills(r MemoryReader) (int64, bool) {
	c, isCgroup := r.(*CgroupMemory)
	if !isCgroup {
		return 0, false
	}
	file := "memory.oom_control"
	if c.V2 {
		file = "memory.events"
	}
	n, err := statValue(c.files(), filepath.Join(c.Dir, file), "oom_kill")
	return n, err == nil
}
