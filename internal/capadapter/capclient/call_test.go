package capclient

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/trywrite"
)

// outcome is what one done function received.
type outcome struct {
	raw json.RawMessage
	err error
}

// collector hands out done functions and fails the test if any runs twice.
type collector struct {
	t  *testing.T
	ch chan outcome
}

func newCollector(t *testing.T) *collector {
	return &collector{t: t, ch: make(chan outcome, 2*maxQueuedCalls)}
}

func (c *collector) done() func(json.RawMessage, error) {
	var once sync.Once
	return func(raw json.RawMessage, err error) {
		ran := false
		once.Do(func() { ran = true })
		if !ran {
			c.t.Error("done ran twice")
		}
		c.ch <- outcome{raw, err}
	}
}

func (c *collector) next() outcome {
	c.t.Helper()
	select {
	case o := <-c.ch:
		return o
	case <-time.After(10 * time.Second):
		c.t.Fatal("done did not run")
		return outcome{}
	}
}

// Calls started without waiting end in order, each with its own answer, and the child stays up.
func TestStartObserveAnswersInOrder(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "normal", ClientOptions{})
	col := newCollector(t)
	ctx := context.Background()
	c.StartObserve(ctx, "test_light", col.done())
	c.StartInvoke(ctx, "test_light", "turn_on", json.RawMessage(`{"on":true}`), col.done())
	c.StartObserve(ctx, "test_light", col.done())
	want := []string{`"on":false`, `{"ok":true,"on":true}`, `"on":true`}
	for i, w := range want {
		o := col.next()
		if o.err != nil || !strings.Contains(string(o.raw), w) {
			t.Fatalf("call %d = %s, %v; want %s", i, o.raw, o.err, w)
		}
	}
	if c.Failure() != nil {
		t.Fatalf("child failed: %v", c.Failure())
	}
}

// A call that misses its deadline fails with timeout and kills the child; the calls queued
// behind it fail with unavailable, without being written.
func TestStartObserveTimeoutKillsChild(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "hang-observe", ClientOptions{CallTimeout: MinCallTimeout})
	col := newCollector(t)
	ctx := context.Background()
	c.StartObserve(ctx, "test_light", col.done())
	c.StartInvoke(ctx, "test_light", "turn_on", json.RawMessage(`{"on":true}`), col.done())
	wantCode(t, col.next().err, capadapter.CodeTimeout)
	wantCode(t, col.next().err, capadapter.CodeUnavailable)
	waitDone(t, c)
	wantCode(t, c.Failure(), capadapter.CodeTimeout)
	if !reaped(c.PID()) {
		t.Fatalf("pid %d not reaped", c.PID())
	}
	c.StartObserve(ctx, "test_light", col.done()) // refused at once: done has run
	select {
	case o := <-col.ch:
		wantCode(t, o.err, capadapter.CodeUnavailable)
	default:
		t.Fatal("a call to a dead child was not refused at once")
	}
}

// The deadline timer is not moved while calls succeed each other: set for an answered call's
// deadline, it is set again for the deadline of the call active when it fires, so a later call
// times out at its own deadline, not earlier.
func TestDeadlineOfALaterCall(t *testing.T) {
	noLeaks(t)
	const timeout = 400 * time.Millisecond
	c := startHelper(t, "hang-observe", ClientOptions{CallTimeout: timeout})
	col := newCollector(t)
	ctx := context.Background()
	c.StartInvoke(ctx, "test_light", "turn_on", json.RawMessage(`{"on":true}`), col.done())
	if o := col.next(); o.err != nil {
		t.Fatalf("invoke: %v", o.err)
	}
	time.Sleep(timeout / 2)
	start := time.Now()
	c.StartObserve(ctx, "test_light", col.done())
	wantCode(t, col.next().err, capadapter.CodeTimeout)
	if waited := time.Since(start); waited < timeout-20*time.Millisecond {
		t.Fatalf("the observe timed out after %v, before its own deadline", waited)
	}
	waitDone(t, c)
}

// A well-formed, correctly paired result that fails a screen fails only its own call, with
// result_withheld naming the screen: the child is not killed, and the next calls, queued behind
// it or made later, are answered by the same process.
func TestStartObserveWithholdsScreenedResult(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "url-result", ClientOptions{})
	pid := c.PID()
	col := newCollector(t)
	c.StartObserve(context.Background(), "test_light", col.done())
	c.StartInvoke(context.Background(), "test_light", "turn_on", json.RawMessage(`{"on":true}`), col.done())
	c.StartObserve(context.Background(), "test_light", col.done())
	e := wantCode(t, col.next().err, capadapter.CodeResultWithheld)
	if e.Screen != capadapter.ScreenURL || e.FromAdapter || strings.Contains(e.Error(), "example.com") {
		t.Fatalf("withheld error %+v", e)
	}
	if o := col.next(); o.err != nil || string(o.raw) != `{"ok":true,"on":true}` {
		t.Fatalf("the invoke queued behind the withheld observe: %s, %v", o.raw, o.err)
	}
	wantCode(t, col.next().err, capadapter.CodeResultWithheld)
	if c.Failure() != nil || c.PID() != pid {
		t.Fatalf("the child failed (%v) or changed (pid %d, was %d)", c.Failure(), c.PID(), pid)
	}
	select {
	case <-c.Done():
		t.Fatal("the child exited after a withheld result")
	default:
	}
	if _, err := c.Invoke(context.Background(), "test_light", "turn_on", json.RawMessage(`{"on":false}`)); err != nil {
		t.Fatalf("an invoke after the withheld results: %v", err)
	}
}

// Stopping the child ends a pending call: done runs with unavailable and Close returns.
func TestStartObserveEndsOnClose(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "hang-observe", ClientOptions{CallTimeout: MaxCallTimeout})
	col := newCollector(t)
	c.StartObserve(context.Background(), "test_light", col.done())
	c.StartObserve(context.Background(), "test_light", col.done())
	start := time.Now()
	c.Close(context.Background())
	wantCode(t, col.next().err, capadapter.CodeUnavailable)
	wantCode(t, col.next().err, capadapter.CodeUnavailable)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close with a pending call took %v", d)
	}
}

// A queued call whose ctx is cancelled leaves the queue and the child keeps running; the
// active call's cancellation kills the child.
func TestStartObserveCancel(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "hang-observe", ClientOptions{CallTimeout: MaxCallTimeout})
	col := newCollector(t)
	active, cancelActive := context.WithCancel(context.Background())
	defer cancelActive()
	queued, cancelQueued := context.WithCancel(context.Background())
	c.StartObserve(active, "test_light", col.done())
	c.StartObserve(queued, "test_light", col.done())
	cancelQueued()
	wantCode(t, col.next().err, capadapter.CodeUnavailable)
	if c.Failure() != nil {
		t.Fatalf("cancelling a queued call failed the child: %v", c.Failure())
	}
	cancelActive()
	wantCode(t, col.next().err, capadapter.CodeUnavailable)
	waitDone(t, c)
	wantCode(t, c.Failure(), capadapter.CodeUnavailable)
}

// The queue behind the active call is bounded: a call past it is refused at once.
func TestStartObserveQueueBound(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "hang-observe", ClientOptions{CallTimeout: MaxCallTimeout})
	col := newCollector(t)
	ctx := context.Background()
	for range maxQueuedCalls + 1 {
		c.StartObserve(ctx, "test_light", col.done())
	}
	select {
	case o := <-col.ch:
		t.Fatalf("a call within the bound ended: %v", o.err)
	default:
	}
	c.StartObserve(ctx, "test_light", col.done())
	select {
	case o := <-col.ch:
		wantCode(t, o.err, capadapter.CodeUnavailable)
	default:
		t.Fatal("a call past the queue bound was not refused at once")
	}
	if c.Failure() != nil {
		t.Fatalf("a full queue failed the child: %v", c.Failure())
	}
	c.Close(ctx)
	for range maxQueuedCalls + 1 {
		wantCode(t, col.next().err, capadapter.CodeUnavailable)
	}
}

// What the pipe does not take at once is finished by a goroutine of its own, and the write side
// passes on to the frame of the next call; a failed child ends that goroutine by closing stdin.
func TestWriteFinishesOffTheCaller(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	try, err := trywrite.New(w)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing fails before exited is set below, which keeps failLocked from signalling: this
	// Client has no process group.
	c := &Client{stdin: w, stdinTry: try}
	c.timer = time.AfterFunc(time.Hour, func() {})
	defer c.timer.Stop()
	frame := []byte(strings.Repeat("x", 1023) + "\n")
	fill := func() {
		for {
			n, err := c.stdinTry.Write(frame)
			if err != nil {
				t.Fatal(err)
			}
			if n < len(frame) {
				return
			}
		}
	}
	fill()
	c.writing = true
	start := time.Now()
	c.write(frame, false)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("write to a full pipe blocked the caller for %v", d)
	}
	c.mu.Lock()
	c.pending = frame // a call activated meanwhile: the writer goroutine writes it too
	c.mu.Unlock()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(io.Discard, r)
	}()
	eventually(t, 5*time.Second, "the write side was not given up", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.writing && c.pending == nil
	})
	c.writers.Wait()

	// Again, with nobody reading: failing the child closes stdin and ends the writer.
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	try2, _ := trywrite.New(w2)
	c.stdin, c.stdinTry, c.stdinOff = w2, try2, false
	fill()
	c.writing = true
	c.write(frame, false)
	c.mu.Lock()
	c.exited = true // no signal: there is no process group
	c.failLocked(newError(capadapter.CodeTimeout, "scripted"))
	c.release(nil)
	c.writers.Wait()
	w.Close()
	<-drained
}

// A caller that cancels its context in done, once its call has ended, starts no goroutine: the
// call's cancellation is unregistered before done runs. Registered until after done, it ran
// cancelCall on a goroutine of its own on every call.
func TestCancelAfterDone(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "normal", ClientOptions{})
	call := func() {
		ctx, cancel := context.WithCancel(context.Background())
		ended := make(chan error, 1)
		c.StartObserve(ctx, "test_light", func(_ json.RawMessage, err error) {
			cancel()
			ended <- err
		})
		if err := <-ended; err != nil {
			t.Fatal(err)
		}
	}
	call() // the child's readers are running
	const calls = 200
	n := daemontest.GoroutinesStarted(func() {
		for range calls {
			call()
		}
	})
	// The runtime may start a few goroutines of its own meanwhile (a GC's workers).
	if n > calls/10 {
		t.Fatalf("%d calls whose caller cancelled in done started %d goroutines", calls, n)
	}
}
