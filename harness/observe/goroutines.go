package observe

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/meshchaos/meshchaos/results"
)

// SaveOwnGoroutines writes this process's goroutine profile (the harness's own) into the run
// directory's pprof/ as harness-goroutine-<reason>.pb.gz and returns its path relative to dir.
func SaveOwnGoroutines(dir, reason string) (string, error) {
	rel := filepath.Join(results.PprofDir, "harness-goroutine-"+fileSafe(reason)+".pb.gz")
	if err := os.MkdirAll(filepath.Join(dir, results.PprofDir), 0o755); err != nil {
		return "", fmt.Errorf("save the harness's goroutine profile: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, rel))
	if err != nil {
		return "", fmt.Errorf("save the harness's goroutine profile: %w", err)
	}
	err = pprof.Lookup("goroutine").WriteTo(f, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("save the harness's goroutine profile: %w", err)
	}
	return rel, nil
}

// OwnMemory is this process's heap in use and goroutine count; with gc a collection runs
// first, so the heap is what is live.
func OwnMemory(gc bool) (heapBytes int64, goroutines int) {
	if gc {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), runtime.NumGoroutine()
}

// CompareGoroutines reads two goroutine profiles of one process kind (paths relative to dir)
// and counts the goroutines of each, with the stacks that gained goroutines between them.
func CompareGoroutines(dir, startFile, endFile string) (results.GoroutineDelta, error) {
	d := results.GoroutineDelta{StartFile: startFile, EndFile: endFile}
	start, err := goroutineStacks(filepath.Join(dir, startFile))
	if err != nil {
		return d, err
	}
	end, err := goroutineStacks(filepath.Join(dir, endFile))
	if err != nil {
		return d, err
	}
	for _, n := range start {
		d.Start += n
	}
	for stack, n := range end {
		d.End += n
		if delta := n - start[stack]; delta > 0 {
			d.Grown = append(d.Grown, results.StackCount{Stack: stack, Delta: delta})
		}
	}
	sort.Slice(d.Grown, func(i, j int) bool {
		if d.Grown[i].Delta != d.Grown[j].Delta {
			return d.Grown[i].Delta > d.Grown[j].Delta
		}
		return d.Grown[i].Stack < d.Grown[j].Stack
	})
	return d, nil
}

// goroutineStacks counts goroutines by stack (function names, leaf first: addresses differ
// between processes of one binary only by where it was loaded, names do not).
func goroutineStacks(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("goroutine profile: %w", err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("goroutine profile %s: %w", path, err)
	}
	out := map[string]int{}
	for _, s := range p.Sample {
		var frames []string
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function != nil {
					frames = append(frames, l.Function.Name)
				}
			}
		}
		if len(s.Value) > 0 {
			out[strings.Join(frames, " ← ")] += int(s.Value[0])
		}
	}
	return out, nil
}
