package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeState makes a cluster state directory (owner record, a pid file) under a fresh home.
func fakeState(t *testing.T, prefix string) layout {
	t.Helper()
	l := layout{name: fmt.Sprintf("%s%d", prefix, os.Getpid()%100000), home: t.TempDir()}
	require.NoError(t, os.MkdirAll(l.logDir(), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(l.dir(), "owner.json"), []byte(`{"pid":1}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(l.logDir(), "n1-containerd.pid"), []byte("12345"), 0o644))
	return l
}

// A failed step keeps the state directory, through which 'cluster down --all' and --stale find
// the cluster and its pid files lead to what is left; the error says how to finish. The steps
// after the failed one still run.
func TestTeardownKeepsTheStateDirectoryWhenAStepFailed(t *testing.T) {
	l := fakeState(t, "tk")
	var ran []string
	steps := []step{
		{"first", func() error { ran = append(ran, "first"); return nil }},
		{"unmount", func() error { ran = append(ran, "unmount"); return errors.New("device busy") }},
		{"last", func() error { ran = append(ran, "last"); return nil }},
	}
	err := runTeardown(l, steps, t.Logf)
	require.Error(t, err)
	assert.Equal(t, []string{"first", "unmount", "last"}, ran)
	assert.ErrorContains(t, err, "unmount: device busy")
	assert.ErrorContains(t, err, "the state directory "+l.dir()+" is kept")
	// The temporary home is not the default one: the command names it.
	assert.ErrorContains(t, err, "'MESHCHAOS_HOME="+l.home+" meshchaos cluster down --name "+l.name+"'")
	assert.FileExists(t, filepath.Join(l.dir(), "owner.json"))
	assert.FileExists(t, filepath.Join(l.logDir(), "n1-containerd.pid"))

	// Under the default home, the command is just the name.
	t.Setenv("MESHCHAOS_HOME", l.home)
	assert.Equal(t, "meshchaos cluster down --name "+l.name, downCommand(l))
}

// When every step succeeded (and nothing of the cluster is left) the state directory goes.
func TestTeardownRemovesTheStateDirectoryWhenEveryStepSucceeded(t *testing.T) {
	l := fakeState(t, "tr")
	ok := func() error { return nil }
	require.NoError(t, runTeardown(l, []step{{"a", ok}, {"b", ok}}, t.Logf))
	assert.NoDirExists(t, l.dir())
}

// The shared device-plugins socket is released only after every process of the cluster (its
// kubelets above all) is stopped, and before the state directory goes.
func TestTeardownReleasesTheDevicePluginSocketAfterTheKubeletsStopped(t *testing.T) {
	l := fakeState(t, "to")
	var names []string
	for _, s := range teardownSteps(context.Background(), l, t.Logf) {
		names = append(names, s.what)
	}
	release := slices.Index(names, "release kubelet device-plugins socket")
	require.GreaterOrEqual(t, release, 0, "%q", names)
	for _, before := range []string{"stop kubelets and controllers", "kill containers", "stop containerd", "stop shims", "stop kube-apiserver and etcd", "stop remaining components", "stop strays"} {
		i := slices.Index(names, before)
		require.GreaterOrEqual(t, i, 0, before)
		assert.Less(t, i, release, before)
	}
	assert.NotContains(t, names, "remove state", "runTeardown removes it, after the steps succeeded")
}
