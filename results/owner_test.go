package results

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDirectoriesAre0755WhateverTheUmask: the directories meshchaos makes for its user to read
// (run directories, charts, comparisons, history) are 0755 and its reports 0644 even under a
// umask that would make them the writer's alone.
func TestDirectoriesAre0755WhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()

	require.NoError(t, MkdirAll(filepath.Join(dir, "a", "b")))
	var made Created
	require.NoError(t, made.MkdirAll(filepath.Join(dir, "c", "d")))
	require.NoError(t, made.Mkdir(filepath.Join(dir, "c", "e")))
	require.NoError(t, WriteFileAtomic(filepath.Join(dir, "f", "report.md"), []byte("x")))
	for _, d := range []string{"a", "a/b", "c", "c/d", "c/e", "f"} {
		fi, err := os.Stat(filepath.Join(dir, d))
		require.NoError(t, err)
		assert.Equal(t, DirMode, fi.Mode().Perm(), d)
	}
	fi, err := os.Stat(filepath.Join(dir, "f", "report.md"))
	require.NoError(t, err)
	assert.Equal(t, FileMode, fi.Mode().Perm())
}

// TestCreatedRemovesOnlyItsEmptyDirectories: a refused command removes the directories it made
// while they are empty, innermost first, and nothing else: not a directory that was there
// before, not one something was written into, nor the parents of that one.
func TestCreatedRemovesOnlyItsEmptyDirectories(t *testing.T) {
	dir := t.TempDir()
	before := filepath.Join(dir, "before")
	require.NoError(t, os.Mkdir(before, 0o755))

	var made Created
	require.NoError(t, made.MkdirAll(filepath.Join(before, "new", "run-1")))
	require.NoError(t, made.Mkdir(filepath.Join(before, "new", "run-2")))
	require.NoError(t, made.MkdirAll(filepath.Join(dir, "kept", "run-3")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kept", "run-3", "summary.json"), []byte("{}"), 0o644))
	assert.Equal(t, []string{filepath.Join(before, "new"), filepath.Join(before, "new", "run-1"), filepath.Join(before, "new", "run-2"),
		filepath.Join(dir, "kept"), filepath.Join(dir, "kept", "run-3")}, made.Paths(), "what it created, in order; not what was there")

	made.RemoveEmpty()
	assert.DirExists(t, before, "there before: not ours to remove")
	assert.NoDirExists(t, filepath.Join(before, "new"), "made and left empty")
	assert.FileExists(t, filepath.Join(dir, "kept", "run-3", "summary.json"), "holds a file: stays")
	assert.Equal(t, []string{filepath.Join(dir, "kept"), filepath.Join(dir, "kept", "run-3")}, made.Paths(), "what stayed is still recorded")

	// A nil Created creates without recording.
	var none *Created
	require.NoError(t, none.MkdirAll(filepath.Join(dir, "x")))
	none.RemoveEmpty()
	assert.DirExists(t, filepath.Join(dir, "x"))
	assert.Nil(t, none.Paths())
}

// asInvoker makes GiveToInvoker act as under sudo for uid:gid and records every path it
// changes (really changing it: to the test's own user, so that no second user is needed).
func asInvoker(t *testing.T, uid, gid int) *[]string {
	t.Helper()
	origInvoker, origLchown := invoker, lchown
	t.Cleanup(func() { invoker, lchown = origInvoker, origLchown })
	invoker = func() (int, int, bool, error) { return uid, gid, true, nil }
	var seen []string
	lchown = func(p string, u, g int) error {
		assert.Equal(t, uid, u, p)
		assert.Equal(t, gid, g, p)
		seen = append(seen, p)
		return os.Lchown(p, u, g)
	}
	return &seen
}

// TestGiveToInvokerWalksEveryFile: under sudo every directory, file and symbolic link (the link
// itself) under each path given is handed to the invoking user, once; paths that do not exist
// are skipped; what was not given is left alone.
func TestGiveToInvokerWalksEveryFile(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "runs", "run-1")
	other := filepath.Join(dir, "runs", "not-given")
	for _, f := range []string{"summary.json", "report.md", "charts/traffic.png", "pprof/001-heap.pb.gz", "logs/cp.log"} {
		require.NoError(t, WriteFileAtomic(filepath.Join(run, f), []byte("x")))
	}
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(run, "link")))
	require.NoError(t, WriteFileAtomic(filepath.Join(other, "summary.json"), []byte("x")))
	history := filepath.Join(dir, "history", "nightly.jsonl")
	require.NoError(t, WriteFileAtomic(history, []byte("{}\n")))

	seen := asInvoker(t, os.Getuid(), os.Getgid())
	require.NoError(t, GiveToInvoker(run, filepath.Join(run, "charts"), run+"/", history, filepath.Join(dir, "absent"), ""))
	var want []string
	require.NoError(t, filepath.WalkDir(run, func(p string, _ os.DirEntry, err error) error {
		want = append(want, p)
		return err
	}))
	want = append(want, history)
	assert.ElementsMatch(t, want, *seen, "every path under the given ones, each once, and nothing else")
	assert.Len(t, want, 11, "run, 5 files, 3 directories, the link and the history")
	for _, p := range *seen {
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		assert.EqualValues(t, os.Getuid(), fi.Sys().(*syscall.Stat_t).Uid, p)
	}
}

// TestGiveToInvokerWithoutSudoDoesNothing: without SUDO_UID and SUDO_GID, or not as root, the
// files stay the process's own: nothing is changed.
func TestGiveToInvokerWithoutSudoDoesNothing(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteFileAtomic(filepath.Join(dir, "summary.json"), []byte("{}")))
	origLchown := lchown
	t.Cleanup(func() { lchown = origLchown })
	lchown = func(p string, _, _ int) error {
		t.Errorf("changed the owner of %s without sudo", p)
		return nil
	}
	t.Setenv("SUDO_UID", "")
	t.Setenv("SUDO_GID", "")
	require.NoError(t, GiveToInvoker(dir))

	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name     string
		euid     int
		env      map[string]string
		uid, gid int
		ok       bool
		err      string
	}{
		{name: "not under sudo", euid: 0, env: map[string]string{}},
		{name: "sudo", euid: 0, env: map[string]string{"SUDO_UID": "1000", "SUDO_GID": "1001"}, uid: 1000, gid: 1001, ok: true},
		{name: "sudo -u another user", euid: 1002, env: map[string]string{"SUDO_UID": "1000", "SUDO_GID": "1001"}},
		{name: "no group", euid: 0, env: map[string]string{"SUDO_UID": "1000"}},
		{name: "not a number", euid: 0, env: map[string]string{"SUDO_UID": "alice", "SUDO_GID": "1001"}, err: `SUDO_UID="alice" is not a user id`},
		{name: "negative group", euid: 0, env: map[string]string{"SUDO_UID": "1000", "SUDO_GID": "-1"}, err: `SUDO_GID="-1" is not a group id`},
	} {
		uid, gid, ok, err := sudoInvoker(tc.euid, env(tc.env))
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.ok, ok, tc.name)
		assert.Equal(t, tc.uid, uid, tc.name)
		assert.Equal(t, tc.gid, gid, tc.name)
	}
}
