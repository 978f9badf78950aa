// Package bins finds the executables the local substrate runs: etcd, the Kubernetes components,
// and coredns. Users who already have binaries point at them; everyone else runs `make bins`.
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

// EnvVar is the per-binary override, e.g. MESHCHAOS_KUBE_APISERVER for kube-apiserver.
func EnvVar(name string) string {
	return "MESHCHAOS_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Path returns the path of the named binary. It looks, in order, at the binary's own variable
// (EnvVar), $MESHCHAOS_BIN_DIR, $KUBEBUILDER_ASSETS, the repository's bin/ (found from the working
// directory upwards), and $PATH.
func Path(name string) (string, error) {
	if p := os.Getenv(EnvVar(name)); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvVar(name), p, err)
		}
		return p, nil
	}
	var tried []string
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
	return "", fmt.Errorf("%s not found (looked in %s and $PATH): run 'make bins', or set %s or MESHCHAOS_BIN_DIR",
		name, strings.Join(tried, ", "), EnvVar(name))
}

// All returns the paths of every named binary, or one error listing all that are missing.
func All(names ...string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	var missing, overridden []string
	for _, n := range names {
		p, err := Path(n)
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
		msg := fmt.Sprintf("missing binaries: %s: run 'make bins' (or set MESHCHAOS_BIN_DIR / KUBEBUILDER_ASSETS)", strings.Join(missing, ", "))
		if len(overridden) > 0 {
			msg += "; " + strings.Join(overridden, "; ")
		}
		return nil, errors.New(msg)
	}
	return out, nil
}

func searchDirs() []string {
	var dirs []string
	for _, v := range []string{"MESHCHAOS_BIN_DIR", "KUBEBUILDER_ASSETS"} {
		if d := os.Getenv(v); d != "" {
			dirs = append(dirs, d)
		}
	}
	if root, ok := repoRoot(); ok {
		dirs = append(dirs, filepath.Join(root, "bin"))
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe)) // bin/meshchaos sits next to the others
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
