package cli

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/images"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
)

// TestRunBadInputExitsTwo is the bad-input matrix of `meshchaos run`: each input gets a one-line
// error naming the problem and what to do, exit code 2, and nothing is started (no cluster state,
// no run directory).
func TestRunBadInputExitsTwo(t *testing.T) {
	// Inputs checked after the local substrate's preflight (root, tools, binaries) need a
	// machine that passes it.
	preflight := local.Preflight()
	// A run directory that already holds a run.
	done := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(done, results.SummaryFile), []byte("{}\n"), 0o644))
	// An images directory from an interrupted `make images`: one tarball only.
	partial := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(partial, "pause.tar"), []byte("x"), 0o644))
	// A complete one, so the run gets as far as its run directory.
	complete := imagesDir(t)

	for _, tc := range []struct {
		name           string
		args           []string
		env            map[string]string
		want           string
		afterPreflight bool
	}{
		{name: "no experiment", args: []string{"run"}, want: "give one experiment"},
		{name: "unknown experiment", args: []string{"run", "nope"}, want: `unknown experiment "nope"`},
		{name: "unknown parameter", args: []string{"run", "cp-oom-restart", "--set", "nope=1"}, want: "--set: nope: unknown parameter"},
		{name: "malformed assignment", args: []string{"run", "cp-oom-restart", "--set", "rate"}, want: `--set: parameter setting "rate": use name=value`},
		{name: "zero rate", args: []string{"run", "cp-oom-restart", "--set", "rate=0"}, want: "from 1 to"},
		{name: "rate too high", args: []string{"run", "cp-oom-restart", "--set", "rate=99999999"}, want: "from 1 to"},
		{name: "quantity not a quantity", args: []string{"run", "cp-oom-restart", "--set", "cpCPULimit=abc"}, want: "cpCPULimit"},
		{name: "memory limit below the control plane's request", args: []string{"run", "endpoint-flap", "--set", "cpMemoryLimit=64Mi"},
			want: `cpMemoryLimit="64Mi": want a quantity from 128Mi to 64Gi`},
		{name: "negative duration", args: []string{"run", "cp-oom-restart", "--set", "duration=-1s"}, want: "duration"},
		{name: "steady not shorter than duration", args: []string{"run", "cp-oom-restart", "--set", "steady=2m"}, want: "must be shorter than duration"},
		{name: "rule between parameters", args: []string{"run", "cp-oom-restart", "--set", "hosts=5", "--set", "serviceEntries=4"}, want: "at most serviceEntries"},
		{name: "unknown substrate", args: []string{"run", "cp-oom-restart", "--substrate", "moon"}, want: "--substrate moon"},
		{name: "unknown control plane", args: []string{"run", "cp-oom-restart", "--cp", "foo"}, want: `--cp: unknown control plane "foo"`},
		{name: "unknown switch", args: []string{"run", "cp-oom-restart", "--cp", "reference:nope"}, want: `--cp: control plane reference:nope: unknown regression switch "nope"`},
		{name: "unknown flag", args: []string{"run", "cp-oom-restart", "--bogus"}, want: "unknown flag"},
		{name: "unknown keep policy", args: []string{"run", "cp-oom-restart", "--keep-cluster=sometimes"}, want: "want never, on-failure, always, true or false"},
		{name: "missing binary", args: []string{"run", "cp-oom-restart"}, env: map[string]string{"MESHCHAOS_KUBELET": "/nonexistent/kubelet"},
			want: "MESHCHAOS_KUBELET", afterPreflight: true},
		{name: "no images directory", args: []string{"run", "cp-oom-restart", "--images", "/nonexistent/images"}, want: "make images", afterPreflight: true},
		{name: "images missing", args: []string{"run", "cp-oom-restart", "--images", partial}, want: "lacks coredns.tar", afterPreflight: true},
		{name: "unknown xDS transport", args: []string{"run", "endpoint-flap", "--xds", "mtls", "--images", complete}, want: `--xds: xDS transport "mtls": use auto`, afterPreflight: true},
		{name: "run directory holds a run", args: []string{"run", "cp-oom-restart", "--out", done, "--images", complete}, want: "already holds a run", afterPreflight: true},
		{name: "run directory cannot be created", args: []string{"run", "cp-oom-restart", "--out", "/proc/meshchaos-run", "--images", complete}, want: "create run directory", afterPreflight: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.afterPreflight && preflight != nil {
				prereq.Missing(t, "checked after the preflight, which fails here: %v", preflight)
			}
			home := t.TempDir()
			t.Setenv("MESHCHAOS_HOME", home)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := os.Stat("runs")
			hadRuns := err == nil // the default run directory goes under runs/ here
			code, out := run(t, tc.args...)
			assert.Equal(t, 2, code, out)
			assert.Contains(t, out, tc.want)
			assertNothingStarted(t, home, !hadRuns)
		})
	}
}

// TestRunRefusesAFullDisk: a run directory on a full file system is refused before a cluster is up.
func TestRunRefusesAFullDisk(t *testing.T) {
	prereq.Root(t, "mounts a small tmpfs")
	if err := local.Preflight(); err != nil {
		prereq.Missing(t, "checked after the preflight, which fails here: %v", err)
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "meshchaos-test", mnt).CombinedOutput(); err != nil {
		prereq.Missing(t, "cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	// Fill it.
	f, err := os.Create(filepath.Join(mnt, "fill"))
	require.NoError(t, err)
	for {
		if _, err := f.Write(make([]byte, 32<<10)); err != nil {
			require.True(t, errors.Is(err, syscall.ENOSPC), "%v", err)
			break
		}
	}
	require.NoError(t, f.Close())

	home := t.TempDir()
	t.Setenv("MESHCHAOS_HOME", home)
	code, out := run(t, "run", "cp-oom-restart", "--out", filepath.Join(mnt, "run"), "--images", imagesDir(t))
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "not writable")
	assert.Contains(t, out, "no space left on device")
	assertNothingStarted(t, home, false)
}

// TestRunAsNonRootExitsTwo: the local substrate needs root, and says so before anything starts.
func TestRunAsNonRootExitsTwo(t *testing.T) {
	prereq.Root(t, "drops to another user")
	code, out := runAsNobody(t, "run", "cp-oom-restart", "--out", filepath.Join(t.TempDir(), "run"))
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "needs root")
}

// TestDefaultRunDirsAreDistinct: two runs of one experiment started in the same second get
// their own directories.
func TestDefaultRunDirsAreDistinct(t *testing.T) {
	t.Chdir(t.TempDir())
	a, err := claimRunDir(nil, "", "cp-oom-restart", "reference")
	require.NoError(t, err)
	b, err := claimRunDir(nil, "", "cp-oom-restart", "reference")
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
	assert.DirExists(t, a)
	assert.DirExists(t, b)
}

// imagesDir is a directory with a tarball for every catalog image (placeholders: a run refused
// before its cluster is up never reads them).
func imagesDir(t *testing.T) string {
	dir := t.TempDir()
	for _, s := range images.Catalog {
		require.NoError(t, os.WriteFile(images.TarPath(dir, s.Name), []byte("placeholder"), 0o644))
	}
	return dir
}

// assertNothingStarted: no cluster state under home and, with noRuns, no default run directory.
func assertNothingStarted(t *testing.T, home string, noRuns bool) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(home, "clusters"))
	if err == nil {
		assert.Empty(t, ents, "no cluster state")
	}
	if noRuns {
		assert.NoDirExists(t, "runs", "no run directory")
	}
}

// TestExistingFlagsNeedTheExistingSubstrate: --kubeconfig, --context, --allow-node-chaos and
// --allow-cp-chaos belong to --substrate existing; on every command that has them, giving one without it is exit
// 2 saying to add it, before anything is created (no cluster state, no output directory) —
// rather than ignored while a cluster is built on this host.
func TestExistingFlagsNeedTheExistingSubstrate(t *testing.T) {
	// The arguments each command needs besides the flag under test.
	needs := map[string][]string{
		"meshchaos run":           {"run", "cp-oom-restart"},
		"meshchaos suite":         {"suite", "nightly"},
		"meshchaos upgrade-check": {"upgrade-check", "--base", "reference", "--candidate", "reference:ungated"},
		"meshchaos fidelity":      {"fidelity"},
		"meshchaos capacity":      {"capacity"},
	}
	var found []string
	for _, c := range NewRoot().Commands() {
		if c.Flags().Lookup("substrate") != nil && c.Flags().Lookup("kubeconfig") != nil {
			found = append(found, c.CommandPath())
		}
	}
	require.ElementsMatch(t, found, slices.Collect(maps.Keys(needs)), "every command with the existing substrate's flags is tried here")

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600))
	for path, args := range needs {
		for _, flag := range [][]string{{"--kubeconfig", kubeconfig}, {"--context", "staging"}, {"--allow-node-chaos"}, {"--allow-cp-chaos"}} {
			for _, substrate := range [][]string{nil, {"--substrate", "local"}, {"--substrate", "kind"}} {
				home := t.TempDir()
				t.Setenv("MESHCHAOS_HOME", home)
				out := filepath.Join(t.TempDir(), "out")
				a := slices.Concat(args, flag, substrate, []string{"--out", out})
				code, msg := run(t, a...)
				assert.Equal(t, 2, code, "%s %v: %s", path, a, msg)
				assert.Contains(t, msg, flag[0]+" is for --substrate existing: add --substrate existing", "%s %v", path, a)
				assert.NoDirExists(t, out, "%s %v: nothing created", path, a)
				assertNothingStarted(t, home, false)
			}
		}
	}
}

// TestInstalledControlPlaneRefusals: attaching to an installed istiod is refused before anything
// is created when the experiment's faults on it are not allowed, and, once they are, when the
// installed istiod cannot be read (here: a cluster nobody listens for).
func TestInstalledControlPlaneRefusals(t *testing.T) {
	kc := unreachableKubeconfig(t, "staging")
	out := filepath.Join(t.TempDir(), "out")
	base := []string{"run", "cp-oom-restart", "--substrate", "existing", "--kubeconfig", kc, "--allow-node-chaos", "--cp", "istiod:installed", "--out", out}

	code, msg := run(t, base...)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "cp-oom-restart does this to the control plane, which is istiod:installed, installed before the run (not the run's own): OOM-kills it")
	assert.Contains(t, msg, "pass --allow-cp-chaos to allow it")
	assert.NoDirExists(t, out)

	code, msg = run(t, append(base, "--allow-cp-chaos")...)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "cp-oom-restart on istiod:installed: read the installed control plane's Deployment istio-system/istiod")
	assert.NoDirExists(t, out)

	// endpoint-flap does nothing to the control plane: no flag needed, the next check is the
	// installed istiod itself.
	code, msg = run(t, "run", "endpoint-flap", "--substrate", "existing", "--kubeconfig", kc, "--cp", "istiod:installed", "--out", out)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "endpoint-flap on istiod:installed: read the installed control plane's Deployment")
	assert.NoDirExists(t, out)
}

// TestExistingSubstrateReadsKUBECONFIG: with --substrate existing and no --kubeconfig, the
// cluster is the one $KUBECONFIG names, as for kubectl.
func TestExistingSubstrateReadsKUBECONFIG(t *testing.T) {
	kc := unreachableKubeconfig(t, "staging")
	t.Setenv("KUBECONFIG", kc)
	out := filepath.Join(t.TempDir(), "out")

	// A wrong --context is found in $KUBECONFIG's file, and the error says which file.
	code, msg := run(t, "run", "cp-oom-restart", "--substrate", "existing", "--context", "nope", "--out", out)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "$KUBECONFIG "+kc)
	assert.Contains(t, msg, `"nope"`)

	// A good one gets past the kubeconfig to the next check (node access), still before anything
	// is created.
	code, msg = run(t, "run", "cp-oom-restart", "--substrate", "existing", "--out", out)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "--allow-node-chaos")
	assert.NotContains(t, msg, "kubeconfig")
	assert.NoDirExists(t, out)

	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
	code, msg = run(t, "run", "cp-oom-restart", "--substrate", "existing", "--out", out)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "--kubeconfig: the existing substrate needs the cluster's kubeconfig and $KUBECONFIG (")
	assert.Contains(t, msg, "names no file that exists: fix $KUBECONFIG or name the kubeconfig file")
}
