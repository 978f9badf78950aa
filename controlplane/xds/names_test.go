package xds

import (
	"fmt"
	"testing"
	"unsafe"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func ackOf(n int) *discovery.DiscoveryRequest {
	req := &discovery.DiscoveryRequest{VersionInfo: "v7", TypeUrl: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
		ResponseNonce: "42"}
	for i := range n {
		req.ResourceNames = append(req.ResourceNames, fmt.Sprintf("outbound|80||svc-%d.bulk.svc.cluster.local", i))
	}
	return req
}

// A request decodes to what proto.Unmarshal gives, whatever its fields and their order.
func TestDecodeRequestMatchesProto(t *testing.T) {
	meta, err := structpb.NewStruct(map[string]any{"LABELS": map[string]any{"app": "a"}})
	require.NoError(t, err)
	full := &discovery.DiscoveryRequest{VersionInfo: "v1", TypeUrl: "type.googleapis.com/x", ResponseNonce: "n1",
		Node:             &core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", Cluster: "c", Metadata: meta},
		ResourceNames:    []string{"a", "", "b|80||ü.test", "a"},
		ErrorDetail:      &status.Status{Code: 3, Message: "rejected"},
		ResourceLocators: []*discovery.ResourceLocator{{Name: "loc"}}}
	encoded, err := proto.Marshal(full)
	require.NoError(t, err)
	// The names split around other fields, and a field this version does not know.
	split := protowire.AppendTag(nil, requestNameField, protowire.BytesType)
	split = protowire.AppendString(split, "late")
	split = append(encoded, split...)
	split = protowire.AppendTag(split, 99, protowire.VarintType)
	split = protowire.AppendVarint(split, 5)

	for name, b := range map[string][]byte{"all fields": encoded, "names split, unknown field": split,
		"empty": nil, "ACK of 1000 names": must(proto.Marshal(ackOf(1000)))} {
		t.Run(name, func(t *testing.T) {
			var want discovery.DiscoveryRequest
			require.NoError(t, proto.Unmarshal(b, &want))
			known := newNameLists(2, 1<<20)
			// Without remembered lists, then twice with: decoded, then shared.
			for i, lists := range []*nameLists{nil, known, known} {
				var got discovery.DiscoveryRequest
				require.NoError(t, decodeRequest(b, &got, newInternTable(1000), lists))
				assert.True(t, proto.Equal(&want, &got), "decode %d: want %v\ngot  %v", i, &want, &got)
				assert.Equal(t, want.GetResourceNames(), got.GetResourceNames(), "decode %d", i)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Two requests naming the same resources share the strings: the second decode copies no name.
func TestDecodedNamesAreShared(t *testing.T) {
	table := newInternTable(1000)
	b := must(proto.Marshal(ackOf(100)))
	var first, second discovery.DiscoveryRequest
	require.NoError(t, decodeRequest(b, &first, table, nil))
	require.NoError(t, decodeRequest(b, &second, table, nil))
	for i := range first.ResourceNames {
		require.True(t, unsafe.StringData(first.ResourceNames[i]) == unsafe.StringData(second.ResourceNames[i]), "name %d is a copy", i)
	}
	assert.Equal(t, 100, table.len())

	allocs := testing.AllocsPerRun(20, func() {
		var r discovery.DiscoveryRequest
		_ = decodeRequest(b, &r, table, nil)
	})
	assert.Less(t, allocs, 20.0, "a repeated ACK of 100 names allocates per request, not per name")
}

// A list of names seen before is handed out as the same slice; another list is not taken for it.
func TestRepeatedNameListsAreShared(t *testing.T) {
	known := newNameLists(minListNames, 1<<20)
	table := newInternTable(1000)
	a, b := must(proto.Marshal(ackOf(100))), ackOf(100)
	b.ResourceNames[50] = "outbound|80||other.bulk.svc.cluster.local"
	var r1, r2, r3 discovery.DiscoveryRequest
	require.NoError(t, decodeRequest(a, &r1, table, known))
	require.NoError(t, decodeRequest(a, &r2, table, known))
	assert.True(t, unsafe.SliceData(r1.ResourceNames) == unsafe.SliceData(r2.ResourceNames), "the same list is shared")
	require.NoError(t, decodeRequest(must(proto.Marshal(b)), &r3, table, known))
	assert.Equal(t, b.ResourceNames, r3.ResourceNames)
	assert.False(t, unsafe.SliceData(r1.ResourceNames) == unsafe.SliceData(r3.ResourceNames), "another list is not taken for it")

	allocs := testing.AllocsPerRun(20, func() {
		var r discovery.DiscoveryRequest
		_ = decodeRequest(a, &r, table, known)
	})
	assert.Less(t, allocs, 10.0, "a repeated list costs a few allocations, whatever its length")

	// Bounded: lists beyond the byte bound start the table over.
	small := newNameLists(1, 3*len(a))
	for i := range 10 {
		req := ackOf(100)
		req.ResourceNames[0] = fmt.Sprint("x", i)
		var r discovery.DiscoveryRequest
		require.NoError(t, decodeRequest(must(proto.Marshal(req)), &r, table, small))
		assert.LessOrEqual(t, small.bytes, 3*len(a))
	}
}

// Made-up names cannot grow the table past its bound; they still decode.
func TestInternTableIsBounded(t *testing.T) {
	table := newInternTable(50)
	for round := range 10 {
		req := &discovery.DiscoveryRequest{}
		for i := range 30 {
			req.ResourceNames = append(req.ResourceNames, fmt.Sprintf("junk-%d-%d", round, i))
		}
		var got discovery.DiscoveryRequest
		require.NoError(t, decodeRequest(must(proto.Marshal(req)), &got, table, nil))
		assert.Equal(t, req.ResourceNames, got.ResourceNames)
		assert.LessOrEqual(t, table.len(), 50)
	}
}

// What proto.Unmarshal refuses is refused.
func TestDecodeRequestRefusesWhatProtoRefuses(t *testing.T) {
	bad := protowire.AppendTag(nil, requestNameField, protowire.BytesType)
	bad = protowire.AppendBytes(bad, []byte{0xff, 0xfe})
	good := must(proto.Marshal(ackOf(3)))
	for name, b := range map[string][]byte{"name not UTF-8": bad, "cut off": good[:len(good)-3]} {
		t.Run(name, func(t *testing.T) {
			var r discovery.DiscoveryRequest
			require.Error(t, proto.Unmarshal(b, &r), "the case must be one proto refuses")
			assert.Error(t, decodeRequest(b, &r, newInternTable(10), newNameLists(1, 1<<20)))
		})
	}
}

// The server's codec decodes requests this way and anything else as gRPC's proto codec.
func TestCodecDecodesRequests(t *testing.T) {
	c := newCodec()
	req := ackOf(10)
	var got discovery.DiscoveryRequest
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(must(proto.Marshal(req)))}, &got))
	assert.True(t, proto.Equal(req, &got))
	var other discovery.DeltaDiscoveryRequest
	delta := &discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a"}}
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(must(proto.Marshal(delta)))}, &other))
	assert.True(t, proto.Equal(delta, &other))
}

// BenchmarkDecodeACK1000: one SotW ACK naming 1000 clusters, as every proxy sends after each
// endpoint change, decoded by proto.Unmarshal and by decodeRequest.
func BenchmarkDecodeACK1000(b *testing.B) {
	raw := must(proto.Marshal(ackOf(1000)))
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r discovery.DiscoveryRequest
			if err := proto.Unmarshal(raw, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeRequest", func(b *testing.B) {
		table := newInternTable(maxInterned)
		b.ReportAllocs()
		for b.Loop() {
			var r discovery.DiscoveryRequest
			if err := decodeRequest(raw, &r, table, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeRequest-repeated-list", func(b *testing.B) {
		table, known := newInternTable(maxInterned), newNameLists(minListNames, maxListBytes)
		b.ReportAllocs()
		for b.Loop() {
			var r discovery.DiscoveryRequest
			if err := decodeRequest(raw, &r, table, known); err != nil {
				b.Fatal(err)
			}
		}
	})
}
