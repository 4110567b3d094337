package room

import (
	"strconv"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/busport"
)

// TestWindowKeepsItsListAndMapInStep admits, ends, evicts and expires calls of one caller in
// an order that is not the signing order, and checks after each step that the scan list holds
// exactly the remembered calls, that retries still find theirs, and that expiry forgets
// exactly the ended calls past DuplicateWindow.
func TestWindowKeepsItsListAndMapInStep(t *testing.T) {
	w := newWindow()
	caller := fuzzKey.ID()
	t0 := time.UnixMilli(1_800_000_000_000)
	check := func(step string) *callerWindow {
		t.Helper()
		cw := w.callers[caller]
		if len(cw.list) != len(cw.entries) || len(cw.entries) > DuplicateWindowEntries {
			t.Fatalf("%s: %d listed, %d remembered", step, len(cw.list), len(cw.entries))
		}
		for i, e := range cw.list {
			if e.index != i || cw.entries[e.id] != e || e.admitted.Before(cw.oldest) {
				t.Fatalf("%s: entry %d (%s) out of step", step, i, e.id)
			}
		}
		return cw
	}
	call := func(i int, signed time.Time) *Call {
		return &Call{Caller: caller, RequestID: "r" + strconv.Itoa(i), Time: signed}
	}
	var running []*entry
	for i := range 3 * DuplicateWindowEntries {
		// Signing times go back and forth; admission times only forward.
		signed := t0.Add(time.Duration(i*7%13) * time.Millisecond).Add(time.Duration(i) * time.Second)
		c := call(i, signed)
		e, retry, err := w.admit(c, []byte(c.RequestID), t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			continue // older than the floor: refused, nothing remembered
		}
		if retry {
			t.Fatalf("call %d taken for a retry", i)
		}
		running = append(running, e)
		if len(running) == MaxInFlightPerCaller || i%5 == 0 {
			for _, r := range running {
				w.finish(caller, r, busport.Msg{Data: []byte(r.id)})
			}
			running = running[:0]
		}
		check("call " + strconv.Itoa(i))
	}
	for _, r := range running {
		w.finish(caller, r, busport.Msg{Data: []byte(r.id)})
	}
	cw := check("all ended")
	last := cw.list[0]
	for _, e := range cw.list {
		if e.admitted.After(last.admitted) {
			last = e
		}
	}
	if e, retry, err := w.admit(&Call{Caller: caller, RequestID: last.id, Time: last.signed}, []byte(last.id), last.admitted.Add(time.Second)); err != nil || !retry || e != last {
		t.Fatalf("a remembered call's retry: %v %v", retry, err)
	}
	// Far later, every ended call has expired: only the floor is left.
	later := last.admitted.Add(DuplicateWindow + time.Minute)
	c := call(-1, later)
	if _, _, err := w.admit(c, []byte(c.RequestID), later); err != nil {
		t.Fatal(err)
	}
	if cw := check("after expiry"); len(cw.entries) != 1 {
		t.Fatalf("%d calls remembered after the window passed, want the new one", len(cw.entries))
	}
}
