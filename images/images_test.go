package images

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildStatic compiles a tiny static program to package.
func buildStatic(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "main.go")
	require.NoError(t, os.WriteFile(src, []byte("package main\nfunc main(){}\n"), 0o644))
	out := filepath.Join(dir, "tiny")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	return out
}

func TestBuildWritesLoadableImage(t *testing.T) {
	dir := t.TempDir()
	bin := buildStatic(t, dir)
	require.NoError(t, os.Rename(bin, filepath.Join(dir, "pause")))
	b := &Builder{BinDir: dir, Self: filepath.Join(dir, "pause")}
	out := filepath.Join(dir, "images")
	paths, err := b.Build(out, []Spec{{Name: "pause", Binary: "pause"}, {Name: "echo", Binary: Self, Args: []string{"workload", "echo"}}})
	require.NoError(t, err)
	require.Len(t, paths, 2)

	tag, err := name.NewTag("meshchaos.local/echo:dev")
	require.NoError(t, err)
	img, err := tarball.ImageFromPath(TarPath(out, "echo"), &tag)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/meshchaos", "workload", "echo"}, cf.Config.Entrypoint)
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		files[h.Name] = h.Mode
	}
	assert.Equal(t, int64(0o755), files["meshchaos"])
	assert.Equal(t, int64(0o1777), files["tmp/"])
}

func TestBuildRefusesDynamicBinary(t *testing.T) {
	dir := t.TempDir()
	b := &Builder{BinDir: dir, Self: "/bin/sh"} // dynamically linked on Debian
	_, err := b.Build(dir, []Spec{{Name: "x", Binary: Self}})
	assert.ErrorContains(t, err, "dynamically linked")
	_, err = b.Build(dir, []Spec{{Name: "y", Binary: "absent"}})
	assert.ErrorContains(t, err, "make images")
}

// TestControlPlaneImageRunsItsOwnBinary: the control plane's image holds meshchaos-controlplane
// (not the harness), and when that binary is missing the error says how to build it.
func TestControlPlaneImageRunsItsOwnBinary(t *testing.T) {
	s, ok := Lookup("controlplane")
	require.True(t, ok)
	assert.Equal(t, []string{"/meshchaos-controlplane"}, s.Entrypoint())

	dir := t.TempDir()
	b := &Builder{BinDir: dir}
	_, err := b.Build(filepath.Join(dir, "images"), []Spec{s})
	assert.ErrorContains(t, err, filepath.Join(dir, "meshchaos-controlplane")+" missing: run 'make build'")

	require.NoError(t, os.Rename(buildStatic(t, dir), filepath.Join(dir, ControlPlane)))
	paths, err := b.Build(filepath.Join(dir, "images"), []Spec{s})
	require.NoError(t, err)
	tag, err := name.NewTag(s.Ref())
	require.NoError(t, err)
	img, err := tarball.ImageFromPath(paths[0], &tag)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/meshchaos-controlplane"}, cf.Config.Entrypoint)
}
