// Package expiry enforces one timeout on many requests with a single timer.
//
// A connection admits requests one after another, each with the same timeout, so their
// deadlines come in the order they were admitted. A Queue keeps the requests not yet ended in
// that order, and its one timer fires no later than the oldest one's deadline. The timer is
// set when a request finds it idle and moved only when it fires: requests that succeed each
// other do not touch it. That matters because setting a timer that becomes the earliest one
// wakes the Go runtime's poller thread, which on an idle machine costs as much as the rest of
// a small request.
package expiry

import "time"

// Entry links one item into a Queue; embed it in the item. The zero Entry is not in a queue.
type Entry[T any] struct {
	item         T
	admitted     time.Time
	older, newer *Entry[T]
	queued       bool
}

// Queue is the items admitted and not yet ended, oldest first, sharing one timeout. It is not
// safe for concurrent use: its owner's lock guards it, and the fire function given to New
// takes that lock and calls Expire.
type Queue[T any] struct {
	timeout        time.Duration
	fire           func()
	oldest, newest *Entry[T]
	timer          *time.Timer
	set            bool // timer is pending, or its fire has not yet called Expire
}

// New returns an empty queue whose items time out timeout after their admission. fire runs on
// a goroutine of its own when the timer fires; it must lock what guards the queue and call
// Expire.
func New[T any](timeout time.Duration, fire func()) *Queue[T] {
	return &Queue[T]{timeout: timeout, fire: fire}
}

// Push appends item, admitted at admitted (no earlier than any item already queued), with e
// as its link, and makes sure the timer fires by its deadline. A set timer is left alone: it
// fires by the deadline of an older item, or of one that ended since, which is no later.
func (q *Queue[T]) Push(e *Entry[T], item T, admitted time.Time) {
	*e = Entry[T]{item: item, admitted: admitted, older: q.newest, queued: true}
	if q.newest == nil {
		q.oldest = e
	} else {
		q.newest.newer = e
	}
	q.newest = e
	if q.set {
		return
	}
	q.set = true
	wait := time.Until(admitted.Add(q.timeout))
	if q.timer == nil {
		q.timer = time.AfterFunc(wait, q.fire)
	} else {
		q.timer.Reset(wait)
	}
}

// Remove takes e's item out of the queue, if it is there; the timer is left as it is.
func (q *Queue[T]) Remove(e *Entry[T]) {
	if !e.queued {
		return
	}
	if e.older == nil {
		q.oldest = e.newer
	} else {
		e.older.newer = e.newer
	}
	if e.newer == nil {
		q.newest = e.older
	} else {
		e.newer.older = e.older
	}
	var zero T
	e.item, e.older, e.newer, e.queued = zero, nil, nil, false
}

// Expire removes every item whose deadline has passed at now, oldest first, and calls expire
// with each; then it sets the timer for the oldest item left, if any. The fire function calls
// it; expire may call Remove and Push.
func (q *Queue[T]) Expire(now time.Time, expire func(T)) {
	q.set = false
	for e := q.oldest; e != nil && !now.Before(e.admitted.Add(q.timeout)); e = q.oldest {
		item := e.item
		q.Remove(e)
		expire(item)
	}
	if e := q.oldest; e != nil && !q.set {
		q.set = true
		q.timer.Reset(e.admitted.Add(q.timeout).Sub(now))
	}
}

// Stop stops the timer; a later Push sets it again.
func (q *Queue[T]) Stop() {
	if q.timer != nil {
		q.timer.Stop()
	}
	q.set = false
}
