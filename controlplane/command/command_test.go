package command

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/controlplane/xds"
)

// TestMainRefusesBadInput: as a program of its own, every bad flag, value or argument ends with
// exit code 2 at once, before anything starts, with a message on stderr that names it.
func TestMainRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBECONFIG", filepath.Join(dir, "absent"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster, even when the tests run in a pod
	// A kubeconfig that loads (nothing is dialled before the checks after it).
	kc := filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c}}]
current-context: c
`), 0o600))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag (see 'meshchaos-controlplane --help')"},
		{[]string{"serve"}, `takes no arguments, got ["serve"]`},
		{[]string{"--regress", "no-such-bug"}, "no-such-bug"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--debounce", "-1s"}, "must not be negative"},
		{[]string{"--push-throttle", "0"}, "--push-throttle"},
		{[]string{"--generation", "per-pod"}, `--generation: unknown generation mode "per-pod" (known: per-scope, per-proxy)`},
		{[]string{"--xds-max-streams", "many"}, "--xds-max-streams"},
		{[]string{"--kubeconfig", "/nonexistent/kubeconfig"}, "/nonexistent/kubeconfig"},
		{[]string{}, "give --kubeconfig"},
		{[]string{"--inject-default-mode", "bogus"}, "choose none, hold or native"},
		{[]string{"--secure-xds-addr", "127.0.0.1:0"}, "--secure-xds-dns"},
		{[]string{"--ca-secret", "s", "--namespace", ""}, "give --namespace"},
		{[]string{"--webhook-addr", "127.0.0.1:0", "--kubeconfig", kc}, "--webhook-addr needs --inject-image"},
	} {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		code := Main(context.Background(), "meshchaos-controlplane", tc.args, &stdout, &stderr)
		what := strings.Join(tc.args, " ")
		assert.Equal(t, 2, code, "%s: exit code (stderr: %s)", what, stderr.String())
		assert.Less(t, time.Since(start), time.Second, "%s: answered at once", what)
		assert.True(t, strings.HasPrefix(stderr.String(), "meshchaos-controlplane: "), "%s: the message names the program: %q", what, stderr.String())
		assert.Contains(t, stderr.String(), tc.want, "%s: the message names what was wrong", what)
		assert.Empty(t, stdout.String(), "%s: nothing started", what)
	}
}

// TestMainRefusesBadRequestLimitEnv: istiod's PILOT_MAX_REQUESTS_PER_SECOND sets the new-stream
// rate when --xds-new-stream-rate is not given; a value that is not a rate is refused at once.
func TestMainRefusesBadRequestLimitEnv(t *testing.T) {
	t.Setenv("PILOT_MAX_REQUESTS_PER_SECOND", "lots")
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, Main(context.Background(), "meshchaos-controlplane", nil, &stdout, &stderr))
	assert.Contains(t, stderr.String(), `$PILOT_MAX_REQUESTS_PER_SECOND="lots"`)
	assert.Empty(t, stdout.String())
}

// TestMainHelp: --help is an answer, not an error, and lists the switches and the flags.
func TestMainHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, Main(context.Background(), "meshchaos-controlplane", []string{"--help"}, &stdout, &stderr), stderr.String())
	assert.Contains(t, stdout.String(), "meshchaos-controlplane [flags]")
	assert.Contains(t, stdout.String(), "quadratic-scope")
	assert.Contains(t, stdout.String(), "--xds-addr")
	assert.Contains(t, stdout.String(), "--generation")
}

// TestGenerationsAreTheManifests: the harness checks a --cp spec's generation=MODE against
// manifests.Generations, which must be the modes the binary takes.
func TestGenerationsAreTheManifests(t *testing.T) {
	var modes []string
	for _, g := range xds.Generations {
		modes = append(modes, string(g))
	}
	assert.Equal(t, manifests.Generations, modes)
}

// TestUsageErrorIsExit2: meshchaos's CLI reads the exit code through an ExitCode method.
func TestUsageErrorIsExit2(t *testing.T) {
	var ec interface{ ExitCode() int } = &UsageError{}
	assert.Equal(t, 2, ec.ExitCode())
}

// TestKubeClientLimitsAreIstiods: the control plane's Kubernetes client may make istiod's 80
// requests a second (burst 160), not client-go's 5: each new secure stream costs a TokenReview.
func TestKubeClientLimitsAreIstiods(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600))
	cfg, err := kubeConfig(kc)
	require.NoError(t, err)
	assert.Equal(t, float32(80), cfg.QPS)
	assert.Equal(t, 160, cfg.Burst)
}
