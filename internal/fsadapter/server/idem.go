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
}

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
}

func newIdemCache(l tooladapter.Limits) *idemCache {
	return &idemCache{max: int(l.MaxIdempotencyKeys), ttl: time.Duration(l.IdempotencyTtlMs) * time.Millisecond, m: make(map[string]*idemEntry)}
}

// lookup returns the live entry for key, or nil.
func (c *idemCache) lookup(key string, now time.Time) *idemEntry {
	e := c.m[key]
	if e != nil && e.done && !now.Before(e.expires) {
		delete(c.m, key)
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
	if c.m[e.key] == e {
		delete(c.m, e.key)
	}
}

// finish records e's outcome, or forgets e when the outcome is not cacheable, and returns the
// requests that joined it.
func (c *idemCache) finish(e *idemEntry, res outcome, now time.Time) []*request {
	waiters := e.waiters
	e.waiters = nil
	if e.done {
		return waiters
	}
	if res.cacheable() {
		e.done, e.res, e.expires = true, res, now.Add(c.ttl)
		c.done = append(c.done, e)
	} else if c.m[e.key] == e {
		delete(c.m, e.key)
	}
	return waiters
}
