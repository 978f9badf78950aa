package local

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeDevicePluginDir points devicePluginDir at DIR/var/lib/kubelet/device-plugins for the test
// and returns it and its parent (which, like /var/lib/kubelet, does not exist yet).
func fakeDevicePluginDir(t *testing.T) (dir, parent string) {
	t.Helper()
	old := devicePluginDir
	// Not t.TempDir(): a unix socket's path must fit in 108 bytes.
	root, err := os.MkdirTemp("", "mcdp")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.MkdirAll(filepath.Join(root, "var", "lib"), 0o755))
	devicePluginDir = filepath.Join(root, "var", "lib", "kubelet", "device-plugins")
	t.Cleanup(func() { devicePluginDir = old })
	return devicePluginDir, filepath.Dir(devicePluginDir)
}

// kubeletSocket creates a unix socket where kubelet puts its registration socket, as a killed
// kubelet leaves it.
func kubeletSocket(t *testing.T) string {
	t.Helper()
	p := filepath.Join(devicePluginDir, kubeletSocketName)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	require.NoError(t, err)
	l.SetUnlinkOnClose(false)
	require.NoError(t, l.Close())
	return p
}

func kubelets(pids ...int) func() ([]int, error) {
	return func() ([]int, error) { return pids, nil }
}

// While another cluster's kubelet runs, the shared socket and directories stay; once none runs,
// the socket goes, and the directories meshchaos created go with it.
func TestReleaseDevicePluginDirKeepsTheSocketWhileAKubeletRuns(t *testing.T) {
	dir, parent := fakeDevicePluginDir(t)
	require.NoError(t, prepareDevicePluginDir())
	require.DirExists(t, dir)
	sock := kubeletSocket(t)

	running, err := releaseDevicePluginDir(kubelets(4242))
	require.NoError(t, err)
	assert.Equal(t, []int{4242}, running)
	assert.FileExists(t, sock, "another kubelet still uses it")

	running, err = releaseDevicePluginDir(kubelets())
	require.NoError(t, err)
	assert.Empty(t, running)
	assert.NoFileExists(t, sock)
	assert.NoDirExists(t, dir, "created by meshchaos, empty")
	assert.NoDirExists(t, parent, "created by meshchaos, empty")

	// Nothing left: nothing to do.
	_, err = releaseDevicePluginDir(kubelets())
	assert.NoError(t, err)
}

// When the process list cannot be read, nothing is removed: a live kubelet may use the socket.
func TestReleaseDevicePluginDirKeepsTheSocketWhenKubeletsCannotBeListed(t *testing.T) {
	fakeDevicePluginDir(t)
	require.NoError(t, prepareDevicePluginDir())
	sock := kubeletSocket(t)
	_, err := releaseDevicePluginDir(func() ([]int, error) { return nil, errors.New("no /proc") })
	assert.ErrorContains(t, err, "list kubelet processes: no /proc")
	assert.FileExists(t, sock)
}

// What meshchaos did not create, or what holds anything else, stays.
func TestReleaseDevicePluginDirLeavesWhatIsNotOurs(t *testing.T) {
	t.Run("parent existed", func(t *testing.T) {
		dir, parent := fakeDevicePluginDir(t)
		require.NoError(t, os.Mkdir(parent, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(parent, "config.yaml"), nil, 0o644))
		require.NoError(t, prepareDevicePluginDir())
		kubeletSocket(t)
		_, err := releaseDevicePluginDir(kubelets())
		require.NoError(t, err)
		assert.NoDirExists(t, dir, "meshchaos created it")
		assert.FileExists(t, filepath.Join(parent, "config.yaml"))
	})
	t.Run("empty parent existed", func(t *testing.T) {
		dir, parent := fakeDevicePluginDir(t)
		require.NoError(t, os.Mkdir(parent, 0o755))
		require.NoError(t, prepareDevicePluginDir())
		_, err := releaseDevicePluginDir(kubelets())
		require.NoError(t, err)
		assert.NoDirExists(t, dir)
		assert.DirExists(t, parent, "not created by meshchaos: kept even empty")
	})
	t.Run("no record", func(t *testing.T) {
		// Both existed (kubelet created them, or the host had them): no record is written, the
		// socket goes, an empty device-plugins directory goes (any kubelet recreates it), the
		// parent stays even empty.
		dir, parent := fakeDevicePluginDir(t)
		require.NoError(t, os.MkdirAll(dir, 0o750))
		require.NoError(t, prepareDevicePluginDir())
		assert.NoFileExists(t, filepath.Join(dir, createdRecord))
		sock := kubeletSocket(t)
		_, err := releaseDevicePluginDir(kubelets())
		require.NoError(t, err)
		assert.NoFileExists(t, sock)
		assert.NoDirExists(t, dir)
		assert.DirExists(t, parent)
	})
	t.Run("device-plugins holds more", func(t *testing.T) {
		dir, parent := fakeDevicePluginDir(t)
		require.NoError(t, prepareDevicePluginDir())
		sock := kubeletSocket(t)
		checkpoint := filepath.Join(dir, "kubelet_internal_checkpoint")
		require.NoError(t, os.WriteFile(checkpoint, []byte("{}"), 0o644))
		_, err := releaseDevicePluginDir(kubelets())
		require.NoError(t, err)
		assert.NoFileExists(t, sock)
		assert.FileExists(t, checkpoint)
		assert.FileExists(t, filepath.Join(dir, createdRecord), "kept for when the directory is empty")
		assert.DirExists(t, parent)
	})
	t.Run("not a socket", func(t *testing.T) {
		dir, _ := fakeDevicePluginDir(t)
		require.NoError(t, prepareDevicePluginDir())
		f := filepath.Join(dir, kubeletSocketName)
		require.NoError(t, os.WriteFile(f, nil, 0o644))
		_, err := releaseDevicePluginDir(kubelets())
		require.NoError(t, err)
		assert.FileExists(t, f, "not kubelet's socket")
	})
	t.Run("record names another path", func(t *testing.T) {
		dir, _ := fakeDevicePluginDir(t)
		require.NoError(t, prepareDevicePluginDir())
		elsewhere := t.TempDir()
		f, err := os.OpenFile(filepath.Join(dir, createdRecord), os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = io.WriteString(f, elsewhere+"\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		_, err = releaseDevicePluginDir(kubelets())
		require.NoError(t, err)
		assert.DirExists(t, elsewhere, "only the two known directories are ever removed")
	})
}

// The process lister finds a running kubelet by its name and ignores one that has exited.
func TestKubeletsSharingDevicePluginDirFindsRunningKubelets(t *testing.T) {
	dir, _ := fakeDevicePluginDir(t)
	require.NoError(t, os.MkdirAll(dir, 0o750))
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	// A copy of sleep named kubelet: its comm and executable are "kubelet".
	fake := filepath.Join(t.TempDir(), "kubelet")
	b, err := os.ReadFile(sleep)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(fake, b, 0o755))
	cmd := exec.Command(fake, "300")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	require.Eventually(t, func() bool { return isKubelet(pid) }, 5*time.Second, 10*time.Millisecond, "exec done")
	pids, err := kubeletsSharingDevicePluginDir()
	require.NoError(t, err)
	assert.Contains(t, pids, pid)

	// Killed but not reaped yet: a zombie holds no socket.
	require.NoError(t, cmd.Process.Kill())
	require.Eventually(t, func() bool { return isZombie(pid) }, 5*time.Second, 10*time.Millisecond)
	pids, err = kubeletsSharingDevicePluginDir()
	require.NoError(t, err)
	assert.False(t, slices.Contains(pids, pid), "a zombie is not a running kubelet")
	_ = cmd.Wait()
	waited = true
}
