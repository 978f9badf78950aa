package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshchaos/meshchaos/harness/cluster"
)

// hogDescription is what the report says of the generic memory hog.
const hogDescription = "shells on the node join the container's memory cgroup, mark the container's process first for the OOM killer (oom_score_adj 1000) and hold 4 MiB more every 100 ms in 16 MiB pieces (tail -c)"

// hogScript grows memory charged to the cgroup of container $2 (its ID) under the pod's
// memory cgroup $1, up to $3 MiB. It finds the container's directory itself, on the node: the
// runtimes name it after the ID (cgroupfs drivers: the ID; systemd: cri-containerd-ID.scope
// and the like), and a remote node's directories are not the harness's to list. It moves itself
// into the cgroup, so what it and its children allocate counts against the container's limit, and makes
// the container's process the OOM killer's choice. That process's oom_score_adj goes to 1000,
// which adds (nearly) the whole limit to its badness (raising needs no privilege; lowering the
// hog's own to -1000 would need CAP_SYS_RESOURCE, which some hosts withhold even from root),
// and the hog holds its memory in 16 MiB pieces, one tail -c each, so none of its processes
// outweighs it: a single holder of nearly the whole limit would be chosen instead. So at the
// limit the kernel kills the container's process, as if it had allocated the memory.
// The growth, 4 MiB of zeros every 100 ms (40 MiB/s, the reference's ballast pace: slow enough
// for a heap profile on the way up), stops as soon as that process is gone (then every piece's
// writer ends, each tail sees the end of its input and exits, freeing the memory before the
// restarted container needs it) or at $2 MiB. Only sh, head, sleep, kill and tail are needed:
// any node has them.
const hogScript = `pod=$1 id=$2 mib=$3
cg=
for d in "$pod"/*"$id"*; do if [ -d "$d" ]; then cg=$d; fi; done
if [ -z "$cg" ]; then echo "no cgroup of container $id under $pod" >&2; exit 1; fi
pid=$(head -n 1 "$cg/cgroup.procs")
if [ -z "$pid" ]; then echo "no process in $cg" >&2; exit 1; fi
own=$(cat /proc/$$/oom_score_adj)
if [ "$own" -gt 0 ]; then echo "the hog's own oom_score_adj is $own: the OOM killer could choose it" >&2; exit 1; fi
echo 1000 > "/proc/$pid/oom_score_adj" || exit 1
echo $$ > "$cg/cgroup.procs" || exit 1
alive() { kill -0 "$pid" 2>/dev/null; }
piece() {
	i=0
	while [ "$i" -lt 4 ] && alive; do head -c 4194304 /dev/zero || return; sleep 0.1; i=$((i + 1)); done
	while alive; do sleep 0.1; done
}
k=0
while [ "$k" -lt $((mib / 16)) ] && alive; do
	piece | tail -c 16777216 > /dev/null &
	sleep 0.4
	k=$((k + 1))
done
wait`

// MemoryHog grows a container's memory from outside its process (hogScript), for control planes
// without a ballast hook of their own: the generic memory-pressure fault. It needs a substrate
// whose cgroups the host can reach (cluster.Cluster.PodCgroup) and a shell on the node
// (NodeExec).
type MemoryHog struct {
	// Cluster runs the hog on the pod's node.
	Cluster cluster.Cluster
	// Pod and Container are the process whose memory grows.
	Pod       *corev1.Pod
	Container string
	// MiB bounds the growth (the limit the kernel enforces should come first).
	MiB int

	cancel context.CancelFunc
}

// start launches the hog on the pod's node; the channel gets its end (nil: it stopped by
// itself, because the process was gone or the growth bound reached).
func (h *MemoryHog) start() (<-chan error, error) {
	k, err := nodeIndex(h.Cluster, h.Pod.Spec.NodeName)
	if err != nil {
		return nil, err
	}
	pg, err := h.Cluster.PodCgroup(h.Pod)
	if err != nil {
		return nil, fmt.Errorf("the pod's cgroup: %w", err)
	}
	id, err := containerID(h.Pod, h.Container)
	if err != nil {
		return nil, err
	}
	dir := pg.Dir("memory")
	if np, ok := h.Cluster.(cluster.NodePaths); ok {
		dir = np.NodePath(dir)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	done := make(chan error, 1)
	go func() {
		_, err := h.Cluster.NodeExec(ctx, k, "sh", "-c", hogScript, "meshchaos-hog", dir, id, strconv.Itoa(h.MiB))
		if ctx.Err() != nil {
			err = nil // stopped by Clear
		}
		done <- err
	}()
	return done, nil
}

// stop ends the hog's shell; its pipeline ends by itself within the process's life or the
// growth bound.
func (h *MemoryHog) stop() {
	if h.cancel != nil {
		h.cancel()
	}
}

// containerID is the ID of the pod's running container (its status's containerID without the
// runtime's scheme).
func containerID(pod *corev1.Pod, container string) (string, error) {
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == container {
			if _, id, _ := strings.Cut(st.ContainerID, "://"); id != "" {
				return id, nil
			}
		}
	}
	return "", fmt.Errorf("pod %s/%s has no running container %q (its status names no container ID)", pod.Namespace, pod.Name, container)
}
