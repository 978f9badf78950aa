// Package images builds the OCI images meshchaos runs on a cluster, without Docker: each image is
// an empty base plus one layer holding a static Go binary, written as a tarball that
// `ctr images import` (local substrate) and `kind load image-archive` (kind) both read.
package images

import (
	"archive/tar"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry and Tag name every image: meshchaos.local/<name>:dev. Nothing is ever pulled
// (imagePullPolicy: Never); the name only has to match what manifests use.
const (
	Registry = "meshchaos.local"
	Tag      = "dev"
)

// Self is the Spec.Binary value meaning "the running meshchaos executable".
const Self = "meshchaos"

// ControlPlane is the reference control plane's own binary (cmd/meshchaos-controlplane), which
// its image runs instead of Self: the heap measured in a run is then the control plane's, without
// the harness linked in.
const ControlPlane = "meshchaos-controlplane"

// Spec describes one image.
type Spec struct {
	// Name is the image name without registry and tag.
	Name string
	// Binary is the file name of the static executable in the binaries directory; Self means
	// the meshchaos binary itself (most workloads are meshchaos subcommands).
	Binary string
	// Args follow the binary in the entrypoint.
	Args []string
	// Make is the make target that puts Binary into the binaries directory, named when it is
	// missing (default "make images").
	Make string
}

// Ref is the image's full reference, e.g. meshchaos.local/echo:dev.
func (s Spec) Ref() string { return Ref(s.Name) }

// Ref returns the full reference of the named image.
func Ref(name string) string { return fmt.Sprintf("%s/%s:%s", Registry, name, Tag) }

// Entrypoint is the container's command.
func (s Spec) Entrypoint() []string { return append([]string{"/" + s.Binary}, s.Args...) }

// Catalog lists every image meshchaos builds. Add an image by appending its Spec.
var Catalog = []Spec{
	{Name: "pause", Binary: "pause"},
	{Name: "coredns", Binary: "coredns", Make: "make bins"},
	// Images run in pods: the workloads listen on ":PORT" there, the pod's own network namespace
	// (its IP and loopback). The commands' own defaults are loopback, for runs on the host; a
	// pod's args come after these and win.
	{Name: "echo", Binary: Self, Args: []string{"workload", "echo", "--addr", ":8080"}},
	// The reference control plane (controlplane/manifests deploys it), as a binary of its own.
	{Name: "controlplane", Binary: ControlPlane, Make: "make build"},
	{Name: "xdsproxy", Binary: Self, Args: []string{"workload", "xdsproxy"}},
	{Name: "startup-app", Binary: Self, Args: []string{"workload", "startup-app", "--addr", ":8080"}},
	{Name: "adsload", Binary: Self, Args: []string{"workload", "adsload", "--listen", ":8080"}},
	{Name: "grpc-client", Binary: Self, Args: []string{"workload", "grpc-xds-client", "--listen", ":8080"}},
	// The noisy neighbour (chaos.NoisyNeighbour); --cpus is set by the pod.
	{Name: "hog", Binary: Self, Args: []string{"workload", "hog"}},
}

// Lookup returns the catalog entry for name.
func Lookup(name string) (Spec, bool) {
	for _, s := range Catalog {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

// TarPath is where an image's tarball lives in an images directory.
func TarPath(dir, name string) string { return filepath.Join(dir, name+".tar") }

// Builder builds catalog images.
type Builder struct {
	// BinDir holds the binaries other than Self (pause, coredns, meshchaos-controlplane).
	BinDir string
	// Self is the meshchaos executable to package (default: the running one).
	Self string
	// layers caches one layer per binary: all meshchaos images share theirs.
	layers map[string]v1.Layer
}

// Build writes the tarball of each spec into outDir and returns the paths.
func (b *Builder) Build(outDir string, specs []Spec) ([]string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range specs {
		p := TarPath(outDir, s.Name)
		if err := b.buildOne(s, p); err != nil {
			return out, fmt.Errorf("image %s: %w", s.Name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func (b *Builder) binaryPath(s Spec) (string, error) {
	if s.Binary == Self {
		if b.Self != "" {
			return b.Self, nil
		}
		return os.Executable()
	}
	p := filepath.Join(b.BinDir, s.Binary)
	if _, err := os.Stat(p); err != nil {
		target := s.Make
		if target == "" {
			target = "make images"
		}
		return "", fmt.Errorf("binary %s missing: run '%s' (it builds it), or give the directory that holds it (--bin-dir)", p, target)
	}
	return p, nil
}

func (b *Builder) buildOne(s Spec, out string) error {
	bin, err := b.binaryPath(s)
	if err != nil {
		return err
	}
	layer, err := b.layer(s.Binary, bin)
	if err != nil {
		return err
	}
	img, err := image(layer, s.Entrypoint(), "/", "", map[string]string{"io.meshchaos.image": s.Name})
	if err != nil {
		return err
	}
	return WriteTarball(s.Ref(), img, out)
}

// image is the empty base plus layer, with entrypoint, PATH, user ("" = root) and labels.
func image(layer v1.Layer, entrypoint []string, path, user string, labels map[string]string) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config.Entrypoint = entrypoint
	cf.Config.Env = []string{"PATH=" + path, "TMPDIR=/tmp"}
	cf.Config.User = user
	cf.Config.Labels = labels
	return mutate.ConfigFile(img, cf)
}

// WriteTarball writes img, tagged ref, as a tarball `docker load` and containerd import read; out
// appears whole or not at all.
func WriteTarball(ref string, img v1.Image, out string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// layer returns the single layer for a catalog binary: /<name> (0755) and a world-writable /tmp.
func (b *Builder) layer(binName, path string) (v1.Layer, error) {
	if l, ok := b.layers[binName]; ok {
		return l, nil
	}
	l, err := binaryLayer(path, binName)
	if err != nil {
		return nil, err
	}
	if b.layers == nil {
		b.layers = map[string]v1.Layer{}
	}
	b.layers[binName] = l
	return l, nil
}

// binaryLayer is a layer holding the static executable at path as the file at (relative to the
// image's root, e.g. "usr/local/bin/pilot-discovery"; 0755, its parent directories 0755) and a
// world-writable /tmp. The tar is streamed from the file each time the layer is read, so a
// large binary is never held in memory.
func binaryLayer(path, at string) (v1.Layer, error) {
	if err := checkStatic(path); err != nil {
		return nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	// A fixed mtime keeps layer digests stable across builds of the same binary.
	mtime := time.Unix(0, 0)
	hdrs := []*tar.Header{{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: mtime}}
	for d := filepath.Dir(at); d != "."; d = filepath.Dir(d) {
		hdrs = append(hdrs, &tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime})
	}
	hdrs = append(hdrs, &tar.Header{Name: at, Typeflag: tar.TypeReg, Mode: 0o755, Size: fi.Size(), ModTime: mtime})
	// Sorted by name, a directory comes before what it holds.
	sort.Slice(hdrs, func(i, j int) bool { return hdrs[i].Name < hdrs[j].Name })
	write := func(w io.Writer) error {
		tw := tar.NewWriter(w)
		for _, h := range hdrs {
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
			if n != h.Size {
				return fmt.Errorf("%s changed while it was packaged", path)
			}
		}
		return tw.Close()
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(write(pw)) }()
		return pr, nil
	})
}

// Binary describes an image of one static executable that meshchaos does not build itself,
// such as istio's pilot-discovery (hack/istiod/build.sh packages it with 'meshchaos images
// binary'). Such images are not in the Catalog: nothing loads them into every cluster.
type Binary struct {
	// Ref is the image's full reference, e.g. meshchaos.local/istio/pilot:2026-08.
	Ref string
	// Path is the executable on this host.
	Path string
	// At is its absolute path in the image, e.g. /usr/local/bin/pilot-discovery: where the
	// manifests that run it expect it.
	At string
	// Args follow At in the entrypoint.
	Args []string
	// User is the image's default user, "UID[:GID]" ("" = root). Numeric: the image has no
	// /etc/passwd, and kubelet can check runAsNonRoot only against a numeric user.
	User string
	// Labels are the image config's labels.
	Labels map[string]string
}

var numericUser = regexp.MustCompile(`^[0-9]+(:[0-9]+)?$`)

// BuildBinary writes the image b describes as a tarball to out (as Builder does for catalog
// images: empty base, one layer with the binary and /tmp).
func BuildBinary(b Binary, out string) error {
	if !filepath.IsAbs(b.At) || filepath.Clean(b.At) != b.At || b.At == "/" {
		return fmt.Errorf("image path %q: want a clean absolute file path", b.At)
	}
	if _, err := name.NewTag(b.Ref); err != nil {
		return err
	}
	if b.User != "" && !numericUser.MatchString(b.User) {
		return fmt.Errorf("user %q: want a numeric UID or UID:GID (the image has no /etc/passwd)", b.User)
	}
	layer, err := binaryLayer(b.Path, b.At[1:])
	if err != nil {
		return err
	}
	img, err := image(layer, append([]string{b.At}, b.Args...), filepath.Dir(b.At), b.User, b.Labels)
	if err != nil {
		return err
	}
	return WriteTarball(b.Ref, img, out)
}

// checkStatic refuses dynamically linked binaries: an image has no libc to load them with.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; build it with CGO_ENABLED=0 ('make build')", path)
		}
	}
	return nil
}

// Missing lists the catalog images whose tarballs are not in dir, so a run can refuse to start
// (and say to run 'make images') before it brings a cluster up.
func Missing(dir string) []string {
	var out []string
	for _, s := range Catalog {
		if fi, err := os.Stat(TarPath(dir, s.Name)); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
			out = append(out, s.Name+".tar")
		}
	}
	return out
}
