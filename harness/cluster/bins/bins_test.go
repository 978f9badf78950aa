package bins

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPathPrefersPerBinaryVariable(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "own-apiserver")
	require.NoError(t, os.WriteFile(own, []byte("#!/bin/sh\n"), 0o755))
	shared := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(shared, KubeAPIServer), []byte("#!/bin/sh\n"), 0o755))

	t.Setenv("MESHCHAOS_BIN_DIR", shared)
	t.Setenv(EnvVar(KubeAPIServer), own)
	p, err := Path(KubeAPIServer)
	require.NoError(t, err)
	assert.Equal(t, own, p)

	t.Setenv(EnvVar(KubeAPIServer), "")
	p, err = Path(KubeAPIServer)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(shared, KubeAPIServer), p)
}

func TestPathRejectsNonExecutableOverride(t *testing.T) {
	f := filepath.Join(t.TempDir(), "etcd")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
	t.Setenv(EnvVar(Etcd), f)
	_, err := Path(Etcd)
	assert.ErrorContains(t, err, "not an executable")
}

func TestAllNamesEveryMissingBinary(t *testing.T) {
	t.Setenv("MESHCHAOS_BIN_DIR", t.TempDir())
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Setenv("PATH", t.TempDir())
	t.Chdir(t.TempDir())
	_, err := All("no-such-a", "no-such-b")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-a, no-such-b")
	assert.Contains(t, err.Error(), "make bins")
	assert.Equal(t, "MESHCHAOS_KUBE_CONTROLLER_MANAGER", EnvVar(KubeControllerManager))
}
