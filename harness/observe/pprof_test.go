package observe

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/internal/memhog"
)

// TestProfilerCapturesFromRealProcess: heap, goroutine and CPU profiles from another process's
// pprof port, on demand and on a schedule, saved as parseable .pb.gz files.
func TestProfilerCapturesFromRealProcess(t *testing.T) {
	c := memhog.Start(t, memhog.Options{})
	runDir := t.TempDir()
	p := NewProfiler("http://"+c.Addr, runDir, nil)
	p.CPUSeconds = 1

	set, err := p.CaptureSet(context.Background(), "phase load/start", true)
	require.NoError(t, err)
	require.Len(t, set, 3)
	assert.Equal(t, []string{"heap", "goroutine", "cpu"}, []string{set[0].Kind, set[1].Kind, set[2].Kind})
	assert.Equal(t, "pprof/001-heap-phase-load-start.pb.gz", set[0].File)
	assert.Positive(t, set[0].InUseBytes)
	assert.NotEmpty(t, set[0].Top)
	for _, pr := range set {
		f, err := os.Open(filepath.Join(runDir, pr.File))
		require.NoError(t, err)
		parsed, err := profile.Parse(f)
		f.Close()
		require.NoError(t, err, pr.File)
		assert.NotEmpty(t, parsed.SampleType, pr.File)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var errs []error
	p.Every(ctx, 200*time.Millisecond, func(err error) { errs = append(errs, err) })
	assert.Empty(t, errs)
	all := p.Profiles()
	assert.GreaterOrEqual(t, len(all), 3+2*2, "at least two scheduled heap+goroutine sets")
	assert.Equal(t, "scheduled", all[len(all)-1].Reason)
}

// TestHeapCaptureLeavesPoolsOut: a heap capture reads a heap that no longer counts what sync.Pool
// held (after one GC the pool's victim cache still does), so a scale step's heap does not depend
// on how many buffers gRPC happened to have pooled. The process profiled is this one.
func TestHeapCaptureLeavesPoolsOut(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/debug/pprof/heap", pprof.Handler("heap"))
	ts := httptest.NewServer(mux)
	defer ts.Close()

	const pooled = 64 << 20
	var pool sync.Pool
	pool.Put(make([]byte, pooled))
	_, err := NewProfiler(ts.URL, t.TempDir(), nil).Capture(context.Background(), Heap, "x")
	require.NoError(t, err)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms) // no GC: the figure the last collection left
	assert.Less(t, ms.HeapAlloc, uint64(pooled), "the pooled buffer is not in the heap read")
	runtime.KeepAlive(&pool)
}

func TestProfilerReportsMissingPprof(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	defer ts.Close()
	_, err := NewProfiler(ts.URL, t.TempDir(), nil).Capture(context.Background(), Heap, "x")
	assert.ErrorContains(t, err, "is net/http/pprof served")
}
