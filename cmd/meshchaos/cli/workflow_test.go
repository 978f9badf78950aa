package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/internal/prereq"
)

// actionlint validates GitHub Actions workflows; this version is built from the Go module proxy
// (the only thing the test fetches), pinned so that a new release's rules cannot fail a build.
const actionlint = "github.com/rhysd/actionlint/cmd/actionlint@v1.7.12"

// TestNightlyWorkflowLints holds examples/ci/nightly.yml, the sharded nightly a user copies,
// against actionlint (workflow syntax, expressions and contexts such as strategy.job-total,
// action inputs, job needs), and every meshchaos command it runs against the command tree.
func TestNightlyWorkflowLints(t *testing.T) {
	wf := filepath.Join(repoRoot(t), "examples", "ci", "nightly.yml")
	b, err := os.ReadFile(wf)
	require.NoError(t, err)

	// The commands: one line each once the shell's continuations are joined.
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	var commands []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "bin/meshchaos ") && !strings.HasPrefix(strings.TrimSpace(line), "#") {
			commands = append(commands, line)
			assert.Empty(t, checkCommandLine(NewRoot(), line), line)
		}
	}
	joined := strings.Join(commands, "\n")
	assert.Contains(t, joined, `--shard "${{ matrix.shard }}/${{ strategy.job-total }}"`, "each matrix job runs its share")
	assert.Contains(t, joined, "bin/meshchaos suite merge shards/*/ --out", "the merge job combines them")

	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	gobin := t.TempDir()
	install := exec.Command(goCmd, "install", actionlint)
	install.Dir, install.Env = t.TempDir(), append(os.Environ(), "GOBIN="+gobin)
	if out, err := install.CombinedOutput(); err != nil {
		prereq.Missing(t, "build %s from the Go module proxy: %v\n%s", actionlint, err, out)
	}
	lint := func(file string) (string, error) {
		// shellcheck and pyflakes are left out: whether a machine has them would change the verdict.
		out, err := exec.Command(filepath.Join(gobin, "actionlint"), "-shellcheck=", "-pyflakes=", file).CombinedOutput()
		return string(out), err
	}
	out, err := lint(wf)
	assert.NoError(t, err, "actionlint %s:\n%s", wf, out)

	// It does find mistakes: a misspelt status function.
	bad := filepath.Join(t.TempDir(), "nightly.yml")
	require.Contains(t, string(b), "!cancelled()")
	require.NoError(t, os.WriteFile(bad, []byte(strings.Replace(string(b), "!cancelled()", "!canceled()", 1)), 0o644))
	out, err = lint(bad)
	assert.Error(t, err)
	assert.Contains(t, out, `undefined function "canceled"`)
}
