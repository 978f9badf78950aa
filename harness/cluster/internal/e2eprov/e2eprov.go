// Package e2eprov holds what the substrates' e2e-framework cluster providers (local, kind) share:
// Create's arguments, the file CreateWithConfig reads, and GenerateKubeconfig.
package e2eprov

import (
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// Config is the file CreateWithConfig reads ("nodes: 2").
type Config struct {
	Nodes int `json:"nodes"`
}

// ReadConfig reads a Config, refusing unknown fields.
func ReadConfig(file string) (Config, error) {
	var c Config
	b, err := os.ReadFile(file)
	if err != nil {
		return c, err
	}
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

// ParseArgs reads Create's arguments (--nodes=N) into nodes; provider names the provider in
// errors.
func ParseArgs(provider string, args []string, nodes *int) error {
	for _, a := range args {
		var n int
		if _, err := fmt.Sscanf(a, "--nodes=%d", &n); err == nil {
			*nodes = n
			continue
		}
		return fmt.Errorf("%s provider: unknown argument %q (supported: --nodes=N)", provider, a)
	}
	return nil
}

// GenerateKubeconfig is support.E2EClusterProvider's GenerateKubeconfig for a cluster whose
// kubeconfig is at path ("" before Create): it returns path, or writes a copy to args[0].
func GenerateKubeconfig(provider, path string, args ...string) (string, error) {
	if path == "" {
		return "", errors.New(provider + " provider: no cluster yet")
	}
	if len(args) == 0 {
		return path, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return args[0], os.WriteFile(args[0], b, 0o600)
}
