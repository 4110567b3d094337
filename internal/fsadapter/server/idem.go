package server

import (
	"encoding/json"
	"time"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

// outcome is the answer to one invocation: Data on success, Error otherwise.
type outcome struct {
	data json.RawMessage
	err  *tooladapter.ErrorBody
	// frame, when not nil, is owner's whole result frame, data within it; a replay to another
	// request builds its own around data.
	frame []byte
	owner *request
	// buf, when not nil, is the pooled buffer that holds frame and data (a large read, see
	// pooledFrameBytes). It goes back to the pool once the outcome is answered, so such an
	// outcome is never remembered.
	buf []byte
}

// cacheable reports whether an outcome is remembered for replay. A retryable failure (a
// timeout, an abort, a transient error, capacity) is not: a retry with the same key must get
// the chance to succeed.
func (o outcome) cacheable() bool { return o.err == nil || !o.err.Retryable }

// idemEntry is one idempotency key: the fingerprint of the first request that used it, and
// its outcome once it has one. While it runs, requests with the same key and payload join it.
type idemEntry struct {
	key     string
	fp      [32]byte
	done    bool
	res     outcome
	expires time.Time  // set when done
	waiters []*request // joined while running
	// effectFree marks fs.list, fs.stat, fs.read and fs.search, whose remembered data counts
	// against maxRememberedReadBytes; size is what it counts while remembered, else 0.
	effectFree bool
	size       int
}

// maxRememberedReadBytes bounds the data of remembered effect-free outcomes per grant. Without
// it the memory could hold maxIdempotencyKeys reads of maxResponseBytes each (16 GiB at the
// limits' maxima). Outcomes of writes and edits, the effects idempotency protects, are small
// (about 150 bytes) and are never forgotten for this bound; a read that would pass it forgets
// the oldest remembered effect-free outcomes first. A read of pooledFrameBytes or more is not
// remembered at all: its frame is built in a reused buffer (a replay of it runs again, which
// repeats no effect).
const maxRememberedReadBytes = 32 << 20

// idemCache remembers at most max keys, each for ttl after its outcome. When it is full, the
// entry whose outcome is oldest is forgotten first; running entries are never forgotten, and a
// cache full of running entries refuses new keys. Not safe for concurrent use: grant.mu guards
// it.
//
// Finished entries are queued in the order of their outcomes, which is also the order of
// their expiry (one ttl, outcomes recorded under grant.mu), so expiry and eviction take them
// from the front in constant time instead of scanning the map. The queue may hold entries
// that lookup already forgot; they are skipped when they reach the front.
type idemCache struct {
	max  int
	ttl  time.Duration
	m    map[string]*idemEntry
	done []*idemEntry // finished entries, oldest outcome first
	// reads are the finished effect-free entries, oldest outcome first, and readBytes the
	// size of those still remembered; like done, reads may hold entries forgotten since.
	reads     []*idemEntry
	readBytes int
}

func newIdemCache(l tooladapter.Limits) *idemCache {
	return &idemCache{max: int(l.MaxIdempotencyKeys), ttl: time.Duration(l.IdempotencyTtlMs) * time.Millisecond, m: make(map[string]*idemEntry)}
}

// lookup returns the live entry for key, or nil.
func (c *idemCache) lookup(key string, now time.Time) *idemEntry {
	e := c.m[key]
	if e != nil && e.done && !now.Before(e.expires) {
		c.forget(e)
		return nil
	}
	return e
}

// add starts an entry for key. It reports false when every remembered key is still running.
func (c *idemCache) add(key string, fp [32]byte, now time.Time) (*idemEntry, bool) {
	for len(c.done) > 0 && (len(c.m) >= c.max || !now.Before(c.done[0].expires)) {
		c.popDone()
	}
	if len(c.m) >= c.max {
		return nil, false // every remembered key is running
	}
	e := &idemEntry{key: key, fp: fp}
	c.m[key] = e
	return e, true
}

// popDone forgets the finished entry with the oldest outcome.
func (c *idemCache) popDone() {
	e := c.done[0]
	c.done[0] = nil
	c.done = c.done[1:]
	c.forget(e)
}

// popRead forgets the effect-free entry with the oldest outcome.
func (c *idemCache) popRead() {
	e := c.reads[0]
	c.reads[0] = nil
	c.reads = c.reads[1:]
	c.forget(e)
}

// forget removes e from the memory, if it is still there, and uncounts its data.
func (c *idemCache) forget(e *idemEntry) {
	if c.m[e.key] == e {
		delete(c.m, e.key)
	}
	c.readBytes -= e.size
	e.size = 0
}

// finish records e's outcome, or forgets e when the outcome is not cacheable, and returns the
// requests that joined it.
func (c *idemCache) finish(e *idemEntry, res outcome, now time.Time) []*request {
	waiters := e.waiters
	e.waiters = nil
	if e.done {
		return waiters
	}
	size := len(res.data)
	if !res.cacheable() || (e.effectFree && (res.buf != nil || size > maxRememberedReadBytes)) {
		c.forget(e)
		return waiters
	}
	e.done, e.res, e.expires = true, res, now.Add(c.ttl)
	c.done = append(c.done, e)
	if e.effectFree && size > 0 {
		for len(c.reads) > 0 && c.readBytes+size > maxRememberedReadBytes {
			c.popRead()
		}
		e.size = size
		c.readBytes += size
		c.reads = append(c.reads, e)
	}
	return waiters
}
