package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"

	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
)

func runCLI(ctx context.Context, out io.Writer, args ...string) error {
	root := NewRoot()
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(io.Discard)
	return root.ExecuteContext(ctx)
}

func TestControlPlaneBadInputIsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"controlplane", "--regress", "no-such-bug"},
		{"controlplane", "--log-level", "loud"},
		{"controlplane", "--debounce", "-1s"},
		{"controlplane", "--kubeconfig", "/nonexistent/kubeconfig"},
		{"controlplane", "manifests"},
		{"controlplane", "manifests", "--out", "x", "--regress", "no-such-bug"},
	} {
		err := runCLI(context.Background(), io.Discard, args...)
		var ec ExitCoder
		require.True(t, errors.As(err, &ec), "%v: %v", args, err)
		require.Equal(t, 2, ec.ExitCode(), "%v: %v", args, err)
	}
}

func TestControlPlaneCommandServes(t *testing.T) {
	s := apiserver.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := kube.InstallCRDs(ctx, s.RESTConfig(), crds.Istio)
	require.NoError(t, err)

	runCtx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runCLI(runCtx, pw, "controlplane", "--kubeconfig", s.KubeconfigPath(),
			"--xds-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-level", "warn")
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	m := regexp.MustCompile(`admin on (\S+)`).FindStringSubmatch(line)
	require.NotNil(t, m, line)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + m[1] + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "control plane never became ready")
		time.Sleep(50 * time.Millisecond)
	}
	go io.Copy(io.Discard, pr)
	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("controlplane did not stop on cancel")
	}
}

// TestControlPlaneManifestsRendersWhatReferenceApplies: the rendered directory is the reference's
// manifests (with the sync gate off for the ungated build), ready for a descriptor.
func TestControlPlaneManifestsRendersWhatReferenceApplies(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, runCLI(context.Background(), io.Discard, "controlplane", "manifests", "--out", dir, "--regress", "ungated"))
	want, err := manifests.ControlPlane(manifests.Params{Regress: []string{"ungated"}})
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dir, "controlplane.yaml"))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
	require.Contains(t, string(got), "--sync-gate=false")
	written, err := os.ReadFile(filepath.Join(dir, "crds.yaml"))
	require.NoError(t, err)
	require.Equal(t, string(crds.Istio), string(written))
}

// TestControlPlaneSecureFlagsAreChecked: the secure xDS flags are refused before anything
// starts, naming what to give.
func TestControlPlaneSecureFlagsAreChecked(t *testing.T) {
	for want, args := range map[string][]string{
		"--secure-xds-dns":           {"controlplane", "--secure-xds-addr", "127.0.0.1:0"},
		"meshchaos.io/run=NAME":      {"controlplane", "--secure-xds-addr", "127.0.0.1:0", "--secure-xds-dns", "cp.ns.svc", "--root-cert-namespaces", "a=b=c"},
		"--xds-audience":             {"controlplane", "--secure-xds-addr", "127.0.0.1:0", "--secure-xds-dns", "cp.ns.svc", "--xds-audience", ""},
		"give --namespace":           {"controlplane", "--ca-secret", "s", "--namespace", ""},
		"--inject-xds-audience must": {"controlplane", "--inject-xds-root-configmap", "meshchaos-ca-root-cert", "--inject-xds-audience", ""},
	} {
		code, out := run(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, out)
		require.Contains(t, out, want, "%v", args)
	}
}

// TestControlPlaneRefusesUnknownInjectMode: --inject-default-mode is checked whether or not the
// webhooks are on, and the error lists the valid modes.
func TestControlPlaneRefusesUnknownInjectMode(t *testing.T) {
	for _, args := range [][]string{
		{"controlplane", "--inject-default-mode", "bogus"},
		{"controlplane", "--inject-default-mode", "Hold"},
		{"controlplane", "--inject-default-mode", "", "--kubeconfig", "/nonexistent/kubeconfig"},
		{"controlplane", "--inject-default-mode", "bogus", "--webhook-addr", "127.0.0.1:0", "--inject-image", "x", "--inject-xds-address", "cp:15010"},
	} {
		code, out := run(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, out)
		require.Contains(t, out, "--inject-default-mode", "%v", args)
		require.Contains(t, out, "choose none, hold or native", "%v", args)
	}
}
