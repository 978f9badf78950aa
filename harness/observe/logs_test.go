package observe

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestTailKeepsTheEndFromALine(t *testing.T) {
	var in bytes.Buffer
	for i := 0; i < 1000; i++ {
		in.WriteString(strings.Repeat("x", 9) + "\n") // 10 bytes a line
	}
	in.WriteString("last line\n")
	out, cut, err := tail(&in, 105, 1000)
	require.NoError(t, err)
	assert.True(t, cut)
	assert.LessOrEqual(t, len(out), 105)
	assert.True(t, strings.HasSuffix(string(out), "last line\n"))
	assert.Equal(t, "xxxxxxxxx\n", string(out[:10]), "starts at a line, not inside one")

	out, cut, err = tail(strings.NewReader("a\nb\nc\n"), 1<<20, 2)
	require.NoError(t, err)
	assert.True(t, cut, "more lines than kept")
	assert.Equal(t, "b\nc\n", string(out))

	out, cut, err = tail(strings.NewReader("short\n"), 1<<20, 10)
	require.NoError(t, err)
	assert.False(t, cut)
	assert.Equal(t, "short\n", string(out))
}

// TestSaveLogsReadsOnlyTheRunsNamespaces: every container of the given namespaces' pods gets its
// file (and its previous container's after a restart), a container that never started is
// listed with why, and a pod of another namespace is never read.
func TestSaveLogsReadsOnlyTheRunsNamespaces(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	cs := fake.NewSimpleClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mine", Name: "cp-0"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "discovery", State: running, RestartCount: 1},
			{Name: "pending", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}},
		}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "theirs", Name: "secret-0"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: running}}}},
	)
	dir := t.TempDir()
	logs := SaveLogs(context.Background(), cs, dir, []string{"mine"}, MaxLogBytes)
	assert.Equal(t, []string{"mine"}, logs.Namespaces)
	require.Len(t, logs.Files, 3)
	assert.Equal(t, "logs/mine/cp-0/discovery.log", logs.Files[0].Path)
	assert.Equal(t, "logs/mine/cp-0/discovery.previous.log", logs.Files[1].Path)
	assert.True(t, logs.Files[1].Previous)
	assert.Contains(t, logs.Files[2].Error, "ErrImageNeverPull")
	assert.Empty(t, logs.Files[2].Path)
	for _, f := range logs.Files[:2] {
		b, err := os.ReadFile(filepath.Join(dir, f.Path))
		require.NoError(t, err)
		assert.Equal(t, "fake logs", string(b)) // client-go's fake answers every GetLogs so
		assert.Equal(t, int64(len(b)), f.Bytes)
	}
	_, err := os.Stat(filepath.Join(dir, "logs", "theirs"))
	assert.True(t, os.IsNotExist(err), "another namespace's pods are never read")
	for _, a := range cs.Actions() {
		assert.NotEqual(t, "theirs", a.GetNamespace(), "no request into another namespace: %v", a)
	}
}

// TestSaveLogsSaysWhenItCut: a log longer than the bound keeps its end, and its file's first line
// says so.
func TestSaveLogsSaysWhenItCut(t *testing.T) {
	cs := fake.NewSimpleClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mine", Name: "cp-0"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "discovery", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}})
	dir := t.TempDir()
	logs := SaveLogs(context.Background(), cs, dir, []string{"mine"}, 4) // the fake's log is "fake logs"
	require.Len(t, logs.Files, 1)
	f := logs.Files[0]
	assert.True(t, f.Cut)
	b, err := os.ReadFile(filepath.Join(dir, f.Path))
	require.NoError(t, err)
	first, rest, _ := strings.Cut(string(b), "\n")
	assert.Contains(t, first, "the log was longer than 4 bytes")
	assert.Equal(t, "logs", rest, "its end")
}
