package server

import (
	"encoding/json"
	"slices"
	"sync"
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
	g       *grant // the grant whose request runs it; only its requests join it
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
// cache full of running entries refuses new keys.
//
// A cache is the memory of one session generation (see scope), not of one grant: the grants
// minted for the same root, adapter, session and generation share it, so a call retried with
// its key after the daemon restarted and was reprovisioned with a new grant is answered from
// it, not applied twice. mu guards it; it is taken under the serving grant's mu (grant.mu,
// then idemCache.mu). A running entry is joined only by requests of the grant that runs it,
// whose mu guards the joined requests; another grant's request with the same key is refused
// retryable until it has an outcome.
//
// Finished entries are queued in the order of their outcomes, which is also the order of
// their expiry (one ttl, outcomes recorded under mu), so expiry and eviction take them from
// the front in constant time instead of scanning the map. The queue may hold entries that
// lookup already forgot; they are skipped when they reach the front.
type idemCache struct {
	mu   sync.Mutex
	max  int
	ttl  time.Duration
	m    map[string]*idemEntry
	done []*idemEntry // finished entries, oldest outcome first
	// reads are the finished effect-free entries, oldest outcome first, and readBytes the
	// size of those still remembered; like done, reads may hold entries forgotten since.
	reads     []*idemEntry
	readBytes int
	// last is when the newest remembered outcome expires.
	last time.Time
	// grants counts the live grants that use the cache; the server's mu guards it (see
	// Server.memory).
	grants int
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
	c.last = e.expires
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

// admission is what the memory decided for an invoke.
type admission int

const (
	admitRun       admission = iota // a new entry: run the request
	admitReplay                     // the key has an outcome: answer it again
	admitJoined                     // the key runs under this grant: the request waits for it
	admitConflict                   // the key was used with another operation or payload
	admitElsewhere                  // the key runs under another grant of the session generation
	admitCapacity                   // every remembered key is running
	admitQueueFull                  // hasRoom said the connection can take no more
)

// admit decides r's fate by its key and fingerprint fp, under mu, in one step: a replay, a
// join, a refusal, or a new entry for r to run (r.entry is set for a join and a run). hasRoom
// is asked, before a new entry is made, whether the connection can take another request;
// it runs under mu and the grant's mu, which the caller holds.
func (c *idemCache) admit(g *grant, r *request, fp [32]byte, now time.Time, hasRoom func() bool) (admission, outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.lookup(r.key, now); e != nil {
		switch {
		case e.fp != fp:
			return admitConflict, outcome{}
		case e.done:
			return admitReplay, e.res
		case e.g != g:
			return admitElsewhere, outcome{}
		}
		r.entry = e
		e.waiters = append(e.waiters, r)
		return admitJoined, outcome{}
	}
	if !hasRoom() {
		return admitQueueFull, outcome{}
	}
	e, ok := c.add(r.key, fp, now)
	if !ok {
		return admitCapacity, outcome{}
	}
	e.g, e.effectFree = g, effectFree(r.op)
	r.entry = e
	return admitRun, outcome{}
}

// settle records res as the outcome of e, under mu, and returns the requests that joined it
// (see finish).
func (c *idemCache) settle(e *idemEntry, res outcome, now time.Time) []*request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.finish(e, res, now)
}

// leave takes joined request r off its entry's waiters.
func (c *idemCache) leave(r *request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.entry.waiters = slices.DeleteFunc(r.entry.waiters, func(x *request) bool { return x == r })
}

// idle reports whether the cache remembers nothing that has not expired, forgetting what has.
func (c *idemCache) idle(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.done) > 0 && !now.Before(c.done[0].expires) {
		c.popDone()
	}
	return len(c.m) == 0
}

// dropReads forgets the remembered outcomes of effect-free operations, which protect no
// effect: a memory whose last grant was revoked keeps only those of writes and edits.
func (c *idemCache) dropReads() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.reads) > 0 {
		c.popRead()
	}
}

// lastExpiry is when the newest remembered outcome expires.
func (c *idemCache) lastExpiry() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}
