package suite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadReadsAFileAndRefusesBadOnes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte(`name: mine
entries:
- experiment: cp-oom-restart
  controlPlane: reference:ungated
  set: [rate=50]
  repeats: 2
  expect: fail
- experiment: endpoint-flap
`), 0o644))
	s, err := Load(good)
	require.NoError(t, err)
	assert.Equal(t, "mine", s.Name)
	assert.Equal(t, 3, s.Runs())
	assert.Equal(t, []string{"rate=50"}, s.Entries[0].Set)

	for name, text := range map[string]string{
		"unknown field": "name: x\nentries:\n- experiment: a\n  repeat: 2\n",
		"no entries":    "name: x\n",
		"bad expect":    "name: x\nentries:\n- experiment: a\n  expect: maybe\n",
		"bad set":       "name: x\nentries:\n- experiment: a\n  set: [rate]\n",
		"no experiment": "name: x\nentries:\n- repeats: 1\n",
	} {
		f := filepath.Join(dir, "bad.yaml")
		require.NoError(t, os.WriteFile(f, []byte(text), 0o644))
		_, err := Load(f)
		assert.Error(t, err, name)
	}
	_, err = Load(filepath.Join(dir, "absent.yaml"))
	assert.ErrorContains(t, err, "neither a built-in")
}

// TestLoadRefusesUnsafeNames: a suite's name becomes a file name (NAME.jsonl under --history, the
// default output directory): a path, "..", or anything but a plain name is refused.
func TestLoadRefusesUnsafeNames(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"../evil", "a/b", "/tmp/evil", "..", ".", ".hidden", "a\\b", "with space", "-flag", "\"a\\u0000b\"", strings.Repeat("x", 65)} {
		f := filepath.Join(dir, "s.yaml")
		require.NoError(t, os.WriteFile(f, []byte("name: "+name+"\nentries:\n- experiment: a\n"), 0o644))
		_, err := Load(f)
		assert.ErrorContains(t, err, "suite name", name)
		assert.ErrorContains(t, err, "want letters, digits", name)
	}
	for _, name := range []string{"tiny", "pre-upgrade", "honesty-ci", "v1.2_nightly", strings.Repeat("x", 64)} {
		f := filepath.Join(dir, "s.yaml")
		require.NoError(t, os.WriteFile(f, []byte("name: "+name+"\nentries:\n- experiment: a\n"), 0o644))
		_, err := Load(f)
		assert.NoError(t, err, name)
	}
	for _, s := range Builtins() {
		assert.NoError(t, s.Validate(), s.Name)
	}
}
