package suite

import (
	"os"
	"path/filepath"
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
