// Package nodeimage builds a kind node image without a registry: a Debian root filesystem (from
// debootstrap, see hack/kindnode/rootfs.sh) with systemd, containerd, runc and the CNI plugins,
// plus our Kubernetes binaries and, under /kind/images, the control-plane, etcd, CoreDNS and pause
// images built with go-containerregistry under the names kubeadm expects. A oneshot unit imports
// those into the node's containerd before kubelet starts, so kubeadm never pulls.
//
// What kind requires of a node image (learned from kind's images/base and pkg/cluster): an
// entrypoint that prepares cgroups and mounts and execs systemd, logging "detected cgroup v1" on
// cgroup v1 hosts; /kind/version with the Kubernetes version; kubeadm, kubelet and kubectl on PATH;
// containerd with the CRI plugin at /run/containerd/containerd.sock; kubelet as a systemd unit that
// starts once kubeadm wrote /var/lib/kubelet/config.yaml; ctr for `kind load`.
package nodeimage

import (
	"archive/tar"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/meshchaos/meshchaos/images"
)

//go:embed files
var files embed.FS

// Config says what to build from.
type Config struct {
	// Rootfs is the Debian root filesystem tarball (hack/kindnode/rootfs.sh).
	Rootfs string
	// BinDir holds kubeadm, kubelet, kubectl, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kube-proxy, etcd, coredns, pause and runcwrap.
	BinDir string
	// Version is the Kubernetes version of the binaries, e.g. v1.36.4.
	Version string
	// Ref names the node image, e.g. meshchaos.local/kind-node:v1.36.4.
	Ref string
	// WorkDir holds intermediate files (the component images, the overlay layer).
	WorkDir string
	// Inputs is kept as the label io.meshchaos.inputs (hack/kindnode/image.sh: a digest of the
	// inputs, to skip a rebuild).
	Inputs string
	// Logf reports progress.
	Logf func(string, ...any)
}

// component binaries by the image name kubeadm uses for them.
var components = map[string]string{
	"kube-apiserver":          "kube-apiserver",
	"kube-controller-manager": "kube-controller-manager",
	"kube-scheduler":          "kube-scheduler",
	"kube-proxy":              "kube-proxy",
	"etcd":                    "etcd",
	"coredns":                 "coredns",
	"pause":                   "pause",
}

// mtime is fixed so the same inputs give the same layer digests.
var mtime = time.Unix(0, 0)

// Build writes the node image as a Docker-loadable tarball to out.
func Build(c Config, out string) error {
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(filepath.Join(c.WorkDir, "images"), 0o755); err != nil {
		return err
	}
	refs, err := KubeadmImages(filepath.Join(c.BinDir, "kubeadm"), c.Version)
	if err != nil {
		return err
	}
	var imageTars []string
	var pause string
	for _, ref := range refs {
		comp := componentOf(ref)
		bin, ok := components[comp]
		if !ok {
			return fmt.Errorf("kubeadm %s wants image %s, which this builder does not know", c.Version, ref)
		}
		// kube-proxy calls iptables and friends: it gets the node's Debian as its base.
		base := ""
		if comp == "kube-proxy" {
			base = c.Rootfs
		}
		p := filepath.Join(c.WorkDir, "images", comp+".tar")
		c.Logf("nodeimage: %s (%s)", ref, bin)
		if err := componentImage(ref, filepath.Join(c.BinDir, bin), base, p); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		imageTars = append(imageTars, p)
		if comp == "pause" {
			pause = ref
		}
	}
	overlay := filepath.Join(c.WorkDir, "overlay.tar")
	c.Logf("nodeimage: node overlay (binaries, units, /kind)")
	if err := writeOverlay(c, pause, imageTars, overlay); err != nil {
		return err
	}
	base, err := tarball.LayerFromFile(c.Rootfs, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return err
	}
	top, err := tarball.LayerFromFile(overlay, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, base, top)
	if err != nil {
		return err
	}
	img, err = withConfig(img, func(cf *v1.Config) {
		cf.Entrypoint = []string{"/usr/local/bin/entrypoint", "/sbin/init"}
		cf.Env = []string{"container=docker", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		// systemd's signal for an orderly shutdown.
		cf.StopSignal = "SIGRTMIN+3"
		cf.Labels = map[string]string{"io.meshchaos.image": "kind-node", "io.meshchaos.kubernetes": c.Version, "io.meshchaos.inputs": c.Inputs}
	})
	if err != nil {
		return err
	}
	c.Logf("nodeimage: writing %s", out)
	return images.WriteTarball(c.Ref, img, out)
}

// KubeadmImages asks kubeadm which images a control plane of version needs.
func KubeadmImages(kubeadm, version string) ([]string, error) {
	b, err := exec.Command(kubeadm, "config", "images", "list", "--kubernetes-version", version).Output()
	if err != nil {
		return nil, fmt.Errorf("%s config images list: %w", kubeadm, err)
	}
	return strings.Fields(string(b)), nil
}

// componentOf is the last path element of an image reference without its tag:
// registry.k8s.io/coredns/coredns:v1.12.1 → coredns.
func componentOf(ref string) string {
	s := path.Base(ref)
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	return s
}

// componentImage writes an image holding bin at /usr/local/bin/NAME (its entrypoint), on top of
// the base rootfs tarball if one is given.
func componentImage(ref, bin, base, out string) error {
	binName := filepath.Base(bin)
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("%s missing: run 'make bins' ('make images' for pause)", bin)
	}
	layerTar := out + ".layer"
	defer os.Remove(layerTar)
	err = writeTar(layerTar, []entry{
		{hdr: dir("tmp/", 0o1777)},
		{hdr: dir("usr/", 0o755)}, {hdr: dir("usr/local/", 0o755)}, {hdr: dir("usr/local/bin/", 0o755)},
		{hdr: &tar.Header{Name: "usr/local/bin/" + binName, Typeflag: tar.TypeReg, Mode: 0o755, Size: fi.Size(), ModTime: mtime}, file: bin},
	})
	if err != nil {
		return err
	}
	var layers []v1.Layer
	if base != "" {
		l, err := tarball.LayerFromFile(base, tarball.WithCompressionLevel(gzip.BestSpeed))
		if err != nil {
			return err
		}
		layers = append(layers, l)
	}
	l, err := tarball.LayerFromFile(layerTar, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, append(layers, l)...)
	if err != nil {
		return err
	}
	img, err = withConfig(img, func(cf *v1.Config) {
		cf.Entrypoint = []string{"/usr/local/bin/" + binName}
		cf.Env = []string{"PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"}
	})
	if err != nil {
		return err
	}
	return images.WriteTarball(ref, img, out)
}

func withConfig(img v1.Image, set func(*v1.Config)) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	set(&cf.Config)
	return mutate.ConfigFile(img, cf)
}

// writeOverlay writes the layer that turns the Debian rootfs into a kind node.
func writeOverlay(c Config, pause string, imageTars []string, out string) error {
	containerd, err := files.ReadFile("files/containerd.toml")
	if err != nil {
		return err
	}
	containerd = []byte(strings.ReplaceAll(string(containerd), "@PAUSE@", pause))
	var es []entry
	add := func(e entry) { es = append(es, e) }
	for _, d := range []string{"etc/", "etc/containerd/", "etc/systemd/", "etc/systemd/system/",
		"etc/systemd/system/multi-user.target.wants/", "etc/kubernetes/", "etc/kubernetes/manifests/",
		"etc/cni/", "etc/cni/net.d/", "kind/", "kind/bin/", "kind/images/", "usr/", "usr/bin/", "usr/local/",
		"usr/local/bin/"} {
		add(entry{hdr: dir(d, 0o755)})
	}
	embedded := map[string]string{ // image path → files/NAME
		"usr/local/bin/entrypoint":                    "entrypoint",
		"kind/bin/import-images":                      "import-images",
		"etc/systemd/system/containerd.service":       "containerd.service",
		"etc/systemd/system/kubelet.service":          "kubelet.service",
		"etc/systemd/system/kubelet.slice":            "kubelet.slice",
		"etc/systemd/system/meshchaos-images.service": "images.service",
	}
	for dst, src := range embedded {
		b, err := files.ReadFile("files/" + src)
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if strings.Contains(dst, "/bin/") {
			mode = 0o755
		}
		add(entry{hdr: &tar.Header{Name: dst, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(b)), ModTime: mtime}, data: b})
	}
	add(entry{hdr: &tar.Header{Name: "etc/containerd/config.toml", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(containerd)), ModTime: mtime}, data: containerd})
	version := []byte(c.Version + "\n")
	add(entry{hdr: &tar.Header{Name: "kind/version", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(version)), ModTime: mtime}, data: version})
	for _, unit := range []string{"containerd.service", "kubelet.service", "meshchaos-images.service"} {
		add(entry{hdr: &tar.Header{Name: "etc/systemd/system/multi-user.target.wants/" + unit, Typeflag: tar.TypeSymlink,
			Linkname: "/etc/systemd/system/" + unit, ModTime: mtime}})
	}
	bins := map[string]string{"usr/bin/kubeadm": "kubeadm", "usr/bin/kubelet": "kubelet", "usr/bin/kubectl": "kubectl",
		"usr/local/bin/runcwrap": "runcwrap"}
	for dst, b := range bins {
		e, err := fileEntry(dst, filepath.Join(c.BinDir, b), 0o755)
		if err != nil {
			return err
		}
		add(e)
	}
	for _, t := range imageTars {
		e, err := fileEntry("kind/images/"+filepath.Base(t), t, 0o644)
		if err != nil {
			return err
		}
		add(e)
	}
	return writeTar(out, es)
}

// entry is one tar member: data in memory, or the contents of file.
type entry struct {
	hdr  *tar.Header
	data []byte
	file string
}

func dir(name string, mode int64) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode, ModTime: mtime}
}

func fileEntry(dst, src string, mode int64) (entry, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return entry{}, fmt.Errorf("%s missing: %w", src, err)
	}
	return entry{hdr: &tar.Header{Name: dst, Typeflag: tar.TypeReg, Mode: mode, Size: fi.Size(), ModTime: mtime}, file: src}, nil
}

// writeTar writes the entries sorted by name (parents before children).
func writeTar(out string, es []entry) error {
	sort.Slice(es, func(i, j int) bool { return es[i].hdr.Name < es[j].hdr.Name })
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, e := range es {
		if err := tw.WriteHeader(e.hdr); err != nil {
			f.Close()
			return err
		}
		if e.hdr.Typeflag != tar.TypeReg {
			continue
		}
		if e.file == "" {
			_, err = tw.Write(e.data)
		} else {
			err = copyFile(tw, e.file)
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", e.hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
