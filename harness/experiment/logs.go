package experiment

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// LogsDir is where a run keeps the logs of its control plane's and gateways' containers.
const LogsDir = "logs"

// maxLogBytes bounds each container log kept (its last bytes): a chatty control plane over an
// hour's soak must not fill the disk.
const maxLogBytes = 4 << 20

// saveLogs keeps the logs of the pods of namespace ns that selector selects in the run
// directory's logs/: every container's, and its previous one's after a restart (the control
// plane's last words before an OOM kill). Best effort: what cannot be read is said in the run's
// log, not an error of the run.
func (s *State) saveLogs(ctx context.Context, cs kubernetes.Interface, ns, selector string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		s.Logf("logs of %s in %s: %v", selector, ns, err)
		return
	}
	dir := filepath.Join(s.Dir(), LogsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.Logf("logs: %v", err)
		return
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			kinds := []bool{false}
			if c.RestartCount > 0 {
				kinds = append(kinds, true)
			}
			for _, previous := range kinds {
				name := fmt.Sprintf("%s.%s.%s.log", p.Namespace, p.Name, c.Name)
				if previous {
					name = fmt.Sprintf("%s.%s.%s.previous.log", p.Namespace, p.Name, c.Name)
				}
				if err := saveLog(ctx, cs, &p, c.Name, previous, filepath.Join(dir, name)); err != nil {
					s.Logf("logs of %s/%s %s: %v", p.Namespace, p.Name, c.Name, err)
				}
			}
		}
	}
}

func saveLog(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, container string, previous bool, path string) error {
	limit := int64(maxLogBytes)
	rc, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: previous, LimitBytes: &limit}).Stream(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
