package xds

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"unicode/utf8"
	"unsafe"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A SotW proxy repeats every name it is subscribed to in each request, its ACKs included: after
// an endpoint change, 1000 Envoys subscribed to 1000 clusters each send a million names, and
// proto.Unmarshal allocates (and checks as UTF-8) every one of them, each a copy of a name the
// control plane already holds. That decoding was the largest share of the server's CPU in the
// EndpointChangeACKed1000 SotW profile, with the GC it fed. decodeRequest reads the names
// itself and hands out one shared string per distinct name (as istiod's connections share the
// names of its push context); the request's other fields go through proto.Unmarshal.

// Proxies that share a scope subscribe to the same names, in the same order: their requests
// carry byte-for-byte the same names. Such a list is decoded once and its slice handed to every
// request that repeats it (nameLists): nobody changes a request's names (go-control-plane's
// server copies them into its subscription; the watch cache only compares them).

// requestNameField is DiscoveryRequest.resource_names' field number.
const requestNameField = 3

// maxInterned bounds the shared names: above it the table starts over, so names a proxy made up
// cost the control plane at most this many strings (their memory is the proxies' to spend on
// the stream, not the process's forever).
const maxInterned = 1 << 18

// names is the process's table of shared resource names.
var names = newInternTable(maxInterned)

// lists is the process's table of recent name lists.
var lists = newNameLists(minListNames, maxListBytes)

// minListNames is the fewest names a list must have to be remembered: shorter ones are cheap.
const minListNames = 8

// maxListBytes bounds the remembered lists (their wire bytes and their slices); above it the
// table starts over.
const maxListBytes = 32 << 20

// nameLists remembers name lists by their wire bytes.
type nameLists struct {
	mu       sync.RWMutex
	seed     maphash.Seed
	m        map[uint64]*nameList
	bytes    int
	min, max int
}

type nameList struct {
	raw   []byte // the resource_names fields as they were on the wire
	names []string
}

func newNameLists(minNames, maxBytes int) *nameLists {
	return &nameLists{seed: maphash.MakeSeed(), m: map[uint64]*nameList{}, min: minNames, max: maxBytes}
}

// get returns the names a list with these wire bytes decoded to, or nil, and the bytes' hash.
func (l *nameLists) get(raw []byte) ([]string, uint64) {
	h := maphash.Bytes(l.seed, raw)
	l.mu.RLock()
	e := l.m[h]
	l.mu.RUnlock()
	if e != nil && bytes.Equal(e.raw, raw) {
		return e.names, h
	}
	return nil, h
}

// put remembers names as the list with wire bytes raw (hash h).
func (l *nameLists) put(h uint64, raw []byte, names []string) {
	size := len(raw) + len(names)*int(unsafe.Sizeof(""))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bytes+size > l.max {
		clear(l.m)
		l.bytes = 0
	}
	if old := l.m[h]; old != nil {
		l.bytes -= len(old.raw) + len(old.names)*int(unsafe.Sizeof(""))
	}
	l.m[h] = &nameList{raw: bytes.Clone(raw), names: names}
	l.bytes += size
}

// internTable maps a name's bytes to one shared string.
type internTable struct {
	mu  sync.RWMutex
	m   map[string]string
	max int
}

func newInternTable(max int) *internTable {
	return &internTable{m: map[string]string{}, max: max}
}

// len is the number of shared names.
func (t *internTable) len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.m)
}

// intern fills out[i] with the shared string of raw[i], adding the names it has not seen. A
// name that is not UTF-8 is an error, as proto.Unmarshal's for a string field.
func (t *internTable) intern(raw [][]byte, out []string) error {
	missing := 0
	t.mu.RLock()
	for i, b := range raw {
		s, ok := t.m[string(b)] // a map lookup by string(b) does not allocate
		if ok {
			out[i] = s
		} else {
			missing++
		}
	}
	t.mu.RUnlock()
	if missing == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, b := range raw {
		if out[i] != "" || len(b) == 0 {
			continue
		}
		if s, ok := t.m[string(b)]; ok {
			out[i] = s
			continue
		}
		if !utf8.Valid(b) {
			return fmt.Errorf("resource name %q: invalid UTF-8", b)
		}
		if len(t.m) >= t.max {
			clear(t.m)
		}
		s := string(b)
		t.m[s] = s
		out[i] = s
	}
	return nil
}

// decodeRequest decodes b into req as proto.Unmarshal does, with req.ResourceNames shared
// through table, and through known (when not nil) for a list of names it has seen.
func decodeRequest(b []byte, req *discovery.DiscoveryRequest, table *internTable, known *nameLists) error {
	// First pass: find the names, and whether they are one run of fields (as every encoder
	// writes a repeated field; the wire allows them anywhere).
	count := 0
	first, end, contiguous := -1, -1, true
	for off := 0; off < len(b); {
		p := b[off:]
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, p[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		if num == requestNameField && typ == protowire.BytesType {
			count++
			switch {
			case first < 0:
				first = off
			case end != off:
				contiguous = false
			}
			end = off + n + m
		}
		off += n + m
	}
	if count == 0 {
		return proto.Unmarshal(b, req)
	}
	// Everything but the names goes through proto.Unmarshal.
	var rest []byte
	if contiguous {
		rest = append(append(make([]byte, 0, len(b)-(end-first)), b[:first]...), b[end:]...)
	} else {
		forEachField(b, func(name bool, field, _ []byte) {
			if !name {
				rest = append(rest, field...)
			}
		})
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	var region []byte
	var h uint64
	if contiguous && known != nil && count >= known.min {
		region = b[first:end]
		var shared []string
		if shared, h = known.get(region); shared != nil {
			req.ResourceNames = shared
			return nil
		}
	}
	raw := make([][]byte, 0, count)
	forEachField(b, func(name bool, _, value []byte) {
		if name {
			raw = append(raw, value)
		}
	})
	names := make([]string, count)
	if err := table.intern(raw, names); err != nil {
		return errors.Join(errors.New("decode DiscoveryRequest"), err)
	}
	req.ResourceNames = names
	if region != nil {
		known.put(h, region, names)
	}
	return nil
}

// forEachField calls fn with each field of b (already checked by decodeRequest's first pass):
// whether it is a resource name, the whole field, and a name's bytes.
func forEachField(b []byte, fn func(name bool, field, value []byte)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		name := num == requestNameField && typ == protowire.BytesType
		var v []byte
		if name {
			v, _ = protowire.ConsumeBytes(b[n:])
		}
		fn(name, b[:n+m], v)
		b = b[n+m:]
	}
}
