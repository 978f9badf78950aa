package kube

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	k8sjson "sigs.k8s.io/json"
)

// The ServiceEntry watch is decoded in one pass per event. client-go's watch decoder reads every
// event five times before the spec reaches protojson: the JSON framer, the WatchEvent envelope
// (the object kept as raw bytes), SimpleMetaFactory.Interpret (a whole encoding/json pass only to
// read apiVersion and kind), then the object itself, each JSON pass validating the bytes first.
// The initial state comes as such a watch (WatchList), so at 5000 and 50 000 ServiceEntries this
// was the largest share of the control plane's CPU before the sync gate opens (the
// BenchmarkHeapPerEndpoint CPU profile), with the GC its garbage caused.
//
// Here the stream is framed by line (the apiserver writes one event per line; JSON escapes
// newlines inside strings), the envelope, the metadata the informer keeps and the spec's bytes
// come out of one decode, and protojson reads the spec. Fields the control plane never reads
// (managedFields, labels, annotations other than the WatchList bookmark's) are skipped, not
// decoded.

// maxEventBytes bounds one watch event: far above any ServiceEntry the apiserver accepts (its
// request limit is 3 MiB), so a stream that is not line-framed fails fast instead of buffering.
const maxEventBytes = 16 << 20

// seEvent is one watch event off the wire. Object holds the fields of a ServiceEntry, of a
// bookmark (metadata only) and of the Status an ERROR event carries.
type seEvent struct {
	Type   watch.EventType `json:"type"`
	Object struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name              string      `json:"name"`
			Namespace         string      `json:"namespace"`
			UID               types.UID   `json:"uid"`
			ResourceVersion   string      `json:"resourceVersion"`
			Generation        int64       `json:"generation"`
			CreationTimestamp metav1.Time `json:"creationTimestamp"`
			Annotations       struct {
				InitialEventsEnd string `json:"k8s.io/initial-events-end"`
			} `json:"annotations"`
		} `json:"metadata"`
		Spec protoSpec `json:"spec"`
		// An ERROR event's Status. A ServiceEntry's own status is an object: kept raw and
		// read only for ERROR events.
		Status  json.RawMessage       `json:"status"`
		Message string                `json:"message"`
		Reason  metav1.StatusReason   `json:"reason"`
		Code    int32                 `json:"code"`
		Details *metav1.StatusDetails `json:"details"`
	} `json:"object"`
}

// seEventDecoder implements watch.Decoder for a ServiceEntry watch stream.
type seEventDecoder struct {
	body io.ReadCloser
	r    *bufio.Reader
	line []byte // an event longer than the reader's buffer, assembled
}

func newSEEventDecoder(body io.ReadCloser) *seEventDecoder {
	return &seEventDecoder{body: body, r: bufio.NewReaderSize(body, 256<<10)}
}

// readLine returns the next non-empty line, valid until the next call. The apiserver ends every
// event with a newline, so bytes after the last one are a cut-off event.
func (d *seEventDecoder) readLine() ([]byte, error) {
	for {
		b, err := d.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			d.line = append(d.line[:0], b...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(d.line) > maxEventBytes {
					return nil, fmt.Errorf("watch event over %d bytes: not a line-framed JSON watch stream", maxEventBytes)
				}
				b, err = d.r.ReadSlice('\n')
				d.line = append(d.line, b...)
			}
			b = d.line
		}
		t := bytes.TrimSpace(b)
		switch {
		case err == nil && len(t) > 0:
			return t, nil
		case errors.Is(err, io.EOF) && len(t) > 0:
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
	}
}

// Decode returns the next event: a *ConvertedServiceEntry for ADDED, MODIFIED, DELETED and
// BOOKMARK (metadata only), a *metav1.Status for ERROR. The conversion is done here, in the
// watch's own goroutine, while the apiserver is still sending: the informer's transform would
// do it in the reflector's, and with WatchList only once the whole initial state has arrived.
func (d *seEventDecoder) Decode() (watch.EventType, runtime.Object, error) {
	line, err := d.readLine()
	if err != nil {
		return "", nil, err
	}
	var ev seEvent
	if err := k8sjson.UnmarshalCaseSensitivePreserveInts(line, &ev); err != nil {
		return "", nil, fmt.Errorf("decode ServiceEntry watch event: %w", err)
	}
	o := &ev.Object
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
	case watch.Error:
		st := &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: o.APIVersion, Kind: o.Kind},
			Message: o.Message, Reason: o.Reason, Code: o.Code, Details: o.Details}
		_ = k8sjson.UnmarshalCaseSensitivePreserveInts(o.Status, &st.Status) // a string in a Status
		return ev.Type, st, nil
	default:
		return "", nil, fmt.Errorf("watch event of unknown type %q", ev.Type)
	}
	if o.Kind != "ServiceEntry" || o.APIVersion != seGV.String() {
		return "", nil, fmt.Errorf("watch event object is %s %s, want %s ServiceEntry", o.APIVersion, o.Kind, seGV)
	}
	m := &o.Metadata
	if ev.Type == watch.Bookmark {
		// Only its resourceVersion and the WatchList annotation mean anything.
		bm := &ConvertedServiceEntry{ObjectMeta: metav1.ObjectMeta{ResourceVersion: m.ResourceVersion}}
		if v := m.Annotations.InitialEventsEnd; v != "" {
			bm.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: v}
		}
		return ev.Type, bm, nil
	}
	// TypeMeta stays empty, as client-go's decoder leaves typed objects.
	return ev.Type, convertServiceEntry(&wireServiceEntry{
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID,
			ResourceVersion: m.ResourceVersion, Generation: m.Generation, CreationTimestamp: m.CreationTimestamp},
		Spec: o.Spec}), nil
}

// Close closes the response body (which ends a blocked Decode).
func (d *seEventDecoder) Close() { _ = d.body.Close() }

// seListWatch lists with rc (client-go's decoding: the reflector lists only when WatchList cannot
// be used) and watches through seEventDecoder.
func seListWatch(rc rest.Interface) *cache.ListWatch {
	lw := cache.NewListWatchFromClient(rc, "serviceentries", metav1.NamespaceAll, fields.Everything())
	watchFn := func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.Watch = true
		req := rc.Get().Resource("serviceentries").VersionedParams(&opts, metav1.ParameterCodec)
		body, err := req.Stream(ctx)
		if err != nil {
			return nil, err
		}
		return watch.NewStreamWatcher(newSEEventDecoder(body),
			apierrors.NewClientErrorReporter(http.StatusInternalServerError, "GET", "ServiceEntryWatchDecoding")), nil
	}
	lw.WatchFuncWithContext = watchFn
	lw.WatchFunc = func(opts metav1.ListOptions) (watch.Interface, error) { return watchFn(context.Background(), opts) }
	return lw
}
