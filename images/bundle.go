package images

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// keptBundles is how many bundles a cache directory keeps (clusters of other images
// directories, e.g. a test's own, use theirs at the same time).
const keptBundles = 4

// Bundle returns one archive holding the images of tarballs, each distinct layer once, and the
// tarballs it could not take (those that hold more or fewer than one tagged image), which are
// to be imported as they are. Most of meshchaos's images share one layer, the meshchaos binary:
// imported one tarball at a time, a node's containerd read, hashed and unpacked it six times
// (6.4 s of a 12.5 s cluster bring-up, 2026-11-26; one archive took 3.4 s).
//
// The archive is written once into cacheDir, named by the tarballs' paths, sizes and
// modification times (make images rewrites them), and reused until they change; cacheDir keeps
// the last few. Concurrent callers may both write it: each writes its own file and renames it
// into place.
func Bundle(tarballs []string, cacheDir string) (bundle string, rest []string, err error) {
	type entry struct {
		path string
		tag  name.Tag
	}
	var take []entry
	h := sha256.New()
	for _, p := range tarballs {
		tag, ok, err := singleTag(p)
		if err != nil {
			return "", nil, err
		}
		if !ok {
			rest = append(rest, p)
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return "", nil, err
		}
		take = append(take, entry{p, tag})
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", p, st.Size(), st.ModTime().UnixNano())
	}
	if len(take) < 2 {
		// Nothing to share: the tarballs as they are.
		return "", tarballs, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("image bundle cache: %w", err)
	}
	bundle = filepath.Join(cacheDir, "bundle-"+hex.EncodeToString(h.Sum(nil))[:16]+".tar")
	if _, err := os.Stat(bundle); err == nil {
		now := time.Now()
		_ = os.Chtimes(bundle, now, now) // most recently used: the last one pruned
		return bundle, rest, nil
	}
	refs := map[name.Reference]v1.Image{}
	for _, e := range take {
		img, err := tarball.ImageFromPath(e.path, &e.tag)
		if err != nil {
			return "", nil, fmt.Errorf("read image %s: %w", e.path, err)
		}
		refs[e.tag] = img
	}
	tmp, err := os.CreateTemp(cacheDir, ".bundle-*.tmp")
	if err != nil {
		return "", nil, fmt.Errorf("image bundle: %w", err)
	}
	defer os.Remove(tmp.Name())
	werr := tarball.MultiRefWrite(refs, tmp)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", nil, fmt.Errorf("write image bundle %s: %w", bundle, werr)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", nil, fmt.Errorf("image bundle: %w", err)
	}
	if err := os.Rename(tmp.Name(), bundle); err != nil {
		return "", nil, fmt.Errorf("image bundle: %w", err)
	}
	prune(cacheDir)
	return bundle, rest, nil
}

// Imports are the archives to import for tarballs: their Bundle first and the tarballs it
// could not take after it, or the tarballs as they are when there is nothing to share.
func Imports(tarballs []string, cacheDir string) ([]string, error) {
	bundle, rest, err := Bundle(tarballs, cacheDir)
	if err != nil || bundle == "" {
		return rest, err
	}
	return append([]string{bundle}, rest...), nil
}

// singleTag is the tag of the one image a docker archive holds (ok false when it holds more,
// none, or an untagged one).
func singleTag(path string) (name.Tag, bool, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return name.Tag{}, false, fmt.Errorf("read image %s: %w", path, err)
	}
	if len(m) != 1 || len(m[0].RepoTags) != 1 {
		return name.Tag{}, false, nil
	}
	tag, err := name.NewTag(m[0].RepoTags[0])
	if err != nil {
		return name.Tag{}, false, nil
	}
	return tag, true, nil
}

// prune keeps the keptBundles most recently used bundles of dir.
func prune(dir string) {
	all, _ := filepath.Glob(filepath.Join(dir, "bundle-*.tar"))
	type file struct {
		path string
		used time.Time
	}
	var fs []file
	for _, p := range all {
		if st, err := os.Stat(p); err == nil {
			fs = append(fs, file{p, st.ModTime()})
		}
	}
	slices.SortFunc(fs, func(a, b file) int { return b.used.Compare(a.used) })
	for _, f := range fs[min(len(fs), keptBundles):] {
		os.Remove(f.path)
	}
}
