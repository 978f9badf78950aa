package e2eprov

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArgsConfigAndKubeconfig(t *testing.T) {
	n := 1
	require.NoError(t, ParseArgs("kind", []string{"--nodes=3"}, &n))
	assert.Equal(t, 3, n)
	err := ParseArgs("kind", []string{"--image=x"}, &n)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `kind provider: unknown argument "--image=x"`)
	assert.Equal(t, 3, n, "a refused argument changes nothing")

	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(good, []byte("nodes: 2\n"), 0o600))
	require.NoError(t, os.WriteFile(bad, []byte("nodes: 2\nworkers: 3\n"), 0o600))
	c, err := ReadConfig(good)
	require.NoError(t, err)
	assert.Equal(t, 2, c.Nodes)
	_, err = ReadConfig(bad)
	assert.ErrorContains(t, err, "workers", "unknown fields are refused, not ignored")

	_, err = GenerateKubeconfig("kind", "")
	assert.ErrorContains(t, err, "no cluster yet")
	kc := filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte("apiVersion: v1\n"), 0o600))
	got, err := GenerateKubeconfig("kind", kc)
	require.NoError(t, err)
	assert.Equal(t, kc, got)
	cp := filepath.Join(dir, "copy")
	got, err = GenerateKubeconfig("kind", kc, cp)
	require.NoError(t, err)
	assert.Equal(t, cp, got)
	b, err := os.ReadFile(cp)
	require.NoError(t, err)
	assert.Equal(t, "apiVersion: v1\n", string(b))
}
