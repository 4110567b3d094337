package server

import (
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

// TestIdemCacheEviction pins the cache's rules at the unit level: the oldest outcome goes
// first when it is full, running keys are never forgotten, expired keys are dropped, and a
// key that lookup forgot does not take a later entry with the same key with it.
func TestIdemCacheEviction(t *testing.T) {
	c := newIdemCache(tooladapter.Limits{MaxIdempotencyKeys: 3, IdempotencyTtlMs: 1000})
	t0 := time.Now()
	add := func(key string, at time.Duration) *idemEntry {
		t.Helper()
		e, ok := c.add(key, [32]byte{}, t0.Add(at))
		if !ok {
			t.Fatalf("add %s refused", key)
		}
		return e
	}
	has := func(keys ...string) {
		t.Helper()
		if len(c.m) != len(keys) {
			t.Fatalf("cache holds %d keys, want %v", len(c.m), keys)
		}
		for _, k := range keys {
			if c.m[k] == nil {
				t.Fatalf("cache lost %s, want %v", k, keys)
			}
		}
	}

	a, b := add("a", 0), add("b", 0)
	running := add("run", 0)
	c.finish(b, outcome{}, t0.Add(10*time.Millisecond)) // b's outcome is older than a's
	c.finish(a, outcome{}, t0.Add(20*time.Millisecond))
	add("d", 30*time.Millisecond) // full: b goes
	has("a", "run", "d")
	if _, ok := c.add("e", [32]byte{}, t0.Add(40*time.Millisecond)); !ok {
		t.Fatal("e refused while a could be forgotten")
	}
	has("run", "d", "e") // a went
	if _, ok := c.add("f", [32]byte{}, t0.Add(50*time.Millisecond)); ok {
		t.Fatal("f admitted into a cache full of running keys")
	}
	has("run", "d", "e")

	// Expired outcomes are dropped on the next add, full or not.
	for _, e := range []*idemEntry{c.m["d"], c.m["e"]} {
		c.finish(e, outcome{}, t0.Add(60*time.Millisecond))
	}
	c.finish(running, outcome{err: &tooladapter.ErrorBody{Code: "canceled", Retryable: true}}, t0.Add(70*time.Millisecond))
	has("d", "e") // a retryable outcome is forgotten at once
	if c.lookup("d", t0.Add(2*time.Second)) != nil {
		t.Fatal("expired d still found")
	}
	d2 := add("d", 2*time.Second) // a new d; the old one is still queued
	add("g", 2*time.Second)       // pops the old d and e, which expired, and must keep the new d
	has("d", "g")
	if c.m["d"] != d2 {
		t.Fatal("the new d was forgotten with the old one")
	}
	if len(c.done) != 0 {
		t.Fatalf("%d finished entries still queued", len(c.done))
	}
}
