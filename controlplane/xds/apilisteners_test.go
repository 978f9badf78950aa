package xds

import (
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/controlplane/xds/watchcache"
)

// Proxyless clients that reconnect together to a restarted control plane (grpc-go opens an ADS
// stream per channel target) all ask for their scope's API listeners at once: only the first
// fills them, and none may be handed the cache before that fill is done. One that was got an
// empty LDS answer at version 0, and grpc-go dropped its listener ("resource has been
// removed": RPCs UNAVAILABLE for 100-360 ms) until the filled cache answered again
// (cp-oom-restart dataPlane=grpc, 2026-11-26).
func TestAPIListenersNeverServedBeforeTheirFill(t *testing.T) {
	c := NewCaches("p-")
	c.populate = func(sc *ScopeCaches, _ []*model.Entry) { sc.generated = true }
	filling, release := make(chan struct{}), make(chan struct{})
	c.fillAPI = func(sc *ScopeCaches) {
		close(filling)
		<-release
		sc.APIListeners.SetResources(map[string]types.Resource{"a.test:80": &listener.Listener{Name: "a.test:80"}})
	}
	node := &core.Node{Id: "grpc~10.0.0.1~a.ns~ns.svc.cluster.local"}
	first := make(chan *watchcache.Cache, 1)
	go func() { first <- c.ForNode(resourcev3.ListenerType, node) }()
	<-filling
	second := make(chan *watchcache.Cache, 1)
	go func() { second <- c.ForNode(resourcev3.ListenerType, node) }()
	select {
	case <-second:
		t.Fatal("a second proxyless client was handed the API listeners' cache while the first one's fill was under way")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	for _, ch := range []chan *watchcache.Cache{first, second} {
		lc := <-ch
		require.NotNil(t, lc)
		assert.Equal(t, 1, lc.NumResources())
	}
}
