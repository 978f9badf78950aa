package images

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBuildBinaryImage packages a tiny static program as hack/istiod/build.sh packages
// pilot-discovery: the tarball is tagged with the reference asked for, and the binary is at the
// entrypoint's path, executable, byte for byte, under directories a non-root user can traverse.
func TestBuildBinaryImage(t *testing.T) {
	dir := t.TempDir()
	bin := buildStatic(t, dir)
	const ref = "meshchaos.local/istio/pilot:test"
	out := filepath.Join(dir, "pilot.tar")
	require.NoError(t, BuildBinary(Binary{
		Ref: ref, Path: bin, At: "/usr/local/bin/pilot-discovery", Args: []string{"--x"},
		User: "1337:1337", Labels: map[string]string{"io.meshchaos.image": "istio/pilot"},
	}, out))

	tag, err := name.NewTag(ref)
	require.NoError(t, err)
	img, err := tarball.ImageFromPath(out, &tag) // fails unless the tarball holds this tag
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/local/bin/pilot-discovery", "--x"}, cf.Config.Entrypoint)
	assert.Equal(t, "1337:1337", cf.Config.User)
	assert.Equal(t, "istio/pilot", cf.Config.Labels["io.meshchaos.image"])
	assert.Equal(t, "amd64", cf.Architecture)

	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	want, err := os.ReadFile(bin)
	require.NoError(t, err)
	modes := map[string]int64{}
	var order []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		modes[h.Name] = h.Mode
		order = append(order, h.Name)
		if h.Name == "usr/local/bin/pilot-discovery" {
			assert.Equal(t, byte(tar.TypeReg), h.Typeflag)
			got, err := io.ReadAll(tr)
			require.NoError(t, err)
			assert.Equal(t, want, got, "the binary in the image differs from the one packaged")
		}
	}
	assert.Equal(t, []string{"tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/pilot-discovery"}, order)
	assert.Equal(t, int64(0o755), modes["usr/local/bin/pilot-discovery"])
	assert.Equal(t, int64(0o755), modes["usr/local/bin/"])
	assert.Equal(t, int64(0o1777), modes["tmp/"])

	// Two builds of the same binary are the same image (a rebuild changes nothing on a node).
	out2 := filepath.Join(dir, "again.tar")
	require.NoError(t, BuildBinary(Binary{
		Ref: ref, Path: bin, At: "/usr/local/bin/pilot-discovery", Args: []string{"--x"},
		User: "1337:1337", Labels: map[string]string{"io.meshchaos.image": "istio/pilot"},
	}, out2))
	img2, err := tarball.ImageFromPath(out2, &tag)
	require.NoError(t, err)
	d1, err := img.Digest()
	require.NoError(t, err)
	d2, err := img2.Digest()
	require.NoError(t, err)
	assert.Equal(t, d1, d2)
}

func TestBuildBinaryRefuses(t *testing.T) {
	dir := t.TempDir()
	bin := buildStatic(t, dir)
	out := filepath.Join(dir, "x.tar")
	ok := Binary{Ref: "meshchaos.local/x:y", Path: bin, At: "/x"}
	for _, c := range []struct {
		name string
		edit func(*Binary)
		err  string
	}{
		{"relative path in the image", func(b *Binary) { b.At = "usr/bin/x" }, "absolute"},
		{"unclean path in the image", func(b *Binary) { b.At = "/usr/../x" }, "absolute"},
		{"named user", func(b *Binary) { b.User = "istio-proxy" }, "numeric"},
		{"bad reference", func(b *Binary) { b.Ref = "UPPER/x:y" }, "repository"},
		{"dynamic binary", func(b *Binary) { b.Path = "/bin/sh" }, "dynamically linked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := ok
			c.edit(&b)
			assert.ErrorContains(t, BuildBinary(b, out), c.err)
			assert.NoFileExists(t, out)
		})
	}
}
