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
	"golang.org/x/sys/unix"

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

// Another cluster's teardown may remove the device-plugins directory (no kubelet ran) after this
// cluster's bring-up began and before its first kubelet starts: make test's TestBothWays failed
// on that ("open kubelet device-plugins directory: no such file or directory"). The kubelet's
// start creates the directory again, records it as ours, and the kubelet binds there.
func TestKubeletStartsAfterATeardownRemovedTheDirectory(t *testing.T) {
	dir, parent := fakeDevicePluginDir(t)
	require.NoError(t, prepareDevicePluginDir())
	running, err := releaseDevicePluginDirLocked(kubelets())
	require.NoError(t, err)
	require.Empty(t, running)
	require.NoDirExists(t, parent, "the other cluster's teardown removed what meshchaos had created")

	self, err := os.Executable()
	require.NoError(t, err)
	p, err := startKubeletAlone(func() (*proc.Process, error) {
		return proc.Start(proc.Spec{Name: "kubelet", Path: self, Args: []string{"-test.run=^$"}, Dir: t.TempDir(), Env: []string{fakeKubeletEnv + "=" + dir}})
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Stop(time.Second) })
	st, err := os.Lstat(filepath.Join(dir, kubeletSocketName))
	require.NoError(t, err, "the kubelet bound its socket before the lock was let go")
	assert.NotZero(t, st.Mode()&fs.ModeSocket)
	require.NoError(t, p.Stop(time.Second))
	// Recorded again: the next teardown removes both directories.
	_, err = releaseDevicePluginDirLocked(kubelets())
	require.NoError(t, err)
	assert.NoDirExists(t, parent)
}

// While a kubelet starts, the host-wide lock that a teardown's release takes is held: the
// release then waits, and afterwards sees that kubelet, instead of removing the directory from
// under its start.
func TestReleaseWaitsForAStartingKubelet(t *testing.T) {
	dir, _ := fakeDevicePluginDir(t)
	started := make(chan struct{})
	proceed := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := startKubeletAlone(func() (*proc.Process, error) {
			close(started)
			<-proceed
			return proc.Start(proc.Spec{Name: "false", Path: "false", Dir: t.TempDir()})
		})
		done <- err
	}()
	<-started
	d, err := os.Open(filepath.Dir(filepath.Dir(dir)))
	require.NoError(t, err)
	defer d.Close()
	assert.ErrorIs(t, unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK, "a release would have to wait")
	assert.DirExists(t, dir)
	close(proceed)
	require.NoError(t, <-done)
	require.NoError(t, unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB), "let go once the kubelet exited")
	require.NoError(t, unix.Flock(int(d.Fd()), unix.LOCK_UN))
}
