package images

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// archiveFiles lists the files of a tarball.
func archiveFiles(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var names []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		require.NoError(t, err)
		names = append(names, h.Name)
	}
}

func TestBundleHoldsEachImageAndEachLayerOnce(t *testing.T) {
	dir := t.TempDir()
	bin := buildStatic(t, dir)
	require.NoError(t, os.Rename(bin, filepath.Join(dir, "pause")))
	b := &Builder{BinDir: dir, Self: filepath.Join(dir, "pause")}
	out := filepath.Join(dir, "images")
	// echo and hog share their one layer (the same binary); pause has its own.
	paths, err := b.Build(out, []Spec{{Name: "pause", Binary: "pause"}, {Name: "echo", Binary: Self, Args: []string{"workload", "echo"}}, {Name: "hog", Binary: Self, Args: []string{"workload", "hog"}}})
	require.NoError(t, err)
	// An archive of two images is imported as it is.
	two := filepath.Join(out, "two.tar")
	r1, err := random.Image(64, 1)
	require.NoError(t, err)
	r2, err := random.Image(64, 1)
	require.NoError(t, err)
	require.NoError(t, tarball.MultiRefWriteToFile(two, map[name.Reference]v1.Image{name.MustParseReference("example.test/a:1"): r1, name.MustParseReference("example.test/b:1"): r2}))
	paths = append(paths, two)

	cache := filepath.Join(dir, "cache")
	bundle, rest, err := Bundle(paths, cache)
	require.NoError(t, err)
	assert.Equal(t, []string{two}, rest)
	require.FileExists(t, bundle)
	imports, err := Imports(paths, cache)
	require.NoError(t, err)
	assert.Equal(t, []string{bundle, two}, imports, "the bundle, then what it could not take")

	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(bundle) })
	require.NoError(t, err)
	var tags []string
	layers := map[string]bool{}
	for _, d := range m {
		tags = append(tags, d.RepoTags...)
		for _, l := range d.Layers {
			layers[l] = true
		}
	}
	assert.ElementsMatch(t, []string{"meshchaos.local/pause:dev", "meshchaos.local/echo:dev", "meshchaos.local/hog:dev"}, tags)
	assert.Len(t, layers, 2, "echo's and hog's shared layer once, pause's")
	var layerFiles int
	for _, f := range archiveFiles(t, bundle) {
		if strings.HasSuffix(f, ".tar.gz") {
			layerFiles++
		}
	}
	assert.Equal(t, 2, layerFiles, "each layer's bytes once in the archive")

	// Each image reads back whole, with its entrypoint.
	tag := name.MustParseReference("meshchaos.local/hog:dev").(name.Tag)
	img, err := tarball.ImageFromPath(bundle, &tag)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/meshchaos", "workload", "hog"}, cf.Config.Entrypoint)

	// The same tarballs: the same archive, not written again.
	st, err := os.Stat(bundle)
	require.NoError(t, err)
	again, _, err := Bundle(paths, cache)
	require.NoError(t, err)
	assert.Equal(t, bundle, again)
	st2, err := os.Stat(again)
	require.NoError(t, err)
	assert.True(t, os.SameFile(st, st2), "reused, not rewritten")

	// A rebuilt image (make images): a new archive.
	later := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(paths[1], later, later))
	fresh, _, err := Bundle(paths, cache)
	require.NoError(t, err)
	assert.NotEqual(t, bundle, fresh)
}

func TestBundleKeepsTheLastFewArchives(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, n := range []string{"a", "b"} {
		img, err := random.Image(64, 1)
		require.NoError(t, err)
		p := filepath.Join(dir, n+".tar")
		tag, err := name.NewTag("example.test/" + n + ":1")
		require.NoError(t, err)
		require.NoError(t, tarball.WriteToFile(p, tag, img))
		paths = append(paths, p)
	}
	cache := filepath.Join(dir, "cache")
	var made []string
	for i := range keptBundles + 2 {
		at := time.Now().Add(time.Duration(i) * time.Minute)
		require.NoError(t, os.Chtimes(paths[0], at, at))
		b, _, err := Bundle(paths, cache)
		require.NoError(t, err)
		made = append(made, b)
	}
	left, err := filepath.Glob(filepath.Join(cache, "bundle-*.tar"))
	require.NoError(t, err)
	assert.ElementsMatch(t, made[len(made)-keptBundles:], left, "the newest %d kept", keptBundles)
}

func TestBundleOfOneImageIsTheImage(t *testing.T) {
	dir := t.TempDir()
	img, err := random.Image(64, 1)
	require.NoError(t, err)
	p := filepath.Join(dir, "a.tar")
	require.NoError(t, tarball.WriteToFile(p, name.MustParseReference("example.test/a:1").(name.Tag), img))
	bundle, rest, err := Bundle([]string{p}, filepath.Join(dir, "cache"))
	require.NoError(t, err)
	assert.Empty(t, bundle)
	assert.Equal(t, []string{p}, rest)
	assert.NoDirExists(t, filepath.Join(dir, "cache"))
	imports, err := Imports([]string{p}, filepath.Join(dir, "cache"))
	require.NoError(t, err)
	assert.Equal(t, []string{p}, imports)
}
