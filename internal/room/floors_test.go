package room

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestFloorsSurviveARestart is issue 24's finding 2 at the provider: calls captured before the
// provider restarts and sent again, within the clock window, after it, are refused
// duplicate_request and never run twice; a new call of the caller runs once it is signed past
// the lease. Without Floors, the same replay runs every call again.
func TestFloorsSurviveARestart(t *testing.T) {
	for _, durable := range []bool{true, false} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			f := newFixture(t)
			if !durable {
				f.p.cfg.Floors = nil
				f.restart(t)
			}
			t0 := time.Now()
			var preps []*Prepared
			for i := range 10 {
				signed := t0.Add(time.Duration(i) * 10 * time.Millisecond)
				prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), signed)
				if _, err := f.send(context.Background(), prep, signed); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				preps = append(preps, prep)
			}
			f.restart(t)
			later := t0.Add(2 * time.Second) // well within the clock window
			for i, prep := range preps {
				_, err := f.send(context.Background(), prep, later)
				if durable {
					wantCode(t, err, CodeDuplicateRequest)
				} else if err != nil {
					t.Fatalf("replay %d without floors: %v", i, err)
				}
			}
			want := len(preps)
			if !durable {
				want *= 2 // what the replay did before floors were durable
			}
			if n := f.inv.count("light/set_color"); n != want {
				t.Fatalf("the invoker ran %d times, want %d", n, want)
			}
			if !durable {
				return
			}
			// Ten calls within one FloorStep: one durable write.
			if n := f.floors.count(); n != 1 {
				t.Fatalf("%d raises for ten calls within %v", n, FloorStep)
			}
			// A new call signed within FloorStep of the last one before the restart is refused
			// too (the window cannot tell it from a replay); one signed after the lease runs.
			last := preps[len(preps)-1].call.Time
			_, err := f.call(t, f.b, invoke("light", "set_color", `{}`), last.Add(FloorStep/2))
			wantCode(t, err, CodeDuplicateRequest)
			if _, err := f.call(t, f.b, invoke("light", "set_color", `{}`), t0.Add(FloorStep+time.Millisecond)); err != nil {
				t.Fatalf("a new call past the lease: %v", err)
			}
			// Another caller has no lease to be refused by.
			if _, err := f.call(t, f.a, invoke("light", "set_color", `{}`), t0); err != nil {
				t.Fatalf("A's own call: %v", err)
			}
		})
	}
}

// TestFloorRaiseComesFirstAndIsShared holds the durable write of a caller's lease: the calls it
// covers wait for it, none runs before it is durable, and they share it; a call signed past
// the pending raise writes its own. A steady stream of calls writes about once per FloorStep.
func TestFloorRaiseComesFirstAndIsShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.floors.hold = make(chan struct{})
		t0 := time.Now()
		errs := make(chan error, MaxInFlightPerCaller)
		var wg sync.WaitGroup
		for i := range MaxInFlightPerCaller - 1 {
			signed := t0.Add(time.Duration(i) * time.Millisecond)
			prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), signed)
			wg.Go(func() { _, err := f.send(context.Background(), prep, signed); errs <- err })
		}
		synctest.Wait()
		if r := f.floors.count(); r != 1 {
			t.Fatalf("%d raises for %d calls within one step", r, MaxInFlightPerCaller-1)
		}
		// Past the first raise's lease (at most t0 + 2 ms + FloorStep): a raise of its own.
		past := t0.Add(FloorStep + 10*time.Millisecond)
		prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), past)
		wg.Go(func() { _, err := f.send(context.Background(), prep, past); errs <- err })
		synctest.Wait()
		if n, r := f.inv.count("light/set_color"), f.floors.count(); n != 0 || r != 2 {
			t.Fatalf("while the raises are held: the invoker ran %d times, %d raises; want 0 and 2", n, r)
		}
		f.floors.mu.Lock()
		close(f.floors.hold)
		f.floors.hold = nil
		f.floors.mu.Unlock()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := f.inv.count("light/set_color"); n != MaxInFlightPerCaller {
			t.Fatalf("the invoker ran %d times, want %d", n, MaxInFlightPerCaller)
		}

		// A call every 100 ms for 5 s, after the lease (past + FloorStep): a raise at 0, then
		// at the first call past each new lease (1.1, 2.2, 3.3 and 4.4 s).
		before := f.floors.count()
		start := past.Add(FloorStep + time.Millisecond)
		for i := range 50 {
			signed := start.Add(time.Duration(i) * 100 * time.Millisecond)
			if _, err := f.call(t, f.b, invoke("light", "set_color", `{}`), signed); err != nil {
				t.Fatalf("stream call %d: %v", i, err)
			}
		}
		if n := f.floors.count() - before; n != 5 {
			t.Fatalf("a stream of 50 calls over 5 s made %d raises, want 5", n)
		}
	})
}

// TestFloorRaiseWaitEndsWithTheProvider: a call waiting for another call's raise when the
// provider stops is answered unavailable and never runs; the raise's own call goes on.
func TestFloorRaiseWaitEndsWithTheProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.floors.hold = make(chan struct{})
		t0 := time.Now()
		lead := f.prepare(t, f.b, invoke("light", "set_color", `{}`), t0)
		waiter := f.prepare(t, f.b, invoke("light", "set_color", `{}`), t0.Add(time.Millisecond))
		leadErr, waitErr := make(chan error, 1), make(chan error, 1)
		go func() { _, err := f.send(context.Background(), lead, t0); leadErr <- err }()
		synctest.Wait()
		stop, cancel := context.WithCancel(context.Background())
		go func() { _, err := f.send(stop, waiter, t0); waitErr <- err }()
		synctest.Wait()
		cancel()
		wantCode(t, <-waitErr, CodeUnavailable)
		f.floors.mu.Lock()
		close(f.floors.hold)
		f.floors.hold = nil
		f.floors.mu.Unlock()
		if err := <-leadErr; err != nil {
			t.Fatal(err)
		}
		if n, r := f.inv.count("light/set_color"), f.floors.count(); n != 1 || r != 1 {
			t.Fatalf("the invoker ran %d times, %d raises; want 1 and 1", n, r)
		}
	})
}

// TestFloorRaiseFailure: when the lease cannot be written, the call is answered unavailable
// and never runs, and so is every call waiting for the same raise; once writes succeed again,
// a new call runs. A provider whose floors cannot be loaded is not made.
func TestFloorRaiseFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.floors.err = errors.New("disk full")
		f.floors.hold = make(chan struct{})
		t0 := time.Now()
		preps := []*Prepared{
			f.prepare(t, f.b, invoke("light", "set_color", `{}`), t0),
			f.prepare(t, f.b, invoke("light", "set_color", `{}`), t0.Add(time.Millisecond)),
		}
		errs := make(chan error, len(preps))
		for _, prep := range preps {
			go func() { _, err := f.send(context.Background(), prep, t0); errs <- err }()
		}
		synctest.Wait()
		f.floors.mu.Lock()
		close(f.floors.hold)
		f.floors.hold = nil
		f.floors.mu.Unlock()
		for range preps {
			wantCode(t, <-errs, CodeUnavailable)
		}
		if n, r := f.inv.count("light/set_color"), f.floors.count(); n != 0 || r != 1 {
			t.Fatalf("after a failed raise: the invoker ran %d times, %d raises; want 0 and 1", n, r)
		}
		// A copy of a refused call gets its recorded answer; it never ran.
		_, err := f.send(context.Background(), preps[0], t0)
		wantCode(t, err, CodeUnavailable)
		f.recordMu.Lock()
		if r := f.records[len(f.records)-1]; r.Code != CodeUnavailable || !r.Retry {
			t.Fatalf("the copy's record: %+v", r)
		}
		f.recordMu.Unlock()

		f.floors.mu.Lock()
		f.floors.err = nil
		f.floors.mu.Unlock()
		if _, err := f.call(t, f.b, invoke("light", "set_color", `{}`), t0.Add(2*time.Millisecond)); err != nil {
			t.Fatalf("once writes succeed: %v", err)
		}
		if n := f.inv.count("light/set_color"); n != 1 {
			t.Fatalf("the invoker ran %d times, want 1", n)
		}

		f.floors.loadErr = errors.New("unreadable")
		if _, err := NewProvider(f.p.cfg); err == nil {
			t.Fatal("a provider was made without its floors")
		}
	})
}
