package ndjson

import (
	"math/bits"
	"sync"
)

// Large line buffers are shared through a pool instead of being allocated per line. A fresh
// multi-MiB slice costs far more than its copy: the runtime zeroes it, and the pages it touches
// first fault in, which made up over half of the CPU time of a 4 MiB fs.read through the
// daemon. A sync.Pool also bounds what an idle process holds: buffers nobody takes again are
// dropped after two garbage collections, and the runtime collects at least every two minutes,
// so a connection that once carried a large line does not pin its buffer forever.

const (
	minPooledShift = 16 // 64 KiB: smaller buffers are cheap to allocate and are not pooled
	maxPooledShift = 26 // 64 MiB: beyond every line limit the module uses
	// MinPooledBytes is the smallest capacity GetBuffer takes from the pool; smaller requests
	// are plain allocations.
	MinPooledBytes = 1 << minPooledShift
)

// pools holds one pool per power-of-two size class; a pooled buffer's capacity is at least its
// class size.
var pools [maxPooledShift - minPooledShift + 1]sync.Pool

// GetBuffer returns an empty slice with a capacity of at least n. From MinPooledBytes up it
// comes from a pool of earlier buffers when one is free; hand it back with PutBuffer once
// nothing refers to it any more.
func GetBuffer(n int) []byte {
	if n < MinPooledBytes || n > 1<<maxPooledShift {
		return make([]byte, 0, n)
	}
	class := bits.Len(uint(n-1)) - minPooledShift // the smallest class that holds n bytes
	if p, _ := pools[class].Get().(*[]byte); p != nil {
		return (*p)[:0]
	}
	return make([]byte, 0, 1<<(class+minPooledShift))
}

// PutBuffer hands b back for reuse by GetBuffer. The caller must not use b, or any slice of
// it, afterwards. Buffers smaller than MinPooledBytes, or larger than any class, are left to
// the garbage collector.
func PutBuffer(b []byte) {
	c := cap(b)
	if c < MinPooledBytes || c > 1<<maxPooledShift {
		return
	}
	class := bits.Len(uint(c)) - 1 - minPooledShift // the largest class that b holds
	b = b[:0]
	pools[class].Put(&b)
}
