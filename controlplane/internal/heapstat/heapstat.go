// Package heapstat measures the live heap for the control plane's memory tests and benchmarks.
package heapstat

import "runtime"

// Live returns the heap in use after two garbage collections (the second also frees what
// finalizers of the first released), so that only reachable memory is counted.
func Live() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
