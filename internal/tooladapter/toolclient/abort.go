package toolclient

import "time"

// abortEntry remembers one aborted request so that the adapter's answers to it can be told
// apart from protocol violations.
type abortEntry struct {
	abortID, key, op string
	expires          time.Time
	acked, answered  bool
}

// abortMemory holds aborted requests for idempotencyTtlMs, at most maxIdempotencyKeys of them.
// It is not safe for concurrent use; Conn.mu guards it.
type abortMemory struct {
	cap int
	ttl time.Duration
	m   map[string]*abortEntry // by the aborted request's id
}

func newAbortMemory(capacity int, ttl time.Duration) *abortMemory {
	return &abortMemory{cap: capacity, ttl: ttl, m: make(map[string]*abortEntry)}
}

// purge forgets entries whose time is up.
func (a *abortMemory) purge(now time.Time) {
	for id, e := range a.m {
		if !now.Before(e.expires) {
			delete(a.m, id)
		}
	}
}

// add remembers an abort of target. It reports false, remembering nothing, when the memory is
// full of live entries.
func (a *abortMemory) add(target string, e abortEntry, now time.Time) bool {
	if len(a.m) >= a.cap {
		a.purge(now)
		if len(a.m) >= a.cap {
			return false
		}
	}
	e.expires = now.Add(a.ttl)
	a.m[target] = &e
	return true
}

// lookup returns the live entry for target.
func (a *abortMemory) lookup(target string, now time.Time) *abortEntry {
	e := a.m[target]
	if e == nil {
		return nil
	}
	if !now.Before(e.expires) {
		delete(a.m, target)
		return nil
	}
	return e
}

// result reports whether a result for target is the first, matching, late answer to an aborted
// request, which the caller drops.
func (a *abortMemory) result(target, key, op string, now time.Time) bool {
	e := a.lookup(target, now)
	if e == nil || e.answered || e.key != key || e.op != op {
		return false
	}
	e.answered = true
	a.settle(target, e)
	return true
}

// ack reports whether an aborted frame for target is the first acknowledgement of the abort
// with id abortID.
func (a *abortMemory) ack(target, abortID string, now time.Time) bool {
	e := a.lookup(target, now)
	if e == nil || e.acked || e.abortID != abortID {
		return false
	}
	e.acked = true
	a.settle(target, e)
	return true
}

// settle forgets an entry once both the acknowledgement and the late result have arrived:
// nothing more may legitimately come for it.
func (a *abortMemory) settle(target string, e *abortEntry) {
	if e.acked && e.answered {
		delete(a.m, target)
	}
}

func (a *abortMemory) len() int { return len(a.m) }
