package xds

import (
	"fmt"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// responsePool holds the buffers responses are encoded into: one size class per power of two
// from 256 B to 16 MiB, so a buffer is less than twice its response. gRPC's default pool has
// classes of 32 KiB and then 1 MiB: every CDS or EDS response between the two took a whole
// MiB, and a response stays in its buffer until the proxy has read it, so a push to many
// proxies, or proxies that read slowly, held ten times the memory the config needs.
var responsePool = func() mem.BufferPool {
	var exps []uint8
	for e := uint8(8); e <= 24; e++ {
		exps = append(exps, e)
	}
	p, err := mem.NewBinaryTieredBufferPool(exps...)
	if err != nil {
		panic(fmt.Sprintf("xds: response buffer pool: %v", err)) // the classes above are valid
	}
	return p
}()

// codec is gRPC's proto codec with responses encoded into responsePool's buffers and the
// resource names of requests shared (decodeRequest).
type codec struct{ encoding.CodecV2 }

func newCodec() codec { return codec{encoding.GetCodecV2("proto")} }

// Marshal encodes v into a buffer of responsePool.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := proto.MarshalOptions{UseCachedSize: true}.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := responsePool.Get(size)
	// UseCachedSize: the size was just computed, and responses are not changed while sent.
	if _, err := (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend((*buf)[:0], m); err != nil {
		responsePool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, responsePool)}, nil
}

// Unmarshal decodes v; a DiscoveryRequest's resource names are shared (decodeRequest).
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*discovery.DiscoveryRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decodeRequest(buf.ReadOnlyData(), req, names, lists)
}
