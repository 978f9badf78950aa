package observe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/results"
)

const (
	// MaxLogBytes bounds each container log a run keeps (its end): a chatty control plane over
	// an hour's soak must not fill the disk.
	MaxLogBytes = 4 << 20
	// maxLogLines bounds what is transferred: the apiserver sends the last lines only.
	maxLogLines = 200_000
	// logsBudget bounds the whole collection, so that a slow apiserver cannot eat the
	// teardown's budget: what is not read by then is listed with its error.
	logsBudget = 45 * time.Second
)

// SaveLogs keeps the logs of every container of every pod in namespaces (the run's own: the
// caller must never pass another's) in runDir's logs/NAMESPACE/POD/CONTAINER.log, and the
// previous container's (CONTAINER.previous.log) when it restarted: an OOM-killed control plane's
// last words. Each file holds at most maxBytes, the log's end, and says so on its first line
// when the log was longer. Best effort: what cannot be read is listed with its error, never an
// error of the run.
func SaveLogs(ctx context.Context, cs kubernetes.Interface, runDir string, namespaces []string, maxBytes int64) *results.Logs {
	ctx, cancel := context.WithTimeout(ctx, logsBudget)
	defer cancel()
	out := &results.Logs{Namespaces: append([]string{}, namespaces...), MaxBytes: maxBytes}
	for _, ns := range namespaces {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			out.Errors = append(out.Errors, fmt.Sprintf("list the pods of namespace %s: %v", ns, err))
			continue
		}
		sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
		for i := range pods.Items {
			p := &pods.Items[i]
			for _, c := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				if c.State.Running != nil || c.State.Terminated != nil {
					out.Files = append(out.Files, saveLog(ctx, cs, runDir, p, c.Name, false, maxBytes))
				} else if c.RestartCount == 0 {
					why := "never started"
					if w := c.State.Waiting; w != nil && w.Reason != "" {
						why = "waiting: " + w.Reason
						if w.Message != "" {
							why += ": " + w.Message
						}
					}
					out.Files = append(out.Files, results.LogFile{Namespace: ns, Pod: p.Name, Container: c.Name, Error: "no log: the container " + why})
				}
				if c.RestartCount > 0 {
					out.Files = append(out.Files, saveLog(ctx, cs, runDir, p, c.Name, true, maxBytes))
				}
			}
		}
	}
	return out
}

// LogPath is where the log of a pod's container is kept, relative to the run directory.
func LogPath(ns, pod, container string, previous bool) string {
	name := container + ".log"
	if previous {
		name = container + ".previous.log"
	}
	return filepath.Join(results.LogsDir, ns, pod, name)
}

// saveLog reads one container's log through the apiserver (GetLogs) into its file.
func saveLog(ctx context.Context, cs kubernetes.Interface, runDir string, p *corev1.Pod, container string, previous bool, maxBytes int64) results.LogFile {
	f := results.LogFile{Namespace: p.Namespace, Pod: p.Name, Container: container, Previous: previous}
	lines := int64(maxLogLines + 1) // one more than kept: receiving it says the log was longer
	rc, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: previous, TailLines: &lines}).Stream(ctx)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	defer rc.Close()
	body, cut, err := tail(rc, maxBytes, maxLogLines)
	if err != nil {
		f.Error = fmt.Sprintf("read: %v", err)
		if len(body) == 0 {
			return f
		}
		cut = true // what was read before the error is kept, and said to be partial
	}
	if cut {
		note := fmt.Sprintf("[meshchaos: the log was longer than %d bytes or %d lines; this file holds its end only]\n", maxBytes, maxLogLines)
		if err != nil {
			note = fmt.Sprintf("[meshchaos: reading the log failed (%v); this file holds what was read]\n", err)
		}
		body = append([]byte(note), body...)
	}
	rel := LogPath(p.Namespace, p.Name, container, previous)
	path := filepath.Join(runDir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		f.Error = err.Error()
		return f
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		f.Error = err.Error()
		return f
	}
	f.Path, f.Bytes, f.Cut = rel, int64(len(body)), cut
	return f
}

// tail reads r to its end and returns its last maxBytes and at most maxLines lines, starting at
// a line when it cut, and whether it cut.
func tail(r io.Reader, maxBytes int64, maxLines int) ([]byte, bool, error) {
	var buf []byte
	cut := false
	chunk := make([]byte, 64<<10)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if int64(len(buf)) > 2*maxBytes {
			buf, cut = append([]byte(nil), buf[int64(len(buf))-maxBytes:]...), true
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return trimToLine(buf, maxBytes, cut), true, err
		}
	}
	if int64(len(buf)) > maxBytes {
		cut = true
	}
	buf = trimToLine(buf, maxBytes, cut)
	if n := bytes.Count(buf, []byte("\n")); n > maxLines {
		for ; n > maxLines; n-- {
			buf = buf[bytes.IndexByte(buf, '\n')+1:]
		}
		cut = true
	}
	return buf, cut, nil
}

// trimToLine keeps buf's last maxBytes; when anything was cut it starts after the first line
// break, so that the file does not begin in the middle of a line.
func trimToLine(buf []byte, maxBytes int64, cut bool) []byte {
	if int64(len(buf)) > maxBytes {
		buf = buf[int64(len(buf))-maxBytes:]
	}
	if cut {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 && i < len(buf)-1 {
			buf = buf[i+1:]
		}
	}
	return buf
}
