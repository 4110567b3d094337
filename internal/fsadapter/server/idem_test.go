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

// TestIdemCacheReadBytes: the data of remembered effect-free outcomes stays within
// maxRememberedReadBytes, the oldest forgotten first; writes are never forgotten for it; an
// effect-free outcome larger than the whole bound is not remembered.
func TestIdemCacheReadBytes(t *testing.T) {
	c := newIdemCache(tooladapter.Limits{MaxIdempotencyKeys: 100, IdempotencyTtlMs: 60000})
	now := time.Now()
	quarter := make([]byte, maxRememberedReadBytes/4)
	finish := func(key string, effectFree bool, data []byte) {
		t.Helper()
		e, ok := c.add(key, [32]byte{}, now)
		if !ok {
			t.Fatalf("add %s refused", key)
		}
		e.effectFree = effectFree
		c.finish(e, outcome{data: data}, now)
	}
	remembered := func(key string) bool { return c.lookup(key, now) != nil }
	finish("w1", false, []byte(`{"created":true}`))
	for _, k := range []string{"r1", "r2", "r3", "r4"} {
		finish(k, true, quarter)
	}
	finish("w2", false, []byte(`{"created":false}`))
	if c.readBytes != maxRememberedReadBytes || !remembered("r1") {
		t.Fatalf("four quarters: %d bytes counted, r1 remembered %v", c.readBytes, remembered("r1"))
	}
	finish("r5", true, quarter)
	if remembered("r1") || !remembered("r2") || !remembered("r5") || !remembered("w1") || !remembered("w2") {
		t.Fatal("a fifth quarter did not forget exactly the oldest read")
	}
	if c.readBytes != maxRememberedReadBytes {
		t.Fatalf("%d bytes counted", c.readBytes)
	}
	finish("huge", true, make([]byte, maxRememberedReadBytes+1))
	if remembered("huge") || !remembered("r2") {
		t.Fatal("an outcome larger than the bound was remembered, or made room for itself")
	}
	// Forgetting by expiry uncounts the data too.
	for _, k := range []string{"r2", "r3", "r4", "r5"} {
		if c.lookup(k, now.Add(time.Hour)) != nil {
			t.Fatalf("%s outlived its ttl", k)
		}
	}
	if c.readBytes != 0 {
		t.Fatalf("%d bytes counted after every read expired", c.readBytes)
	}
}

// TestIdleMemoriesBounded: the memory of a scope without a live grant keeps only outcomes of
// writes and edits, is forgotten once they have expired, and at most maxIdleMemories such
// memories are kept, those whose newest outcome expires first forgotten first.
func TestIdleMemoriesBounded(t *testing.T) {
	s := &Server{memories: map[scope]*idemCache{}}
	l := tooladapter.Limits{MaxIdempotencyKeys: 8, IdempotencyTtlMs: 60_000}
	t0 := time.Now()
	idle := func(i int, at time.Time) scope {
		t.Helper()
		sc := scope{root: "/r", sessionID: "s", generation: int64(i)}
		m := s.memory(sc, l, at)
		w, _ := m.add("write", [32]byte{}, at)
		m.settle(w, outcome{}, at)
		r, _ := m.add("read", [32]byte{}, at)
		r.effectFree = true
		m.settle(r, outcome{data: []byte(`{"content":"x"}`)}, at)
		m.grants--
		m.dropReads()
		if m.lookup("read", at) != nil || m.lookup("write", at) == nil || m.readBytes != 0 {
			t.Fatalf("idle memory %d keeps %v", i, m.m)
		}
		return sc
	}
	first := idle(0, t0)
	for i := 1; i <= maxIdleMemories; i++ {
		idle(i, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if _, ok := s.memories[first]; !ok {
		t.Fatal("an idle memory was forgotten before the bound was passed")
	}
	live := s.memory(scope{root: "/r", sessionID: "live"}, l, t0.Add(time.Second))
	if len(s.memories) != maxIdleMemories+1 {
		t.Fatalf("%d memories, want %d idle and the live one", len(s.memories), maxIdleMemories)
	}
	if _, ok := s.memories[first]; ok {
		t.Fatal("the idle memory whose outcome expires first was kept past the bound")
	}
	s.memory(scope{root: "/r", sessionID: "later"}, l, t0.Add(2*time.Minute))
	if len(s.memories) != 2 || s.memories[scope{root: "/r", sessionID: "live"}] != live {
		t.Fatalf("after every idle memory's outcomes expired: %d memories", len(s.memories))
	}
}
