package xdsproxy

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/types/known/structpb"
)

// A TLS transport socket is accepted (Envoy would) and named, since xdsproxy speaks plaintext;
// istiod's auto-mTLS match for endpoints labelled tlsMode=istio is named only when it matches
// every endpoint.
func TestClustersNameWhatXDSProxyDoesNotDo(t *testing.T) {
	tls := &corev3.TransportSocket{Name: "envoy.transport_sockets.tls"}
	raw := &corev3.TransportSocket{Name: rawBuffer}
	assert.Empty(t, notHonouredOf(&clusterv3.Cluster{Name: "plain"}))
	assert.Empty(t, notHonouredOf(&clusterv3.Cluster{Name: "raw", TransportSocket: raw}))
	assert.Equal(t, []string{"upstream_tls"}, notHonouredOf(&clusterv3.Cluster{Name: "tls", TransportSocket: tls}))
	istio, _ := structpb.NewStruct(map[string]any{"tlsMode": "istio"})
	auto := &clusterv3.Cluster{Name: "auto", TransportSocketMatches: []*clusterv3.Cluster_TransportSocketMatch{
		{Name: "tlsMode-istio", Match: istio, TransportSocket: tls},
		{Name: "tlsMode-disabled", Match: &structpb.Struct{}, TransportSocket: raw},
	}}
	assert.Empty(t, notHonouredOf(auto), "auto mTLS: only endpoints with the label would use TLS")
	every := &clusterv3.Cluster{Name: "every", TransportSocketMatches: []*clusterv3.Cluster_TransportSocketMatch{
		{Name: "all", Match: &structpb.Struct{}, TransportSocket: tls}}}
	assert.Equal(t, []string{"upstream_tls"}, notHonouredOf(every))
}
