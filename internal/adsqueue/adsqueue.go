// Package adsqueue sends an ADS stream's requests from a goroutine of their own, so the loop
// that receives responses never waits on a send.
//
// A control plane that is writing a large response stops reading requests until the write is
// done (istiod's connection loop sends a push and reads the next request in turn, through a
// one-request buffer). A client that sends its ACK or its new EDS subscription from its receive
// loop then waits on the control plane while the control plane waits on it: HTTP/2 flow control
// holds both writes, and neither side moves again. istiod at 23664 ServiceEntries sent a 9 MB
// CDS response while the oracle client was sending a 380 KB EDS subscription; no response
// followed for the five minutes that remained. Envoy's network I/O is asynchronous and never
// meets this, so a client that stands for Envoy must not either.
package adsqueue

import (
	"context"
	"sync"
)

// Queue holds the requests waiting to go out on one stream, in order, and a goroutine that sends
// them. A request put with a key replaces the one with the same key still waiting (a State of the
// World request carries the whole subscription and the latest ACK, so only the newest of a type
// matters); a request put without one is always sent (a delta request's subscribe and unsubscribe
// lists add up).
type Queue[T any] struct {
	send func(T) error
	stop context.CancelFunc

	mu      sync.Mutex
	pending []entry[T]
	err     error
	wake    chan struct{}
	done    chan struct{}
}

type entry[T any] struct {
	key string
	req T
}

// Start starts sending with send until ctx ends or a send fails; a failed send calls stop (the
// stream's cancel, so the receive loop ends too) and Err reports it.
func Start[T any](ctx context.Context, send func(T) error, stop context.CancelFunc) *Queue[T] {
	q := &Queue[T]{send: send, stop: stop, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run(ctx)
	return q
}

// Put queues req; with a non-empty key it replaces a waiting request of the same key in place.
func (q *Queue[T]) Put(key string, req T) {
	q.mu.Lock()
	replaced := false
	if key != "" {
		for i := range q.pending {
			if q.pending[i].key == key {
				q.pending[i].req, replaced = req, true
				break
			}
		}
	}
	if !replaced {
		q.pending = append(q.pending, entry[T]{key, req})
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Err is the send error that stopped the queue, or nil.
func (q *Queue[T]) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// Done is closed when the sending goroutine has ended.
func (q *Queue[T]) Done() <-chan struct{} { return q.done }

func (q *Queue[T]) run(ctx context.Context) {
	defer close(q.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		for {
			q.mu.Lock()
			if len(q.pending) == 0 {
				q.mu.Unlock()
				break
			}
			e := q.pending[0]
			q.pending = q.pending[1:]
			q.mu.Unlock()
			if err := q.send(e.req); err != nil {
				q.mu.Lock()
				q.err = err
				q.mu.Unlock()
				if q.stop != nil {
					q.stop()
				}
				return
			}
		}
	}
}
