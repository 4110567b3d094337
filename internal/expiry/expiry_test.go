package expiry

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type item struct {
	name string
	link Entry[*item]
}

// owner is a queue's owner as connections use it: a lock, and the expired items in order.
type owner struct {
	mu      sync.Mutex
	q       *Queue[*item]
	expired []string
	at      []time.Duration
	start   time.Time
}

func newOwner(timeout time.Duration) *owner {
	o := &owner{start: time.Now()}
	o.q = New[*item](timeout, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.q.Expire(time.Now(), func(it *item) {
			o.expired = append(o.expired, it.name)
			o.at = append(o.at, time.Since(o.start))
		})
	})
	return o
}

func (o *owner) push(it *item) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.q.Push(&it.link, it, time.Now())
}

func (o *owner) remove(it *item) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.q.Remove(&it.link)
}

func (o *owner) result() ([]string, []time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.expired), slices.Clone(o.at)
}

// TestExpiresEachAtItsOwnDeadline: items expire oldest first, each exactly one timeout after
// its admission, also when the timer was set for an item that ended before it fired; removed
// items never expire.
func TestExpiresEachAtItsOwnDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newOwner(time.Second)
		a, b, c, d := &item{name: "a"}, &item{name: "b"}, &item{name: "c"}, &item{name: "d"}
		o.push(a) // sets the timer for 1s
		time.Sleep(300 * time.Millisecond)
		o.push(b) // deadline 1.3s
		o.remove(a)
		time.Sleep(200 * time.Millisecond)
		o.push(c) // deadline 1.5s
		o.push(d) // deadline 1.5s
		o.remove(d)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		names, at := o.result()
		if want := []string{"b", "c"}; !slices.Equal(names, want) {
			t.Fatalf("expired %v, want %v", names, want)
		}
		if want := []time.Duration{1300 * time.Millisecond, 1500 * time.Millisecond}; !slices.Equal(at, want) {
			t.Fatalf("expired at %v, want %v", at, want)
		}
	})
}

// TestIdleQueueSetsTimerAgain: after the queue emptied and the timer fired with nothing to
// expire, a new item sets it again; Stop keeps a fired-for item from expiring until a Push.
func TestIdleQueueSetsTimerAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newOwner(time.Second)
		a, b := &item{name: "a"}, &item{name: "b"}
		o.push(a)
		o.remove(a)
		time.Sleep(2 * time.Second) // the timer fires and finds nothing
		o.push(b)
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if names, _ := o.result(); len(names) != 0 {
			t.Fatalf("expired early: %v", names)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if names, at := o.result(); !slices.Equal(names, []string{"b"}) || at[0] != 3*time.Second {
			t.Fatalf("expired %v at %v, want b at 3s", names, at)
		}
		o.mu.Lock()
		o.q.Stop()
		o.mu.Unlock()
	})
}

// TestRemoveTwice: removing an item that is not queued, twice or never pushed, changes nothing.
func TestRemoveTwice(t *testing.T) {
	q := New[*item](time.Hour, func() {})
	a, b := &item{name: "a"}, &item{name: "b"}
	q.Remove(&a.link)
	q.Push(&a.link, a, time.Now())
	q.Push(&b.link, b, time.Now())
	q.Remove(&a.link)
	q.Remove(&a.link)
	if q.oldest != &b.link || q.newest != &b.link {
		t.Fatal("the queue lost b")
	}
	q.Stop()
}
