package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/results"
)

// TestRunKeepsLogsAndItsCluster: a real run leaves every container log of its pods in logs/ (the
// OOM-killed control plane's previous container too) listed in summary.json and the reports;
// with --keep-cluster its local cluster outlives the run, reachable with the kubeconfig it
// prints, owned by the process serving it (so --stale leaves it alone), and `cluster down NAME`
// removes it with that process.
func TestRunKeepsLogsAndItsCluster(t *testing.T) {
	bin, home, env := integrationCLI(t)
	name := fmt.Sprintf("rkeep%d", os.Getpid()%10000)
	out := filepath.Join(t.TempDir(), "run")
	t.Cleanup(func() {
		if len(local.Leftovers(home, name)) > 0 {
			cli(t, bin, env, "cluster", "down", name)
		}
	})
	r := startRun(t, bin, env, append(slices.Clone(smallRun), "--name", name, "--out", out, "--keep-cluster"))
	code := r.wait()
	output := r.output()
	s, err := results.Read(out)
	require.NoError(t, err, output)
	require.Equal(t, 0, code, "verdict %s %s\n%s", s.Verdict, s.Error, output)

	// The logs: the control plane's, before and after its OOM kill, and the gateway's.
	require.NotNil(t, s.Logs, output)
	assert.NotEmpty(t, s.Logs.Namespaces)
	var previous, gateway bool
	for _, f := range s.Logs.Files {
		if f.Path == "" {
			t.Logf("not read: %s/%s %s: %s", f.Namespace, f.Pod, f.Container, f.Error)
			continue
		}
		assert.Contains(t, s.Logs.Namespaces, f.Namespace)
		b, err := os.ReadFile(filepath.Join(out, f.Path))
		require.NoError(t, err)
		assert.EqualValues(t, len(b), f.Bytes, f.Path)
		t.Logf("%s: %d bytes", f.Path, len(b))
		previous = previous || (f.Previous && len(b) > 0)
		gateway = gateway || (strings.HasPrefix(f.Pod, "gateway") && len(b) > 0)
	}
	assert.True(t, previous, "the OOM-killed control plane's previous container's log: %+v", s.Logs.Files)
	assert.True(t, gateway, "the gateway's log: %+v", s.Logs.Files)
	for _, report := range []string{results.MarkdownFile, results.HTMLFile} {
		b, err := os.ReadFile(filepath.Join(out, report))
		require.NoError(t, err)
		assert.Contains(t, string(b), "Logs", report)
		assert.Contains(t, string(b), ".previous.log", report)
	}

	for _, p := range s.Phases {
		if p.Name == "teardown" && p.FinishedAt != nil {
			t.Logf("teardown (logs and keep) took %s", p.FinishedAt.Sub(p.StartedAt))
		}
	}

	// The kept cluster: reachable after the run ended, with what it printed.
	require.NotNil(t, s.Kept, output)
	assert.Equal(t, name, s.Kept.Name)
	assert.Contains(t, output, "export KUBECONFIG="+s.Kept.Kubeconfig)
	assert.Contains(t, output, "remove it: meshchaos cluster down "+name)
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kept.Kubeconfig)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{LabelSelector: "app=gateway"})
	require.NoError(t, err, "the kept cluster answers through its kubeconfig")
	assert.NotEmpty(t, pods.Items, "the run's pods are still there")

	var o struct{ Pid int }
	b, err := os.ReadFile(filepath.Join(home, "clusters", name, "owner.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &o))
	assert.True(t, running(o.Pid), "the connect process owns the kept cluster")
	code, msg := cli(t, bin, env, "cluster", "down", "--stale", "--prefix", name)
	assert.Equal(t, 0, code, msg)
	assert.Contains(t, msg, "skipped "+name, "a kept cluster is not stale")

	code, msg = cli(t, bin, env, "cluster", "down", name)
	require.Equal(t, 0, code, msg)
	assert.Empty(t, local.Leftovers(home, name))
	assert.False(t, running(o.Pid), "cluster down ended the connect process")
}

// running says whether pid is a process that has not exited (a zombie has).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}
