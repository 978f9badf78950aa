package local

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshchaos/meshchaos/harness/cluster/internal/proc"
)

// devicePluginDir is where kubelet puts its device-plugin registration socket. kubelet hard-codes
// it (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1.DevicePluginPath) whatever its --root-dir, so
// every kubelet of every local cluster on the host shares it, and a kubelet that is killed leaves
// its socket there. A variable so tests can point it into a temporary directory.
var devicePluginDir = "/var/lib/kubelet/device-plugins"

const (
	// kubeletSocketName is the registration socket's name in devicePluginDir (KubeletSocket).
	kubeletSocketName = "kubelet.sock"
	// createdRecord, in devicePluginDir, lists the directories meshchaos created there (one
	// absolute path a line) so teardown removes those and only those. kubelet's start-up sweep of
	// the directory removes sockets only, so the record survives it.
	createdRecord = ".meshchaos-created"
)

// listKubelets lists the running kubelets that see devicePluginDir (the same directory, not
// merely the same path: a kind node's kubelet has its own); tests replace it.
var listKubelets = kubeletsSharingDevicePluginDir

// prepareDevicePluginDir creates devicePluginDir and its parent (/var/lib/kubelet) when they are
// missing, before any kubelet starts, and records which it created: kubelet would create them
// itself (MkdirAll, 0750), but then nothing would tell teardown whether they were the host's own
// (a real kubelet's) or ours to remove.
func prepareDevicePluginDir() error {
	var created []string
	for _, d := range []string{filepath.Dir(devicePluginDir), devicePluginDir} {
		// One Mkdir per level: of two clusters coming up at once, exactly one creates each
		// directory and records it.
		err := os.Mkdir(d, 0o750)
		switch {
		case err == nil:
			created = append(created, d)
		case errors.Is(err, fs.ErrExist):
		default:
			return fmt.Errorf("create kubelet device-plugins directory %s: %w", d, err)
		}
	}
	if len(created) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(devicePluginDir, createdRecord), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("record kubelet device-plugins directories: %w", err)
	}
	_, err = f.WriteString(strings.Join(created, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("record kubelet device-plugins directories: %w", err)
	}
	return nil
}

// releaseDevicePluginDir runs at teardown, once the cluster's kubelets are stopped. When no
// kubelet that shares devicePluginDir runs any more (another cluster's may: then it returns their
// pids and changes nothing), it removes kubelet's registration socket, then the directory if that
// leaves it empty, and /var/lib/kubelet if meshchaos created it and it is empty. Without a record
// of who created the directories (kubelet did, or the host had them), it removes only the socket
// and an empty device-plugins directory, which any kubelet recreates at start, and never
// /var/lib/kubelet.
func releaseDevicePluginDir(list func() ([]int, error)) (running []int, err error) {
	running, err = list()
	if err != nil {
		return nil, fmt.Errorf("list kubelet processes: %w", err)
	}
	if len(running) > 0 {
		return running, nil
	}
	sock := filepath.Join(devicePluginDir, kubeletSocketName)
	// Only a socket: a file of that name that is not one is nobody's registration endpoint.
	if st, err := os.Lstat(sock); err == nil && st.Mode()&fs.ModeSocket != 0 {
		if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove device-plugins socket: %w", err)
		}
	}
	ents, err := os.ReadDir(devicePluginDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read device-plugins directory: %w", err)
	}
	recorded := false
	for _, e := range ents {
		if e.Name() != createdRecord {
			// Someone's: kubelet's device checkpoint, a device plugin's socket.
			return nil, nil
		}
		recorded = true
	}
	parent := filepath.Dir(devicePluginDir)
	created := map[string]bool{}
	if recorded {
		b, err := os.ReadFile(filepath.Join(devicePluginDir, createdRecord))
		if err != nil {
			return nil, fmt.Errorf("read device-plugins record: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			// Only the two directories it may name: never remove a path a file tells us to.
			if line == devicePluginDir || line == parent {
				created[line] = true
			}
		}
		if err := os.Remove(filepath.Join(devicePluginDir, createdRecord)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove device-plugins record: %w", err)
		}
	}
	// Empty now; ours, or kubelet's (which recreates it at start). ENOTEMPTY: a kubelet that
	// started meanwhile put its socket there, and the directory is its again.
	if err := removeEmptyDir(devicePluginDir); err != nil {
		return nil, fmt.Errorf("remove device-plugins directory: %w", err)
	}
	if created[parent] {
		if err := removeEmptyDir(parent); err != nil {
			return nil, fmt.Errorf("remove %s: %w", parent, err)
		}
	}
	return nil, nil
}

// removeEmptyDir removes dir if it is empty; a missing or non-empty dir is left as it is.
func removeEmptyDir(dir string) error {
	err := os.Remove(dir)
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// kubeletsSharingDevicePluginDir lists the pids of the running kubelets (comm or executable named
// kubelet…; a zombie holds no socket) whose view of the filesystem has the same devicePluginDir as
// ours. Our clusters' kubelets differ from us only in their network namespace, so they share it;
// a kind node's kubelet sees its container's own /var/lib/kubelet and does not. When that cannot
// be told (no permission), the kubelet counts: keeping a stale socket is harmless, removing a
// live one is not.
func kubeletsSharingDevicePluginDir() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	mine, mineErr := os.Stat(devicePluginDir)
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || !isKubelet(pid) || isZombie(pid) {
			continue
		}
		if mineErr == nil {
			theirs, err := os.Stat(filepath.Join(fmt.Sprintf("/proc/%d/root", pid), devicePluginDir))
			if err == nil && !os.SameFile(mine, theirs) {
				continue
			}
			if errors.Is(err, fs.ErrNotExist) {
				// The path does not exist in its view while it does in ours: another root.
				// (A process that just exited fails the same way and does not count either.)
				continue
			}
		}
		out = append(out, pid)
	}
	return out, nil
}

// isKubelet reports whether pid's command name or executable is kubelet (or kubelet-something,
// a renamed build: counting one too many only keeps the socket).
func isKubelet(pid int) bool {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "kubelet") {
		return true
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && strings.HasPrefix(filepath.Base(strings.TrimSuffix(exe, " (deleted)")), "kubelet")
}

// isZombie reports whether pid has exited and waits to be reaped (state Z, or X while it goes).
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// kubeletSocketWait bounds how long a starting kubelet holds the other kubelets back.
var kubeletSocketWait = time.Minute

// lockDevicePlugins takes the host-wide lock that orders the kubelets' starts and the
// directory's release (teardown) of every local cluster on the host, and returns its release.
// It is flock on the directory two levels above devicePluginDir (/var/lib), which is always there
// and which nobody removes: the device-plugins directory itself cannot carry the lock, since a
// teardown removes it (once another cluster's bring-up had created it and before that cluster's
// first kubelet started, which then found no directory to open), and a lock file would be left
// on the host.
func lockDevicePlugins() (unlock func(), err error) {
	lockDir := filepath.Dir(filepath.Dir(devicePluginDir))
	d, err := os.Open(lockDir)
	if err != nil {
		return nil, fmt.Errorf("open %s to lock kubelet device-plugins: %w", lockDir, err)
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		d.Close()
		return nil, fmt.Errorf("lock %s for kubelet device-plugins: %w", lockDir, err)
	}
	return func() {
		_ = unix.Flock(int(d.Fd()), unix.LOCK_UN)
		d.Close()
	}, nil
}

// releaseDevicePluginDirLocked is releaseDevicePluginDir under lockDevicePlugins, so that no
// cluster's kubelet starts while the directory may be going.
func releaseDevicePluginDirLocked(list func() ([]int, error)) (running []int, err error) {
	unlock, err := lockDevicePlugins()
	if err != nil {
		return nil, err
	}
	defer unlock()
	return releaseDevicePluginDir(list)
}

// startKubeletAlone starts a kubelet (start) while holding lockDevicePlugins until that kubelet
// has bound its registration socket (or exited, or kubeletSocketWait passed), and first creates
// the device-plugins directory (prepareDevicePluginDir) if a teardown removed it. A starting
// kubelet removes every socket in the directory, then listens on kubelet.sock: two starting at
// once (the nodes of one cluster, or of two clusters) can both remove, then one binds and the
// other dies of EADDRINUSE ("Failed to start ContainerManager"), which failed a cluster's
// bring-up in make test.
func startKubeletAlone(start func() (*proc.Process, error)) (*proc.Process, error) {
	unlock, err := lockDevicePlugins()
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Before the kubelet does (it would create them too), so teardown knows whether the
	// directories are ours to remove.
	if err := prepareDevicePluginDir(); err != nil {
		return nil, err
	}
	sock := filepath.Join(devicePluginDir, kubeletSocketName)
	before, _ := os.Lstat(sock)
	p, err := start()
	if err != nil {
		return nil, err
	}
	deadline := time.NewTimer(kubeletSocketWait)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		// Its own socket: not the one there before it started. The inode alone cannot tell: the
		// sweep frees the old socket's and the new one may get it (the wait then ran out).
		if st, err := os.Lstat(sock); err == nil && st.Mode()&fs.ModeSocket != 0 &&
			(before == nil || !os.SameFile(before, st) || st.ModTime().After(before.ModTime())) {
			return p, nil
		}
		select {
		case <-p.Done():
			// Its exit is the caller's to report (bring-up watches every process).
			return p, nil
		case <-deadline.C:
			// A slow kubelet: the next may start; the race is then only possible, not certain.
			return p, nil
		case <-tick.C:
		}
	}
}
