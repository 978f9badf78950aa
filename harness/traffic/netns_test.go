package traffic

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/netns"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

// TestAttackDialsIntoNetworkNamespace: with netns.Dialer as the dial hook, the attack reaches a
// server listening on the loopback of a network namespace this test creates (the way the local
// substrate's gateway is reached).
func TestAttackDialsIntoNetworkNamespace(t *testing.T) {
	prereq.Root(t, "this test creates a network namespace")
	name := fmt.Sprintf("meshchaos-traffic-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("bring lo up: %v: %s", err, out)
	}
	path := netns.Path(name)
	ln, err := netns.Listen(path, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var served atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) })}
	go srv.Serve(ln)
	defer srv.Close()

	agg, err := Run(context.Background(), Options{
		Targets:     []Target{{URL: "http://" + ln.Addr().String() + "/"}},
		Rate:        50,
		Duration:    time.Second,
		DialContext: netns.Dialer(path),
	})
	require.NoError(t, err)
	s := agg.Summary(nil)
	assert.InDelta(t, 50, s.Requests, 2)
	assert.Equal(t, map[string]int64{"200": s.Requests}, s.ByCode)
	assert.Equal(t, s.Requests, served.Load(), "every request reached the server inside the namespace")
}
