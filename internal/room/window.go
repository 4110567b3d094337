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
type window struct {
	mu      sync.Mutex
	callers map[HostID]*callerWindow
	swept   time.Time
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
}

func newWindow() *window { return &window{callers: make(map[HostID]*callerWindow)} }

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
	return e, false, nil
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
