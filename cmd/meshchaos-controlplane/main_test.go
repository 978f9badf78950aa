package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/apiserver"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/internal/crds"
)

// TestBinaryServesAndStopsOnSIGTERM: the binary the control plane's image runs, built as `make
// build` builds it, serves against a real kube-apiserver, becomes ready, and ends with exit 0
// on SIGTERM (what kubelet sends).
func TestBinaryServesAndStopsOnSIGTERM(t *testing.T) {
	s := apiserver.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := kube.InstallCRDs(ctx, s.RESTConfig(), crds.Istio)
	require.NoError(t, err)

	bin := filepath.Join(t.TempDir(), "meshchaos-controlplane")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", s.KubeconfigPath(),
		"--xds-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-level", "warn")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }() // after the read: Wait closes the pipe
	stopped := false
	defer func() {
		// Whatever failed below, the process does not outlive the test.
		if !stopped {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	require.NoError(t, err)
	m := regexp.MustCompile(`^controlplane: xDS on \S+, admin on (\S+)`).FindStringSubmatch(line)
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

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		stopped = true
		assert.NoError(t, err, "exit 0 after SIGTERM")
	case <-time.After(15 * time.Second):
		t.Fatal("the control plane did not stop on SIGTERM")
	}
}
