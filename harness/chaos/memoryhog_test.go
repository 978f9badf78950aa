package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

// hostCluster is a one-node cluster whose node is this host: NodeExec runs here and the pod's
// cgroup is one the test made.
type hostCluster struct {
	fakeCluster
	pod *cgroup.Group
}

func (c *hostCluster) NodeExec(ctx context.Context, _ int, argv ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return out, err
}

func (c *hostCluster) PodCgroup(*corev1.Pod) (*cgroup.Group, error) { return c.pod, nil }

// TestHogGetsTheContainersProcessOOMKilled runs the generic memory hog against a real memory
// cgroup with a 64 MiB limit holding one small process: the kernel must kill that process, not
// the hog (which holds nearly all the memory), and the hog must then end by itself.
func TestHogGetsTheContainersProcessOOMKilled(t *testing.T) {
	prereq.Root(t, "creates cgroups")
	const id = "0123abcd"
	podPath := fmt.Sprintf("/meshchaos-hogtest-%d", os.Getpid())
	pod, err := cgroup.Create(podPath)
	require.NoError(t, err)
	defer func() { assert.NoError(t, pod.Remove(10*time.Second)) }()
	ctr, err := cgroup.Create(podPath + "/cri-containerd-" + id + ".scope")
	require.NoError(t, err)
	memDir := ctr.Dir("memory")
	require.NotEmpty(t, memDir)
	limitFile, usageFile := "memory.limit_in_bytes", "memory.usage_in_bytes"
	if _, err := os.Stat(filepath.Join(memDir, limitFile)); err != nil {
		limitFile, usageFile = "memory.max", "memory.current" // v2
	}
	require.NoError(t, os.WriteFile(filepath.Join(memDir, limitFile), []byte(strconv.Itoa(64<<20)), 0o644))

	victim := exec.Command("sleep", "300")
	require.NoError(t, victim.Start())
	defer func() { _ = victim.Process.Kill() }()
	require.NoError(t, ctr.AddProcess(victim.Process.Pid))
	exited := make(chan error, 1)
	go func() { exited <- victim.Wait() }()

	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cp"}, Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "discovery", ContainerID: "containerd://" + id}}}}
	b := &Ballast{Target: "control-plane", MemoryHog: &MemoryHog{Cluster: &hostCluster{fakeCluster: fakeCluster{node: "n1"}, pod: pod},
		Pod: p, Container: "discovery", MiB: 128},
		Usage: func() (int64, error) {
			v, err := os.ReadFile(filepath.Join(memDir, usageFile))
			if err != nil {
				return 0, err
			}
			return strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		}}
	how, fallback := b.Implementation()
	assert.True(t, fallback)
	assert.Contains(t, how, "generic memory hog")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ev, err := b.Inject(ctx)
	require.NoError(t, err)
	t.Log(ev.Summary)

	select {
	case err := <-exited:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		ws := ee.Sys().(syscall.WaitStatus)
		require.True(t, ws.Signaled(), "the victim must be killed, not exit: %v", err)
		assert.Equal(t, syscall.SIGKILL, ws.Signal())
	case <-time.After(30 * time.Second):
		t.Fatalf("the kernel did not kill the cgroup's process within 30 s (usage %s)", readOr(filepath.Join(memDir, usageFile)))
	}
	// The hog ends by itself once its target is gone: the cgroup empties.
	require.Eventually(t, func() bool { return len(ctr.Procs()) == 0 }, 10*time.Second, 50*time.Millisecond,
		"the hog kept running after the process it hogged for died: %v", ctr.Procs())
	if oc := readOr(filepath.Join(memDir, "memory.oom_control")); strings.Contains(oc, "oom_kill ") {
		assert.NotContains(t, oc, "oom_kill 0", "the kill was the memory cgroup's OOM killer")
	}
	_, err = b.Clear(ctx)
	assert.NoError(t, err)
}

func readOr(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}

// TestHogFindsTheContainersCgroup: the hog finds the container's directory under the pod's by
// its ID, whatever the runtime calls it, and says which it could not find.
func TestHogFindsTheContainersCgroup(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cp"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		{Name: "discovery", ContainerID: "containerd://beef02"}, {Name: "other", ContainerID: "containerd://cafe01"}}}}
	id, err := containerID(p, "discovery")
	require.NoError(t, err)
	assert.Equal(t, "beef02", id)
	_, err = containerID(p, "absent")
	assert.ErrorContains(t, err, `pod ns/cp has no running container "absent"`)

	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "cri-containerd-cafe01.scope"), 0o755))
	out, err := exec.Command("sh", "-c", hogScript, "meshchaos-hog", dir, "beef02", "16").CombinedOutput()
	require.Error(t, err)
	assert.Equal(t, "no cgroup of container beef02 under "+dir+"\n", string(out))
	// Found: the script goes on to the cgroup's processes (none in a plain directory).
	require.NoError(t, os.Mkdir(filepath.Join(dir, "cri-containerd-beef02.scope"), 0o755))
	out, _ = exec.Command("sh", "-c", hogScript, "meshchaos-hog", dir, "beef02", "16").CombinedOutput()
	assert.Contains(t, string(out), filepath.Join(dir, "cri-containerd-beef02.scope")+"/cgroup.procs")
}
