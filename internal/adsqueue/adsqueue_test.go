package adsqueue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A blocked send holds the queue; what is put meanwhile waits in order, a keyed request
// replaces its waiting namesake in place, and an unkeyed one is never dropped.
func TestQueueKeepsOrderAndReplacesByKey(t *testing.T) {
	release := make(chan struct{})
	sent := make(chan string, 10)
	send := func(r string) error {
		if r == "first" {
			<-release
		}
		sent <- r
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := Start(ctx, send, cancel)
	q.Put("", "first")
	// Put never waits on the send in progress.
	done := make(chan struct{})
	go func() {
		q.Put("cds", "cds-ack-1")
		q.Put("eds", "eds-sub-1")
		q.Put("", "delta-a")
		q.Put("cds", "cds-ack-2")
		q.Put("", "delta-b")
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Put waited on a blocked send")
	}
	close(release)
	var got []string
	for len(got) < 5 {
		select {
		case r := <-sent:
			got = append(got, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("sent only %v", got)
		}
	}
	assert.Equal(t, []string{"first", "cds-ack-2", "eds-sub-1", "delta-a", "delta-b"}, got)
	assert.NoError(t, q.Err())
}

// A failed send stops the queue, cancels the stream (so its receive loop ends) and is reported.
func TestQueueStopsOnSendError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	boom := errors.New("stream broken")
	q := Start(ctx, func(string) error { return boom }, cancel)
	q.Put("cds", "ack")
	select {
	case <-q.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the queue did not stop")
	}
	require.ErrorIs(t, q.Err(), boom)
	assert.Error(t, ctx.Err(), "the stream's context is cancelled")
}
