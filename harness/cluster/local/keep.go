package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/internal/proc"
)

// connectName names the process that serves a kept cluster's API (its pid file and log are in
// the cluster's logs directory, so that Down ends it with the other components).
const connectName = "connect"

var _ cluster.Keeper = (*Cluster)(nil)

// Keep implements cluster.Keeper. The cluster's loopback forwarder lives in this process, so
// Keep starts Config.Connect's command on its own: it serves the API on a loopback port of its
// own, rewrites the cluster's kubeconfig to it and becomes the cluster's owner (owner.json), so
// that `cluster down --stale` leaves the kept cluster alone while it runs. Keep returns once it
// has taken over; Down ends it with the cluster's other components.
func (c *Cluster) Keep(ctx context.Context) (cluster.Kept, error) {
	if c.cfg.Connect == nil {
		return cluster.Kept{}, errors.New("no command to serve a kept cluster's API was configured")
	}
	argv := c.cfg.Connect(c.l.name, c.l.marker())
	p, err := proc.Start(proc.Spec{Name: connectName, Path: argv[0], Args: argv[1:], Dir: c.l.logDir()})
	if err != nil {
		return cluster.Kept{}, err
	}
	pid := strconv.Itoa(p.Pid())
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var o owner
		if b, err := os.ReadFile(filepath.Join(c.l.dir(), "owner.json")); err == nil && json.Unmarshal(b, &o) == nil && strconv.Itoa(o.Pid) == pid {
			break
		}
		select {
		case <-p.Done():
			return cluster.Kept{}, fmt.Errorf("%s exited before serving the cluster (its log: %s)", argv[0], proc.LogPath(c.l.logDir(), connectName))
		case <-ctx.Done():
			_ = p.Stop(time.Second)
			return cluster.Kept{}, fmt.Errorf("%s did not take the cluster over within 30 s (its log: %s)", argv[0], proc.LogPath(c.l.logDir(), connectName))
		case <-time.After(50 * time.Millisecond):
		}
	}
	// This process's forwarder is no longer the kubeconfig's; nothing else of the cluster
	// lives in it.
	c.stopped.Do(func() {
		if c.fwd != nil {
			c.fwd.Close()
		}
	})
	return cluster.Kept{Kubeconfig: c.l.kubeconfig()}, nil
}

// Connect serves the API of the local cluster whose state directory is stateDir on a loopback
// port until ctx ends: it points the cluster's kubeconfig at that port, records this process as
// the cluster's owner, then calls ready with the kubeconfig's path.
func Connect(ctx context.Context, stateDir string, ready func(kubeconfig string)) error {
	dir := filepath.Clean(stateDir)
	l := layout{name: filepath.Base(dir), home: filepath.Dir(filepath.Dir(dir))}
	if err := ValidateName(l.name); err != nil {
		return err
	}
	var o owner
	b, err := os.ReadFile(filepath.Join(l.dir(), "owner.json"))
	if err != nil {
		return fmt.Errorf("cluster %s: %w", l.name, err)
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return fmt.Errorf("cluster %s: owner.json: %w", l.name, err)
	}
	fwd, err := startForwarder(l.hubNetnsPath(), net.JoinHostPort(hubIP().String(), strconv.Itoa(APIServerPort)))
	if err != nil {
		return fmt.Errorf("cluster %s: apiserver forwarder: %w", l.name, err)
	}
	defer fwd.Close()
	cfg, err := clientcmd.LoadFromFile(l.kubeconfig())
	if err != nil {
		return fmt.Errorf("cluster %s: %w", l.name, err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + fwd.Addr()
	}
	tmp := l.kubeconfig() + ".new"
	if err := clientcmd.WriteToFile(*cfg, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.kubeconfig()); err != nil {
		return err
	}
	o.Pid, o.StartTime = os.Getpid(), processStartTime(os.Getpid())
	b, _ = json.Marshal(o)
	tmp = filepath.Join(l.dir(), "owner.json.new")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(l.dir(), "owner.json")); err != nil {
		return err
	}
	if ready != nil {
		ready(l.kubeconfig())
	}
	<-ctx.Done()
	return nil
}
