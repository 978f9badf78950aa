package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

// run executes the CLI in-process and returns its exit code and output.
func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	_, err := root.ExecuteC()
	if err != nil && isCobraUsageError(err) {
		err = Usagef("%v", err)
	}
	if err == nil {
		return 0, out.String()
	}
	var ec ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode(), out.String() + err.Error()
	}
	return 1, out.String() + err.Error()
}

func TestClusterBadInputExitsTwo(t *testing.T) {
	t.Setenv("MESHCHAOS_HOME", t.TempDir())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "up", "--bogus"}, "unknown flag"},
		{[]string{"cluster", "up", "--nodes", "0"}, "choose 1 to"},
		{[]string{"cluster", "up", "--name", "Bad_Name"}, "cluster name"},
		{[]string{"cluster", "down"}, "exactly one of"},
		{[]string{"cluster", "down", "--name", "absent", "--all"}, "exactly one of"},
		{[]string{"cluster", "exec", "--name", "absent", "--", "true"}, "no node"},
		{[]string{"cluster", "load", "--name", "absent", "/no/such.tar"}, "no such file"},
		{[]string{"nosuchcommand"}, "unknown command"},
	} {
		code, out := run(t, tc.args...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, out)
		assert.Contains(t, out, tc.want, "%v", tc.args)
	}
}

func TestClusterUpMissingBinaryExitsTwo(t *testing.T) {
	prereq.Root(t, "the binary check comes after the root check")
	t.Setenv("MESHCHAOS_HOME", t.TempDir())
	t.Setenv("MESHCHAOS_KUBELET", "/nonexistent/kubelet")
	code, out := run(t, "cluster", "up", "--name", "nobins")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "MESHCHAOS_KUBELET")
	assert.Empty(t, local.Leftovers(os.Getenv("MESHCHAOS_HOME"), "nobins"), "nothing was started")
}

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// buildCLI compiles meshchaos once per test run for subprocess tests, into a directory any
// user can enter (the non-root test runs it as nobody).
func buildCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcbin")
		if err != nil {
			cliErr = err
			return
		}
		_ = os.Chmod(dir, 0o755)
		cliPath = filepath.Join(dir, "meshchaos")
		cmd := exec.Command("go", "build", "-o", cliPath, "github.com/meshchaos/meshchaos/cmd/meshchaos")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("go build: %v: %s", err, b)
		}
	})
	require.NoError(t, cliErr)
	return cliPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cliPath != "" {
		os.RemoveAll(filepath.Dir(cliPath))
	}
	os.Exit(code)
}

func TestClusterUpAsNonRootExitsTwo(t *testing.T) {
	prereq.Root(t, "drops to another user")
	code, out := runAsNobody(t, "cluster", "up", "--name", "nonroot")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "needs root")
	assert.Contains(t, out, "kind")
}

// runAsNobody runs the compiled CLI as user nobody, in a directory nobody can enter, and returns
// its exit code and output.
func runAsNobody(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(buildCLI(t), args...)
	cmd.Dir = os.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/nonexistent"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, string(out))
	return ee.ExitCode(), string(out)
}

// TestClusterCrashRecovery: a `cluster up` killed with SIGKILL leaves everything running;
// `cluster down --name` removes all of it.
func TestClusterCrashRecovery(t *testing.T) {
	prereq.Integration(t)
	require.NoError(t, local.Preflight())
	imagesDir, err := bins.ImagesDir("")
	require.NoError(t, err)
	bin := buildCLI(t)
	home, err := os.MkdirTemp("", "mc")
	require.NoError(t, err)
	defer os.RemoveAll(home)
	name := "crash" + strings.TrimPrefix(filepath.Base(home), "mc")
	if len(name) > 20 {
		name = name[:20]
	}
	env := append(os.Environ(), "MESHCHAOS_HOME="+home, "CI=true")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// No --images: the binary, built outside bin/ and run inside the checkout, finds bin/images itself.
	up := exec.CommandContext(ctx, bin, "cluster", "up", "--name", name)
	up.Env = env
	stdout, err := up.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	up.Stderr = &stderr
	require.NoError(t, up.Start())
	defer func() { _ = local.Down(context.Background(), home, name, nil) }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, stderr.String())
	require.True(t, strings.HasPrefix(line, "kubeconfig: "), line)
	assert.FileExists(t, strings.TrimSpace(strings.TrimPrefix(line, "kubeconfig: ")))

	code, out := cli(t, bin, env, "cluster", "up", "--name", name, "--images", imagesDir)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "is running")

	code, out = cli(t, bin, env, "cluster", "exec", "--name", name, "--node", "1", "--", "ip", "-br", "addr", "show", "eth0")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "10.200.0.11/24")
	code, out = cli(t, bin, env, "cluster", "load", "--name", name, filepath.Join(imagesDir, "echo.tar"))
	assert.Equal(t, 0, code, out)

	require.NoError(t, up.Process.Signal(syscall.SIGKILL))
	_ = up.Wait() // after Wait the stderr copy is complete
	assert.Contains(t, stderr.String(), "ready in", "progress as plain lines in CI")
	assert.NotEmpty(t, local.Leftovers(home, name), "a killed cluster leaves its components running")
	code, out = cli(t, bin, env, "cluster", "up", "--name", name, "--images", imagesDir)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "cluster down --name "+name)

	code, out = cli(t, bin, env, "cluster", "down", "--name", name)
	assert.Equal(t, 0, code, out)
	assert.Empty(t, local.Leftovers(home, name))
}
