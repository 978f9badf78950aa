package bins

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clean clears every variable the lookup reads, leaves $PATH empty and moves out of the real
// checkout (whose bin/ may hold everything), so only what a test sets up is found.
func clean(t *testing.T, names ...string) {
	t.Helper()
	t.Chdir(t.TempDir())
	for _, v := range []string{BinDirEnv, KubebuilderAssetsEnv, ImagesEnv} {
		t.Setenv(v, "")
	}
	for _, n := range names {
		t.Setenv(EnvVar(n), "")
	}
	t.Setenv("PATH", t.TempDir())
}

// fakeCheckout is a directory with the meshchaos go.mod and an empty bin/.
func fakeCheckout(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "go.mod"), []byte("module github.com/meshchaos/meshchaos\n\ngo 1.26\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(root, "bin"), 0o755))
	return root
}

func writeExe(t *testing.T, path string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755))
	return path
}

// exeDir is the directory of the running test binary; files a test puts there are removed after it.
func exeDir(t *testing.T, rel string) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	p := filepath.Join(filepath.Dir(exe), rel)
	_, err = os.Lstat(p)
	require.True(t, os.IsNotExist(err), "%s exists already", p)
	t.Cleanup(func() { os.RemoveAll(p) })
	return p
}

func TestPathPrefersPerBinaryVariable(t *testing.T) {
	clean(t, KubeAPIServer)
	own := writeExe(t, filepath.Join(t.TempDir(), "own-apiserver"))
	shared := t.TempDir()
	writeExe(t, filepath.Join(shared, KubeAPIServer))

	t.Setenv(BinDirEnv, shared)
	t.Setenv(EnvVar(KubeAPIServer), own)
	p, err := Path(KubeAPIServer)
	require.NoError(t, err)
	assert.Equal(t, own, p)

	t.Setenv(EnvVar(KubeAPIServer), "")
	p, err = Path(KubeAPIServer)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(shared, KubeAPIServer), p)
}

func TestFinderDirComesBeforeTheEnvironment(t *testing.T) {
	clean(t, Etcd, KubeAPIServer)
	explicit, shared := t.TempDir(), t.TempDir()
	want := writeExe(t, filepath.Join(explicit, Etcd))
	t.Setenv(EnvVar(Etcd), writeExe(t, filepath.Join(t.TempDir(), "other-etcd")))
	t.Setenv(BinDirEnv, shared)
	sharedAPI := writeExe(t, filepath.Join(shared, KubeAPIServer))

	paths, err := Finder{Dir: explicit}.All(Etcd, KubeAPIServer)
	require.NoError(t, err)
	assert.Equal(t, want, paths[Etcd], "the explicit directory wins over MESHCHAOS_ETCD")
	assert.Equal(t, sharedAPI, paths[KubeAPIServer], "a binary missing from the explicit directory is looked for further")

	_, err = Finder{Dir: explicit}.Path(Kubelet)
	require.Error(t, err)
	assert.Contains(t, err.Error(), explicit, "the error names the explicit directory it tried")
}

func TestPathOrderOfDirectories(t *testing.T) {
	clean(t, Etcd)
	root := fakeCheckout(t)
	inBin := writeExe(t, filepath.Join(root, "bin", Etcd))
	assets := t.TempDir()
	inAssets := writeExe(t, filepath.Join(assets, Etcd))
	binDir := t.TempDir()
	inBinDir := writeExe(t, filepath.Join(binDir, Etcd))
	onPath := t.TempDir()
	writeExe(t, filepath.Join(onPath, Etcd))
	// A nested module's go.mod (like hack/kubebins) is not the checkout's root.
	sub := filepath.Join(root, "hack", "kubebins", "deep")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "hack", "kubebins", "go.mod"), []byte("module kubebins\n"), 0o644))
	t.Chdir(sub)
	t.Setenv("PATH", onPath)
	t.Setenv(BinDirEnv, binDir)
	t.Setenv(KubebuilderAssetsEnv, assets)

	for _, want := range []string{inBinDir, inAssets, inBin, filepath.Join(onPath, Etcd)} {
		p, err := Path(Etcd)
		require.NoError(t, err)
		assert.Equal(t, want, p)
		require.NoError(t, os.Remove(want)) // the next place in the order answers
	}
	_, err := Path(Etcd)
	assert.ErrorContains(t, err, "run 'make bins'")
}

func TestPathFallsBackToTheExecutablesDirectory(t *testing.T) {
	const name = "meshchaos-bins-test-tool"
	clean(t, name) // outside any checkout
	want := writeExe(t, exeDir(t, name))
	p, err := Path(name)
	require.NoError(t, err)
	assert.Equal(t, want, p)

	root := fakeCheckout(t)
	t.Chdir(root)
	inBin := writeExe(t, filepath.Join(root, "bin", name))
	p, err = Path(name)
	require.NoError(t, err)
	assert.Equal(t, inBin, p, "the checkout's bin/ comes before the executable's directory")
}

func TestPathRejectsNonExecutableOverride(t *testing.T) {
	f := filepath.Join(t.TempDir(), "etcd")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
	t.Setenv(EnvVar(Etcd), f)
	_, err := Path(Etcd)
	assert.ErrorContains(t, err, "not an executable")
}

func TestAllNamesEveryMissingBinary(t *testing.T) {
	clean(t)
	t.Setenv(BinDirEnv, t.TempDir())
	_, err := All("no-such-a", "no-such-b")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-a, no-such-b")
	assert.Contains(t, err.Error(), "make bins")
	assert.Equal(t, "MESHCHAOS_KUBE_CONTROLLER_MANAGER", EnvVar(KubeControllerManager))
}

func TestImagesDirOrder(t *testing.T) {
	clean(t)
	root := fakeCheckout(t)
	inCheckout := filepath.Join(root, "bin", "images")
	require.NoError(t, os.Mkdir(inCheckout, 0o755))
	sub := filepath.Join(root, "controlplane", "xds")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	t.Chdir(sub)

	d, err := ImagesDir("")
	require.NoError(t, err)
	assert.Equal(t, inCheckout, d, "found from a subdirectory of the checkout")

	fromEnv := t.TempDir()
	t.Setenv(ImagesEnv, fromEnv)
	d, err = ImagesDir("")
	require.NoError(t, err)
	assert.Equal(t, fromEnv, d)

	explicit := t.TempDir()
	d, err = ImagesDir(explicit)
	require.NoError(t, err)
	assert.Equal(t, explicit, d)

	// Relative explicit values resolve against the working directory.
	d, err = ImagesDir("../../bin/images")
	require.NoError(t, err)
	assert.Equal(t, inCheckout, d)
}

func TestImagesDirRefusesMissingExplicitValues(t *testing.T) {
	clean(t)
	root := fakeCheckout(t)
	require.NoError(t, os.Mkdir(filepath.Join(root, "bin", "images"), 0o755))
	t.Chdir(root)
	missing := filepath.Join(t.TempDir(), "typo")

	_, err := ImagesDir(missing)
	require.Error(t, err, "a mistyped --images must not fall back to another directory")
	assert.Contains(t, err.Error(), missing)
	assert.Contains(t, err.Error(), "run 'make images' or pass --images / set MESHCHAOS_IMAGES")

	t.Setenv(ImagesEnv, missing)
	_, err = ImagesDir("")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MESHCHAOS_IMAGES")
	assert.Contains(t, err.Error(), missing)

	file := filepath.Join(t.TempDir(), "images")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = ImagesDir(file)
	assert.ErrorContains(t, err, "not a directory")
}

// TestImagesDirBinaryOutsideBin: the running executable (here the test binary, in a temp dir) is
// not in bin/; run from inside the checkout it still finds bin/images, and outside any checkout the
// images/ beside it.
func TestImagesDirBinaryOutsideBin(t *testing.T) {
	clean(t)
	beside := exeDir(t, "images")
	require.NoError(t, os.Mkdir(beside, 0o755))
	root := fakeCheckout(t)
	inCheckout := filepath.Join(root, "bin", "images")
	require.NoError(t, os.Mkdir(inCheckout, 0o755))

	t.Chdir(root)
	d, err := ImagesDir("")
	require.NoError(t, err)
	assert.Equal(t, inCheckout, d)

	t.Chdir(t.TempDir())
	d, err = ImagesDir("")
	require.NoError(t, err)
	assert.Equal(t, beside, d)
}

func TestImagesDirNoneFound(t *testing.T) {
	clean(t)
	root := fakeCheckout(t) // bin/ without images/
	t.Chdir(root)
	_, err := ImagesDir("")
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(root, "bin", "images"), "names where it looked")
	assert.Contains(t, err.Error(), "run 'make images' or pass --images / set MESHCHAOS_IMAGES")
}
