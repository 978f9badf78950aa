// Package bins finds what the local substrate runs: the executables (etcd, the Kubernetes
// components, coredns) and the directory of image tarballs. Users who already have binaries point
// at them; everyone else runs `make bins` and `make images`, whose output the lookup finds by
// itself. It is the one place that knows the search order, so the CLI, the substrates and the
// tests agree, and nothing has to set environment variables to pass a directory along.
package bins

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Names of the binaries `make bins` builds.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubelet               = "kubelet"
	KubeProxy             = "kube-proxy"
	CoreDNS               = "coredns"
)

// Environment variables the lookup reads.
const (
	// BinDirEnv names a directory holding the binaries.
	BinDirEnv = "MESHCHAOS_BIN_DIR"
	// KubebuilderAssetsEnv is controller-runtime's envtest directory (etcd, kube-apiserver).
	KubebuilderAssetsEnv = "KUBEBUILDER_ASSETS"
	// ImagesEnv names the directory of image tarballs.
	ImagesEnv = "MESHCHAOS_IMAGES"
)

// EnvVar is the per-binary override, e.g. MESHCHAOS_KUBE_APISERVER for kube-apiserver.
func EnvVar(name string) string {
	return "MESHCHAOS_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Finder looks binaries up. The zero value searches the environment and make's layout.
type Finder struct {
	// Dir, when set, is searched before everything else: the value of a flag or config field
	// (e.g. the e2e-framework provider's WithPath). A binary missing from it is looked for in the
	// usual places, so Dir may hold only some of them (like envtest's etcd and kube-apiserver).
	Dir string
}

// Path returns the path of the named binary. It looks, in order, in f.Dir, at the binary's own
// variable (EnvVar; set but not executable is an error), in $MESHCHAOS_BIN_DIR,
// $KUBEBUILDER_ASSETS, the checkout's bin/ (found from the working directory upwards), the
// directory of the running executable (bin/meshchaos sits beside the others), and $PATH.
func (f Finder) Path(name string) (string, error) {
	var tried []string
	if f.Dir != "" {
		if p := filepath.Join(f.Dir, name); executable(p) == nil {
			return p, nil
		}
		tried = append(tried, f.Dir)
	}
	if p := os.Getenv(EnvVar(name)); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvVar(name), p, err)
		}
		return p, nil
	}
	for _, dir := range searchDirs() {
		p := filepath.Join(dir, name)
		if executable(p) == nil {
			return p, nil
		}
		tried = append(tried, dir)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found (looked in %s and $PATH): run 'make bins', or set %s or %s",
		name, strings.Join(tried, ", "), EnvVar(name), BinDirEnv)
}

// All returns the paths of every named binary, or one error listing all that are missing.
func (f Finder) All(names ...string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	var missing, overridden []string
	for _, n := range names {
		p, err := f.Path(n)
		if err != nil {
			missing = append(missing, n)
			if os.Getenv(EnvVar(n)) != "" {
				overridden = append(overridden, err.Error())
			}
			continue
		}
		out[n] = p
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("missing binaries: %s: run 'make bins' (or set %s / %s)", strings.Join(missing, ", "), BinDirEnv, KubebuilderAssetsEnv)
		if len(overridden) > 0 {
			msg += "; " + strings.Join(overridden, "; ")
		}
		return nil, errors.New(msg)
	}
	return out, nil
}

// Path is Finder{}.Path: the named binary, without an explicit directory.
func Path(name string) (string, error) { return Finder{}.Path(name) }

// All is Finder{}.All: every named binary, without an explicit directory.
func All(names ...string) (map[string]string, error) { return Finder{}.All(names...) }

// searchDirs are the directories Path tries after the per-binary variable, in order.
func searchDirs() []string {
	var dirs []string
	for _, v := range []string{BinDirEnv, KubebuilderAssetsEnv} {
		if d := os.Getenv(v); d != "" {
			dirs = append(dirs, d)
		}
	}
	return append(dirs, layoutDirs()...)
}

// ImagesDir returns the directory of image tarballs (<name>.tar, from `make images`): explicit
// (a --images flag or config field) if set, else $MESHCHAOS_IMAGES if set (either must exist), else
// the checkout's bin/images (found from the working directory upwards, so a meshchaos binary
// anywhere finds it when run inside the checkout), else images/ beside the running executable.
// The result is absolute.
func ImagesDir(explicit string) (string, error) {
	const fix = "run 'make images' or pass --images / set " + ImagesEnv
	if explicit != "" {
		return existingDir(explicit, fix)
	}
	if d := os.Getenv(ImagesEnv); d != "" {
		dir, err := existingDir(d, fix)
		if err != nil {
			return "", fmt.Errorf("%s: %w", ImagesEnv, err)
		}
		return dir, nil
	}
	var tried []string
	for _, d := range layoutDirs() {
		d = filepath.Join(d, "images")
		if dir, err := existingDir(d, fix); err == nil {
			return dir, nil
		}
		tried = append(tried, d)
	}
	if len(tried) == 0 {
		return "", errors.New("no image directory: " + fix)
	}
	return "", fmt.Errorf("no image directory (looked in %s): %s", strings.Join(tried, ", "), fix)
}

// layoutDirs are where `make` puts its output, most specific first: the checkout's bin/, then the
// directory of the running executable.
func layoutDirs() []string {
	var dirs []string
	if root, ok := repoRoot(); ok {
		dirs = append(dirs, filepath.Join(root, "bin"))
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	return dirs
}

// repoRoot walks up from the working directory to the meshchaos module root.
func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/meshchaos/meshchaos\n") {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func existingDir(dir, fix string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("image directory %s: %w", dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("image directory %s does not exist: %s", abs, fix)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("image directory %s is not a directory: %s", abs, fix)
	}
	return abs, nil
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// IstiodEnv overrides the directory `make istiod` writes its builds into (one directory per pin).
const IstiodEnv = "MESHCHAOS_ISTIOD"

// IstiodRoot returns the directory of istiod builds (bin/istiod from `make istiod`):
// $MESHCHAOS_ISTIOD if set, else istiod/ in the checkout's bin/ or beside the running
// executable.
func IstiodRoot() (string, error) {
	const fix = "run 'make istiod' (it builds istiod from istio's source) or set " + IstiodEnv
	if d := os.Getenv(IstiodEnv); d != "" {
		dir, err := existingDir(d, fix)
		if err != nil {
			return "", fmt.Errorf("%s: %w", IstiodEnv, err)
		}
		return dir, nil
	}
	var tried []string
	for _, d := range layoutDirs() {
		d = filepath.Join(d, "istiod")
		if dir, err := existingDir(d, fix); err == nil {
			return dir, nil
		}
		tried = append(tried, d)
	}
	return "", fmt.Errorf("no istiod build (looked in %s): %s", strings.Join(tried, ", "), fix)
}

// IstiodPins lists the pins built under root (their directories; "default" is a link to one).
func IstiodPins(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var pins []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			pins = append(pins, e.Name())
		}
	}
	return pins
}
