package adsclient

import (
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func resourceName(a *anypb.Any) string {
	m, err := a.UnmarshalNew()
	if err != nil {
		return ""
	}
	return Name(m)
}

// Name is a resource's name.
func Name(m proto.Message) string {
	switch r := m.(type) {
	case *cluster.Cluster:
		return r.GetName()
	case *endpoint.ClusterLoadAssignment:
		return r.GetClusterName()
	case *listener.Listener:
		return r.GetName()
	case *route.RouteConfiguration:
		return r.GetName()
	}
	return ""
}
