package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/internal/proc"
)

// fakeKubeletEnv makes the test binary act as kubelet's device-plugin manager at start: remove
// every socket in the directory, pause (kubelet does more in between), listen on kubelet.sock;
// exit 1 on EADDRINUSE as kubelet does ("Failed to start ContainerManager").
const fakeKubeletEnv = "MESHCHAOS_FAKE_KUBELET_DIR"

func init() {
	dir := os.Getenv(fakeKubeletEnv)
	if dir == "" {
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Type()&fs.ModeSocket != 0 {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	time.Sleep(300 * time.Millisecond)
	l, err := net.Listen("unix", filepath.Join(dir, kubeletSocketName))
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	// Like kubelet: it never removes its socket on exit.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	time.Sleep(time.Minute)
	os.Exit(0)
}

// Kubelets started at once each sweep the device-plugins directory and then bind kubelet.sock:
// without startKubeletAlone some die of EADDRINUSE (as a make test cluster did); with it, every
// one of six started at once keeps running.
func TestKubeletsStartOneAtATime(t *testing.T) {
	dir := t.TempDir()
	old := devicePluginDir
	devicePluginDir = dir
	t.Cleanup(func() { devicePluginDir = old })
	self, err := os.Executable()
	require.NoError(t, err)

	start := func(alone bool, i int) *proc.Process {
		spec := proc.Spec{Name: fmt.Sprintf("k%d-%v", i, alone), Path: self, Args: []string{"-test.run=^$"}, Dir: t.TempDir(), Env: []string{fakeKubeletEnv + "=" + dir}}
		var p *proc.Process
		var err error
		if alone {
			p, err = startKubeletAlone(func() (*proc.Process, error) { return proc.Start(spec) })
		} else {
			p, err = proc.Start(spec)
		}
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Stop(time.Second) })
		return p
	}
	died := func(alone bool) int {
		var wg sync.WaitGroup
		ps := make([]*proc.Process, 6)
		for i := range ps {
			wg.Go(func() { ps[i] = start(alone, i) })
		}
		wg.Wait()
		// Each binds 300 ms after its sweep or dies then: 2 s is past every one's moment.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n := 0
		for _, p := range ps {
			select {
			case <-p.Done():
				n++
			case <-ctx.Done():
			}
		}
		for _, p := range ps {
			_ = p.Stop(time.Second)
		}
		return n
	}
	require.Positive(t, died(false), "without the lock the fake kubelets race (else this test proves nothing)")
	assert.Zero(t, died(true), "started one at a time, every kubelet binds its socket")
}

// A kubelet that exits before it binds lets the next start.
func TestKubeletStartGivesWayToAnExitedKubelet(t *testing.T) {
	dir := t.TempDir()
	old := devicePluginDir
	devicePluginDir = dir
	t.Cleanup(func() { devicePluginDir = old })
	done := make(chan error, 1)
	go func() {
		_, err := startKubeletAlone(func() (*proc.Process, error) {
			return proc.Start(proc.Spec{Name: "false", Path: "false", Dir: t.TempDir()})
		})
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was held past the kubelet's exit")
	}
	_, err := os.Lstat(filepath.Join(dir, kubeletSocketName))
	assert.True(t, errors.Is(err, fs.ErrNotExist))
}
