package subject

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
)

// fakeIstiodBuilds lays out what `make istiod` writes for pins, the first the default.
func fakeIstiodBuilds(t *testing.T, pins ...string) string {
	root := t.TempDir()
	for _, p := range pins {
		require.NoError(t, os.MkdirAll(filepath.Join(root, p, "manifests"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, p, "pilot.tar"), []byte("x"), 0o644))
	}
	require.NoError(t, os.Symlink(pins[0], filepath.Join(root, "default")))
	t.Setenv(bins.IstiodEnv, root)
	return root
}

// --cp istiod is the default build under its own name; istiod@PIN a named one; what is not
// built is refused, saying how to build it.
func TestParseIstiod(t *testing.T) {
	fakeIstiodBuilds(t, "2026-08", "2026-04")
	cp, err := Parse("istiod")
	require.NoError(t, err)
	assert.Equal(t, "istiod@2026-08", cp.Name(), "a summary names the build that ran")
	cp, err = Parse("istiod@2026-04")
	require.NoError(t, err)
	assert.Equal(t, "istiod@2026-04", cp.Name())
	i := cp.(*Istiod)
	assert.Equal(t, "istio-system", i.Namespace())
	assert.Equal(t, "app=istiod", i.Selector())
	assert.Equal(t, "discovery", i.Container())
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.244.0.5"}}
	assert.Equal(t, "http://10.244.0.5:15014", i.AdminURL(pod))
	assert.Equal(t, "http://10.244.0.5:8080", i.PprofURL(pod), "pprof on istiod's debug port")
	assert.Equal(t, Metric{Name: "pilot_xds_pushes", Labels: map[string]string{"type": "cds"}}, i.Metrics()[FullPushes],
		"a full push is CDS sent; a push context is initialised for every push at the 2026-08 pin")
	var _ Remover = i
	var _ DebugAuth = i

	_, err = Parse("istiod@2025-01")
	assert.ErrorContains(t, err, `no build "2025-01"`)
	assert.ErrorContains(t, err, "builds: 2026-04, 2026-08")
	assert.ErrorContains(t, err, "make istiod")
	for _, bad := range []string{"istiod@", "istiod@../x", "istiod@a/b", "istiod@.hidden"} {
		_, err = Parse(bad)
		assert.ErrorContains(t, err, "want istiod@PIN", bad)
	}
	t.Setenv(bins.IstiodEnv, filepath.Join(t.TempDir(), "none"))
	_, err = Parse("istiod")
	assert.ErrorContains(t, err, "run 'make istiod'")
}
