package room

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/busport"
)

// Bounds of a provider's memory of recent calls, per caller host (facts §5.1).
const (
	// DuplicateWindowEntries is how many recent calls of one caller the provider remembers.
	DuplicateWindowEntries = 64
	// DuplicateWindow is how long a call is remembered after it was admitted: at least twice
	// ClockWindow, so a call is remembered for as long as its signing time would be accepted.
	DuplicateWindow = 60 * time.Second
	// MaxInFlightPerCaller bounds one caller's calls running at one provider.
	MaxInFlightPerCaller = 4
)

// FloorStep is how far past a call's signing time a provider raises its caller's durable
// floor lease (ProviderConfig.Floors) when the call is signed after the lease: a caller's
// calls then pay one durable write, and so one fsync, per FloorStep at most. It is also how
// early a restart may refuse a caller's new calls: one signed within FloorStep after the
// caller's last call admitted before the restart is refused duplicate_request.
const FloorStep = time.Second

// FloorRetention is how long after a floor lease a provider's store still needs it: a call
// signed at or before a lease that old is outside ClockWindow, and forgotten by the duplicate
// window too, so nothing can still be refused by it. Floors may forget older leases.
const FloorRetention = ClockWindow + DuplicateWindow

// window is a provider's memory of recent calls: for each caller, the calls admitted in the
// last DuplicateWindow, at most DuplicateWindowEntries, each with its recorded reply once it
// ended. A call that comes again with the same request id and the same authenticated bytes is a
// retry and gets the recorded reply (waiting for it if the call is still running); the
// invoker is never called twice for it.
//
// When a caller's window is full, its oldest ended entry (by signing time) is forgotten and
// floor rises to that entry's signing time: a call signed at or before floor is refused with
// duplicate_request, since the window can no longer tell whether it already ran. That keeps
// exactly-once without bounding a caller's call rate.
//
// With durable set, the window also keeps each caller's floor lease (see ProviderConfig.Floors):
// every call of the caller that this provider ever ran was signed at or before it, across
// restarts. A newly admitted call signed after the lease gets a raise to wait for before it
// runs; the first call that needs one leads it (writes it), the others that it covers wait for
// it. After a restart the loaded lease is the caller's floor.
type window struct {
	mu      sync.Mutex
	callers map[HostID]*callerWindow
	swept   time.Time
	durable bool
}

// callerWindow is one caller's part of a window. Admitting a call looks at its entries at
// most twice, and without a map walk: list holds them for the scans, oldest skips the expiry
// scan while no entry can have expired.
type callerWindow struct {
	entries map[string]*entry
	list    []*entry // the entries of entries, in no order
	// oldest is at most the earliest admission time among the entries (it may be earlier,
	// after an eviction): while now is within DuplicateWindow of it, nothing has expired.
	oldest   time.Time
	floor    time.Time
	inFlight int
	// lease is the caller's durable floor lease as far as this window knows it (zero without
	// one); raising is the highest raise of it in flight, nil when none.
	lease   time.Time
	raising *raise
}

// raise is one durable raise of a caller's floor lease to to. err is set, under the window's
// mutex, before done closes.
type raise struct {
	to   time.Time
	done chan struct{}
	err  error
}

// entry is one admitted call. reply is written once, and ended set, before done closes; ended
// and index are read and written under the window's mutex.
type entry struct {
	id       string
	digest   [32]byte
	signed   time.Time
	admitted time.Time
	done     chan struct{}
	ended    bool
	index    int // in its callerWindow's list
	reply    busport.Msg
	// raise, set at admission when the call is signed after its caller's lease, must succeed
	// before the call runs; lead says this call writes it.
	raise *raise
	lead  bool
}

func newWindow() *window { return &window{callers: make(map[HostID]*callerWindow)} }

// newDurableWindow returns a window that keeps floor leases, starting from leases: each
// caller's floor and lease are its loaded lease.
func newDurableWindow(leases map[HostID]time.Time) *window {
	w := &window{callers: make(map[HostID]*callerWindow, len(leases)), durable: true}
	for id, l := range leases {
		w.callers[id] = &callerWindow{entries: make(map[string]*entry), floor: l, lease: l}
	}
	return w
}

// admit looks c up by its request id and auth, c.AuthBytes(). It returns (e, true) for a retry of the admitted call e; (e, false) for a
// newly admitted call, which the caller must end with finish; or an error: duplicate_request
// or busy.
func (w *window) admit(c *Call, auth []byte, now time.Time) (*entry, bool, error) {
	digest := sha256.Sum256(auth)
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.swept) > DuplicateWindow {
		w.sweep(now)
	}
	cw := w.callers[c.Caller]
	if cw == nil {
		cw = &callerWindow{entries: make(map[string]*entry)}
		w.callers[c.Caller] = cw
	}
	cw.expire(now)
	if e, ok := cw.entries[c.RequestID]; ok {
		if e.digest != digest {
			return nil, false, newError(CodeDuplicateRequest, "request id already used for another call")
		}
		return e, true, nil
	}
	if !c.Time.After(cw.floor) {
		return nil, false, newError(CodeDuplicateRequest, "request id older than the duplicate window remembers")
	}
	if cw.inFlight >= MaxInFlightPerCaller {
		return nil, false, newError(CodeBusy, "the caller has the maximum of calls in flight")
	}
	if len(cw.entries) >= DuplicateWindowEntries {
		cw.evictOldest()
	}
	e := &entry{id: c.RequestID, digest: digest, signed: c.Time, admitted: now, done: make(chan struct{})}
	if len(cw.entries) == 0 || now.Before(cw.oldest) {
		cw.oldest = now
	}
	cw.add(e)
	cw.inFlight++
	if w.durable && c.Time.After(cw.lease) {
		if r := cw.raising; r != nil && !c.Time.After(r.to) {
			e.raise = r
		} else {
			e.raise = &raise{to: c.Time.Add(FloorStep), done: make(chan struct{})}
			e.lead = true
			cw.raising = e.raise
		}
	}
	return e, false, nil
}

// raised ends r, a raise of caller's lease, with err: on success the lease is at least r.to.
// It wakes the calls waiting for r.
func (w *window) raised(caller HostID, r *raise, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.err = err
	// The caller is kept: the call leading r is still in flight.
	if cw := w.callers[caller]; cw != nil {
		if err == nil && r.to.After(cw.lease) {
			cw.lease = r.to
		}
		if cw.raising == r {
			cw.raising = nil
		}
	}
	close(r.done)
}

// add records e.
func (cw *callerWindow) add(e *entry) {
	cw.entries[e.id] = e
	e.index = len(cw.list)
	cw.list = append(cw.list, e)
}

// remove forgets e.
func (cw *callerWindow) remove(e *entry) {
	delete(cw.entries, e.id)
	last := cw.list[len(cw.list)-1]
	cw.list[e.index], last.index = last, e.index
	cw.list[len(cw.list)-1] = nil
	cw.list = cw.list[:len(cw.list)-1]
}

// finish records e's reply and wakes its retries.
func (w *window) finish(caller HostID, e *entry, reply busport.Msg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.reply, e.ended = reply, true
	close(e.done)
	if cw := w.callers[caller]; cw != nil {
		cw.inFlight--
	}
}

// expire forgets the ended entries admitted more than DuplicateWindow ago. A forgotten
// entry's signing time is past the clock window, so no copy of it is accepted again.
func (cw *callerWindow) expire(now time.Time) {
	if len(cw.list) == 0 || now.Sub(cw.oldest) <= DuplicateWindow {
		return
	}
	oldest := now
	for i := 0; i < len(cw.list); {
		e := cw.list[i]
		if e.ended && now.Sub(e.admitted) > DuplicateWindow {
			cw.remove(e) // moves the last entry to i
			continue
		}
		if e.admitted.Before(oldest) {
			oldest = e.admitted
		}
		i++
	}
	cw.oldest = oldest
}

// evictOldest forgets the ended entry signed earliest and raises floor to its signing time.
// With at most MaxInFlightPerCaller entries running, a full window always has one.
func (cw *callerWindow) evictOldest() {
	var oldest *entry
	for _, e := range cw.list {
		if e.ended && (oldest == nil || e.signed.Before(oldest.signed)) {
			oldest = e
		}
	}
	if oldest == nil {
		return
	}
	cw.remove(oldest)
	if oldest.signed.After(cw.floor) {
		cw.floor = oldest.signed
	}
}

// sweep expires every caller's window and forgets callers with nothing left to remember.
func (w *window) sweep(now time.Time) {
	w.swept = now
	for id, cw := range w.callers {
		cw.expire(now)
		if len(cw.entries) == 0 && cw.inFlight == 0 && now.Sub(cw.floor) > DuplicateWindow {
			delete(w.callers, id)
		}
	}
}
