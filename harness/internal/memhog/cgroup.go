package memhog

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Cgroup is a memory cgroup a test created: v1 where the memory hierarchy is mounted (hybrid
// hosts), else v2.
type Cgroup struct {
	Dir string
	V2  bool
}

// NewCgroup creates a memory cgroup with limit bytes and no swap, removed at the end of the test
// (after the processes in it, which the test must have ended by then: register the cgroup before
// starting them, so their cleanup runs first).
func NewCgroup(t testing.TB, limit int64) *Cgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test creates a memory cgroup and needs root (or set MESHCHAOS_SKIP_INTEGRATION=1)")
	}
	name := fmt.Sprintf("meshchaos-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	cg := &Cgroup{Dir: filepath.Join("/sys/fs/cgroup/memory", name)}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		cg = &Cgroup{Dir: filepath.Join("/sys/fs/cgroup", name), V2: true}
	}
	if err := os.Mkdir(cg.Dir, 0o755); err != nil {
		t.Fatalf("create memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		// rmdir fails while the kernel still accounts an exiting task; retry briefly.
		var err error
		for i := 0; i < 100; i++ {
			if err = syscall.Rmdir(cg.Dir); err == nil || os.IsNotExist(err) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("remove cgroup %s: %v", cg.Dir, err)
	})
	lim := strconv.FormatInt(limit, 10)
	if cg.V2 {
		if err := os.WriteFile(filepath.Join(cg.Dir, "memory.max"), []byte(lim), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(cg.Dir, "memory.swap.max"), []byte("0"), 0o644)
	} else {
		if err := os.WriteFile(filepath.Join(cg.Dir, "memory.limit_in_bytes"), []byte(lim), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(cg.Dir, "memory.swappiness"), []byte("0"), 0o644)
	}
	return cg
}

// OOMKills reads the kernel's count of OOM kills in the cgroup.
func (cg *Cgroup) OOMKills() (int64, error) {
	file := "memory.oom_control"
	if cg.V2 {
		file = "memory.events"
	}
	f, err := os.Open(filepath.Join(cg.Dir, file))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no oom_kill line", file)
}
