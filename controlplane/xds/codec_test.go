package xds

import (
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshchaos/meshchaos/controlplane/internal/heapstat"
)

// TestEncodedResponsesCostTheirSize: a response waits in its encoded buffer until the proxy has
// read it, so a push to n proxies holds n of them. Fifty 100 KB responses held take less than
// twice their size (gRPC's default codec put each in a 1 MiB buffer: 50 MiB). They decode to
// what was encoded.
func TestEncodedResponsesCostTheirSize(t *testing.T) {
	resp := &discovery.DiscoveryResponse{VersionInfo: "v1", TypeUrl: "type.googleapis.com/x"}
	for range 100 {
		resp.Resources = append(resp.Resources, &anypb.Any{TypeUrl: "type.googleapis.com/x", Value: []byte(strings.Repeat("r", 1000))})
	}
	c := newCodec()
	one, err := c.Marshal(resp)
	require.NoError(t, err)
	size := one.Len()
	require.Greater(t, size, 100_000)
	var back discovery.DiscoveryResponse
	require.NoError(t, c.Unmarshal(one, &back))
	assert.Len(t, back.Resources, 100)
	one.Free()

	const n = 50
	held := make([]mem.BufferSlice, 0, n)
	before := heapstat.Live()
	for range n {
		b, err := c.Marshal(resp)
		require.NoError(t, err)
		held = append(held, b)
	}
	grown := heapstat.Live() - before
	assert.Less(t, grown, uint64(2*n*size), "%d responses of %d bytes held take %d bytes", n, size, grown)
	for _, b := range held {
		b.Free()
	}
}
