package kube

import (
	"fmt"
	"sync"

	apinet "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The ServiceEntry informer decodes with protojson instead of istio.io/client-go's typed client.
// The typed ServiceEntry's UnmarshalJSON is golang/protobuf's jsonpb, which decodes every message
// level through encoding/json into maps first: at 50 000 ServiceEntries it was most of the
// control plane's CPU before the sync gate could open (the CPU profile of the
// BenchmarkHeapPerEndpoint run). protojson reads the same JSON mapping directly.

// wireServiceEntry is a ServiceEntry as it comes off the wire: metadata and a spec decoded by
// protojson. The informer's transform (strip) turns it into a ConvertedServiceEntry at once.
type wireServiceEntry struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              protoSpec `json:"spec"`
}

// protoSpec holds a ServiceEntry spec decoded by protojson.
type protoSpec struct{ se *apinet.ServiceEntry }

// seUnmarshal matches istio.io/api's own (jsonpb with AllowUnknownFields): a field this version
// does not know is ignored, not an error.
var seUnmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

// UnmarshalJSON decodes the spec with protojson.
func (p *protoSpec) UnmarshalJSON(b []byte) error {
	p.se = &apinet.ServiceEntry{}
	return seUnmarshal.Unmarshal(b, p.se)
}

// MarshalJSON encodes the spec (for completeness: the informer never encodes).
func (p protoSpec) MarshalJSON() ([]byte, error) {
	if p.se == nil {
		return []byte("{}"), nil
	}
	return protojson.Marshal(p.se)
}

// DeepCopyObject implements runtime.Object.
func (w *wireServiceEntry) DeepCopyObject() runtime.Object {
	out := &wireServiceEntry{TypeMeta: w.TypeMeta}
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if w.Spec.se != nil {
		out.Spec.se = proto.Clone(w.Spec.se).(*apinet.ServiceEntry)
	}
	return out
}

// wireServiceEntryList is a LIST of ServiceEntries off the wire.
type wireServiceEntryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []wireServiceEntry `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *wireServiceEntryList) DeepCopyObject() runtime.Object {
	out := &wireServiceEntryList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopyObject().(*wireServiceEntry))
	}
	return out
}

var seGV = schema.GroupVersion{Group: "networking.istio.io", Version: "v1"}

var seCodecs = sync.OnceValue(func() serializer.CodecFactory {
	s := runtime.NewScheme()
	s.AddKnownTypeWithName(seGV.WithKind("ServiceEntry"), &wireServiceEntry{})
	s.AddKnownTypeWithName(seGV.WithKind("ServiceEntryList"), &wireServiceEntryList{})
	metav1.AddToGroupVersion(s, seGV)
	return serializer.NewCodecFactory(s)
})

// newServiceEntryInformer is an informer of every ServiceEntry, decoding with protojson, whose
// store holds ConvertedServiceEntries (transform).
func newServiceEntryInformer(cfg *rest.Config, transform cache.TransformFunc) (cache.SharedIndexInformer, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &seGV
	cfg.APIPath = "/apis"
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = seCodecs().WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("ServiceEntry client: %w", err)
	}
	// Its watch events are ConvertedServiceEntries already (seEventDecoder); a LIST's items are
	// wireServiceEntries, converted by the transform.
	inf := cache.NewSharedIndexInformer(seListWatch(rc), &ConvertedServiceEntry{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := inf.SetTransform(transform); err != nil {
		return nil, err
	}
	return inf, nil
}
