// Package hog is the noisy neighbour: a process that burns a set amount of CPU until it is
// stopped, so chaos can starve the pods that share its node.
package hog

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// period is the duty cycle's length: short enough that a fractional load looks steady to the
// CFS scheduler, long enough that the sleeps cost nothing.
const period = 100 * time.Millisecond

// MaxCPUs bounds --cpus: more busy goroutines than this is a typo, not a neighbour.
const MaxCPUs = 256

// plan splits cpus into busy goroutines and the busy share of each period: 1.5 CPUs are two
// goroutines busy 75 ms of every 100 ms.
func plan(cpus float64) (workers int, busy time.Duration) {
	workers = int(math.Ceil(cpus))
	return workers, time.Duration(float64(period) * cpus / float64(workers))
}

// Validate reports a --cpus value that cannot work, as a message for the user.
func Validate(cpus float64) error {
	if cpus <= 0 || cpus > MaxCPUs || math.IsNaN(cpus) {
		return fmt.Errorf("--cpus %v: choose a number of CPUs above 0 and at most %d (e.g. 1.5)", cpus, MaxCPUs)
	}
	return nil
}

// Run burns cpus CPUs (fractions allowed) until ctx ends.
func Run(ctx context.Context, cpus float64) error {
	if err := Validate(cpus); err != nil {
		return err
	}
	workers, busy := plan(cpus)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spin(ctx, busy)
		}()
	}
	wg.Wait()
	return nil
}

// spin is one worker: busy for busy of every period, asleep for the rest.
func spin(ctx context.Context, busy time.Duration) {
	var sink uint64
	for ctx.Err() == nil {
		start := time.Now()
		for time.Since(start) < busy {
			for i := 0; i < 1000; i++ {
				sink = sink*6364136223846793005 + 1442695040888963407
			}
		}
		if rest := period - time.Since(start); rest > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(rest):
			}
		}
	}
	_ = sink
}
