package existing

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeKubeconfig writes a kubeconfig whose current context "ctx-NAME" points at server, with a
// second context "other" pointing at server+"/other".
func writeKubeconfig(t *testing.T, path, name, server string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c-`+name+`
  cluster: {server: "`+server+`"}
- name: other
  cluster: {server: "`+server+`/other"}
users:
- name: u
  user: {token: t}
contexts:
- name: ctx-`+name+`
  context: {cluster: c-`+name+`, user: u}
- name: other
  context: {cluster: other, user: u}
current-context: ctx-`+name+`
`), 0o600))
}

// TestRESTConfigFindsTheKubeconfigAsKubectlDoes: without Kubeconfig, RESTConfig reads the files
// $KUBECONFIG lists (merged, missing ones skipped), honours Context there too, and says where the
// config came from when it is wrong; an explicit Kubeconfig wins.
func TestRESTConfigFindsTheKubeconfigAsKubectlDoes(t *testing.T) {
	env := filepath.Join(t.TempDir(), "kc")
	writeKubeconfig(t, env, "env", "https://env.example:6443")
	t.Setenv("KUBECONFIG", env)
	cfg, err := Substrate{}.RESTConfig()
	require.NoError(t, err, "$KUBECONFIG")
	assert.Equal(t, "https://env.example:6443", cfg.Host)

	cfg, err = Substrate{Context: "other"}.RESTConfig()
	require.NoError(t, err)
	assert.Equal(t, "https://env.example:6443/other", cfg.Host, "--context applies to $KUBECONFIG's file")
	_, err = Substrate{Context: "nope"}.RESTConfig()
	assert.ErrorContains(t, err, "$KUBECONFIG "+env, "the error names where the config came from")
	assert.NotContains(t, err.Error(), "\n", "one line")

	explicit := filepath.Join(t.TempDir(), "explicit")
	writeKubeconfig(t, explicit, "explicit", "https://explicit.example:6443")
	cfg, err = Substrate{Kubeconfig: explicit}.RESTConfig()
	require.NoError(t, err)
	assert.Equal(t, "https://explicit.example:6443", cfg.Host, "--kubeconfig wins over $KUBECONFIG")

	// A list, as kubectl merges it: a missing entry is skipped.
	absent := filepath.Join(t.TempDir(), "absent")
	t.Setenv("KUBECONFIG", absent+string(os.PathListSeparator)+env)
	cfg, err = Substrate{}.RESTConfig()
	require.NoError(t, err)
	assert.Equal(t, "https://env.example:6443", cfg.Host)

	// $KUBECONFIG naming no file: kubectl does not fall back to ~/.kube/config, nor do we.
	t.Setenv("KUBECONFIG", absent)
	_, err = Substrate{}.RESTConfig()
	assert.ErrorContains(t, err, "needs the cluster's kubeconfig")
	assert.ErrorContains(t, err, "$KUBECONFIG ("+absent+") names no file that exists")
	assert.ErrorIs(t, err, ErrNoKubeconfig)
}

// TestRESTConfigFallsBackToHomeKubeconfig: with neither Kubeconfig nor $KUBECONFIG, RESTConfig
// reads ~/.kube/config, and without one says what to do. clientcmd finds the home directory
// when the process starts, so each case runs in a child test process with its own $HOME.
func TestRESTConfigFallsBackToHomeKubeconfig(t *testing.T) {
	if os.Getenv("MESHCHAOS_TEST_HOME_KUBECONFIG") == "child" {
		cfg, err := Substrate{}.RESTConfig()
		if want := os.Getenv("MESHCHAOS_TEST_WANT_HOST"); want != "" {
			require.NoError(t, err)
			assert.Equal(t, want, cfg.Host)
			return
		}
		assert.ErrorContains(t, err, "needs the cluster's kubeconfig")
		assert.ErrorContains(t, err, "name its file, set $KUBECONFIG, or create "+filepath.Join(os.Getenv("HOME"), ".kube", "config"))
		assert.ErrorIs(t, err, ErrNoKubeconfig)
		return
	}
	for _, want := range []string{"", "https://home.example:6443"} {
		home := t.TempDir()
		if want != "" {
			writeKubeconfig(t, filepath.Join(home, ".kube", "config"), "home", want)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestRESTConfigFallsBackToHomeKubeconfig$", "-test.count=1")
		cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG=", "MESHCHAOS_TEST_HOME_KUBECONFIG=child", "MESHCHAOS_TEST_WANT_HOST="+want)
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "~/.kube/config %q: %s", want, out)
	}
}
