package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRewriteDropsMissingCapsFromBundleAndProcessFile(t *testing.T) {
	dir := t.TempDir()
	caps := map[string]any{"bounding": []string{"CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"}, "effective": []string{"CAP_SYS_RESOURCE", "CAP_NET_ADMIN"}}
	spec, _ := json.Marshal(map[string]any{"process": map[string]any{"capabilities": caps}, "root": map[string]any{"path": "rootfs"}})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), spec, 0o600))
	proc, _ := json.Marshal(map[string]any{"capabilities": caps})
	pfile := filepath.Join(dir, "process.json")
	require.NoError(t, os.WriteFile(pfile, proc, 0o600))
	missing := map[string]bool{"CAP_SYS_RESOURCE": true}

	require.NoError(t, rewrite([]string{"--root", "/run/runc", "--log-format", "json", "create", "--bundle", dir, "id"}, missing))
	require.NoError(t, rewrite([]string{"--root=/run/runc", "exec", "--process=" + pfile, "--detach", "id"}, missing))

	var got map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, json.Unmarshal(b, &got))
	c := got["process"].(map[string]any)["capabilities"].(map[string]any)
	assert.Equal(t, []any{"CAP_SYS_ADMIN"}, c["bounding"])
	assert.Equal(t, []any{"CAP_NET_ADMIN"}, c["effective"])
	assert.Equal(t, "rootfs", got["root"].(map[string]any)["path"], "the rest of the spec is kept")
	b, _ = os.ReadFile(pfile)
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, []any{"CAP_SYS_ADMIN"}, got["capabilities"].(map[string]any)["bounding"])
}
