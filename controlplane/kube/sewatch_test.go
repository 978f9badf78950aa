package kube

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restwatch "k8s.io/client-go/rest/watch"
)

// seJSON is a ServiceEntry as the apiserver sends it, with what the decoder must skip
// (managedFields, labels, a large annotation, a status) and what it must keep.
func seJSON(name, rv string, endpoints int) string {
	var eps []string
	for i := range endpoints {
		eps = append(eps, fmt.Sprintf(`{"address":"10.%d.%d.%d","labels":{"app":"%s"},"ports":{"http":9090}}`, i>>16, i>>8&255, i&255, name))
	}
	return `{"apiVersion":"networking.istio.io/v1","kind":"ServiceEntry",` +
		`"metadata":{"name":"` + name + `","namespace":"ns","uid":"uid-` + name + `","resourceVersion":"` + rv + `","generation":3,` +
		`"creationTimestamp":"2026-11-24T08:00:00Z","labels":{"team":"x"},` +
		`"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"a\":\"line1\\nline2\"}"},` +
		`"managedFields":[{"manager":"meshchaos","operation":"Update","apiVersion":"networking.istio.io/v1","time":"2026-11-24T08:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:hosts":{}}}}]},` +
		`"spec":{"hosts":["` + name + `.test"],"resolution":"STATIC","location":"MESH_INTERNAL","futureField":{"x":1},` +
		`"ports":[{"number":80,"name":"http","protocol":"HTTP","targetPort":8080}],"endpoints":[` + strings.Join(eps, ",") + `]},` +
		`"status":{"conditions":[{"type":"Reconciled","status":"True"}]}}`
}

// watchStream encodes events as the apiserver does: one compact JSON WatchEvent per line.
func watchStream(t *testing.T, events ...[2]string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, e := range events {
		require.NoError(t, enc.Encode(metav1.WatchEvent{Type: e[0], Object: runtime.RawExtension{Raw: []byte(e[1])}}))
	}
	return buf.Bytes()
}

// clientGoDecoder is client-go's own decoding of the same stream (what the REST client's Watch
// does), the reference the one-pass decoder is checked against.
func clientGoDecoder(stream []byte) watch.Decoder {
	info, _ := runtime.SerializerInfoForMediaType(seCodecs().WithoutConversion().SupportedMediaTypes(), runtime.ContentTypeJSON)
	frames := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream)))
	dec := seCodecs().WithoutConversion().DecoderToVersion(info.Serializer, seGV)
	return restwatch.NewDecoder(streaming.NewDecoder(frames, info.StreamSerializer.Serializer), dec)
}

func TestServiceEntryWatchDecoderMatchesClientGo(t *testing.T) {
	bookmark := `{"apiVersion":"networking.istio.io/v1","kind":"ServiceEntry","metadata":{"resourceVersion":"99",` +
		`"creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}`
	stream := watchStream(t,
		[2]string{"ADDED", seJSON("a", "7", 1)},
		[2]string{"ADDED", seJSON("big", "8", 8000)}, // longer than the decoder's read buffer
		[2]string{"BOOKMARK", bookmark},
		[2]string{"MODIFIED", seJSON("a", "10", 2)},
		[2]string{"DELETED", seJSON("a", "11", 2)},
	)
	require.Greater(t, len(seJSON("big", "8", 8000)), 256<<10)

	ours := newSEEventDecoder(io.NopCloser(bytes.NewReader(stream)))
	ref := clientGoDecoder(stream)
	for i := 0; ; i++ {
		wantType, wantObj, wantErr := ref.Decode()
		gotType, gotObj, gotErr := ours.Decode()
		if wantErr == io.EOF {
			require.ErrorIs(t, gotErr, io.EOF, "event %d: the stream ended", i)
			require.Equal(t, 5, i)
			break
		}
		require.NoError(t, wantErr)
		require.NoError(t, gotErr, "event %d", i)
		assert.Equal(t, wantType, gotType, "event %d", i)
		got := gotObj.(*ConvertedServiceEntry)
		if gotType == watch.Bookmark {
			assert.Equal(t, "true", got.Annotations[metav1.InitialEventsAnnotationKey])
			assert.Equal(t, "99", got.ResourceVersion)
			continue
		}
		// What the informer's transform makes of client-go's decoding.
		conv, err := strip(wantObj)
		require.NoError(t, err)
		want := conv.(*ConvertedServiceEntry)
		require.NotNil(t, want.Conv, "event %d", i)
		assert.Equal(t, want.TypeMeta, got.TypeMeta, "event %d", i)
		assert.Equal(t, want.Name, got.Name, "event %d", i)
		assert.Equal(t, want.Namespace, got.Namespace, "event %d", i)
		assert.Equal(t, want.UID, got.UID, "event %d", i)
		assert.Equal(t, want.ResourceVersion, got.ResourceVersion, "event %d", i)
		assert.Equal(t, want.Generation, got.Generation, "event %d", i)
		assert.True(t, want.CreationTimestamp.Equal(&got.CreationTimestamp), "event %d", i)
		assert.Equal(t, want.Conv, got.Conv, "event %d: conversion differs", i)
		assert.Equal(t, want.Skips, got.Skips, "event %d", i)
		assert.Len(t, got.Conv.Endpoints, len(wantObj.(*wireServiceEntry).Spec.se.GetEndpoints()), "event %d", i)
		assert.Nil(t, got.Annotations, "event %d: annotations are skipped", i)
		again, err := strip(got)
		require.NoError(t, err)
		assert.Same(t, got, again, "the informer's transform leaves a converted event alone")
	}
}

func TestServiceEntryWatchDecoderErrors(t *testing.T) {
	t.Run("ERROR event is a Status the reflector understands", func(t *testing.T) {
		gone := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
			`"message":"too old resource version: 1 (5)","reason":"Expired","code":410}`
		d := newSEEventDecoder(io.NopCloser(bytes.NewReader(watchStream(t, [2]string{"ERROR", gone}))))
		typ, obj, err := d.Decode()
		require.NoError(t, err)
		assert.Equal(t, watch.Error, typ)
		serr := apierrors.FromObject(obj)
		assert.True(t, apierrors.IsResourceExpired(serr), "got %v", serr)
		assert.Equal(t, metav1.StatusFailure, obj.(*metav1.Status).Status)
	})
	t.Run("a cut-off event is an unexpected EOF", func(t *testing.T) {
		s := watchStream(t, [2]string{"ADDED", seJSON("a", "1", 1)})
		d := newSEEventDecoder(io.NopCloser(bytes.NewReader(s[:len(s)/2])))
		_, _, err := d.Decode()
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	})
	t.Run("another kind is refused", func(t *testing.T) {
		pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","resourceVersion":"1"}}`
		d := newSEEventDecoder(io.NopCloser(bytes.NewReader(watchStream(t, [2]string{"ADDED", pod}))))
		_, _, err := d.Decode()
		assert.ErrorContains(t, err, "want networking.istio.io/v1 ServiceEntry")
	})
	t.Run("not JSON", func(t *testing.T) {
		d := newSEEventDecoder(io.NopCloser(strings.NewReader("<html>proxy error</html>\n")))
		_, _, err := d.Decode()
		assert.ErrorContains(t, err, "decode ServiceEntry watch event")
	})
}
