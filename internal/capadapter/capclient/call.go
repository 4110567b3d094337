package capclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/capadapter"
)

// maxQueuedCalls bounds the calls admitted to one child behind the one in flight. A queued call
// waits up to a call timeout for each call ahead of it, so 64 (96 s at the default timeout) is
// already more than any caller waits; past it a call fails at once with unavailable instead of
// holding memory for a child that cannot keep up.
const maxQueuedCalls = 64

type callState int

const (
	callQueued callState = iota // admitted, waiting for the active call to end
	callActive                  // its request is written or being written; its deadline runs
	callDone                    // ended; its done has run or is about to
)

// callKind says what a call's answer and deadline are held to.
type callKind uint8

const (
	plainCall    callKind = iota // Call: a result as it is; the call timeout or ctx's deadline
	screenedCall                 // observe and invoke: a result must pass screenResult
	startupCall                  // list and describe of the handshake: ctx's deadline alone
)

// call is one admitted request. Client.mu guards state, deadline, resp, err and next; the rest
// is set before admission.
type call struct {
	id      string
	frame   []byte
	kind    callKind
	ctx     context.Context
	done    func(capadapter.Response, *capadapter.Error)
	stopCtx func() bool // unregisters the cancellation by ctx

	state    callState
	deadline time.Time
	resp     capadapter.Response
	err      *capadapter.Error
	next     *call // in Client's list of ended calls
}

// Call sends one request and returns the adapter's response: a result, or an error code of
// the closed set (which leaves the child running). Any other outcome is an *capadapter.Error and the
// child has been killed. Calls to one child run one at a time, in the order they were made.
// The call's deadline, which starts when its request is written, is the Client's call timeout
// or ctx's, whichever comes first; a missed deadline is timeout, a cancelled ctx unavailable,
// and both kill the child, since its late answer could otherwise pair with the next request.
// A call cancelled while it still waits for its turn fails without harm to the child.
func (c *Client) Call(ctx context.Context, req capadapter.Request) (capadapter.Response, error) {
	return c.call(ctx, req, plainCall)
}

// call is Call for a plain or startup call; a startup call has ctx's deadline alone, when
// ctx has one.
func (c *Client) call(ctx context.Context, req capadapter.Request, kind callKind) (capadapter.Response, error) {
	type outcome struct {
		resp capadapter.Response
		err  *capadapter.Error
	}
	ch := make(chan outcome, 1)
	c.start(ctx, req, kind, func(resp capadapter.Response, e *capadapter.Error) { ch <- outcome{resp, e} })
	o := <-ch
	if o.err != nil {
		return capadapter.Response{}, o.err
	}
	return o.resp, nil
}

// Observe calls observe on capability id and screens the result (see
// capadapter.ScreenResult): a result that fails a screen is withheld (result_withheld) and the
// child serves on; one over capadapter.MaxResultBytes kills it.
func (c *Client) Observe(ctx context.Context, id string) (json.RawMessage, error) {
	return await(func(done func(json.RawMessage, error)) { c.StartObserve(ctx, id, done) })
}

// Invoke calls invoke on capability id. It does not check action or args against the
// descriptor: Supervisor.Invoke does that before it calls the child.
func (c *Client) Invoke(ctx context.Context, id, action string, args json.RawMessage) (json.RawMessage, error) {
	return await(func(done func(json.RawMessage, error)) { c.StartInvoke(ctx, id, action, args, done) })
}

// StartObserve is Observe without the wait: done receives exactly what Observe would return,
// exactly once. A call refused at once (a dead or stopping child, a full queue, a cancelled
// ctx) runs done before StartObserve returns; otherwise done runs when the call ends, on
// whichever goroutine ends it: the child's stdout reader for an answer (the common case, so
// that the answer is handled without a goroutine hand-off), the deadline's timer, the
// cancellation of ctx, a failed write, or the goroutine that reaps the child. No lock of c is
// held then, but the stdout reader waits for done to return, so done must not block, nor wait
// for another call of c or for c to stop. Cancelling ctx is safe under a lock that done takes:
// the cancellation reaches the call on a goroutine of its own (context.AfterFunc).
//
// StartObserve writes the request itself when no other call is in flight, with one
// non-blocking write; it never waits for the pipe.
func (c *Client) StartObserve(ctx context.Context, id string, done func(json.RawMessage, error)) {
	c.startResult(ctx, capadapter.Request{Method: capadapter.MethodObserve, CapabilityID: id}, done)
}

// StartInvoke is Invoke without the wait, as StartObserve is Observe without it.
func (c *Client) StartInvoke(ctx context.Context, id, action string, args json.RawMessage, done func(json.RawMessage, error)) {
	c.startResult(ctx, capadapter.Request{Method: capadapter.MethodInvoke, CapabilityID: id, Action: action, Args: args}, done)
}

func (c *Client) startResult(ctx context.Context, req capadapter.Request, done func(json.RawMessage, error)) {
	c.start(ctx, req, screenedCall, func(resp capadapter.Response, e *capadapter.Error) { // the reader has screened a result
		switch {
		case e != nil:
			done(nil, e)
		case resp.ErrorCode != "":
			done(nil, &capadapter.Error{Code: resp.ErrorCode, FromAdapter: true, Detail: req.Method + " failed"})
		default:
			// The frame was this call's own copy (see answer), so the result needs no copy.
			done(resp.Result, nil)
		}
	})
}

// await runs start and waits for the outcome it hands to done.
func await(start func(done func(json.RawMessage, error))) (json.RawMessage, error) {
	type outcome struct {
		raw json.RawMessage
		err error
	}
	ch := make(chan outcome, 1)
	start(func(raw json.RawMessage, err error) { ch <- outcome{raw, err} })
	o := <-ch
	return o.raw, o.err
}

// start admits one request, or refuses it by running done at once. An admitted call becomes
// active at once when no other is, and its request is written from here; otherwise it queues,
// and the goroutine that ends the call ahead of it writes it.
func (c *Client) start(ctx context.Context, req capadapter.Request, kind callKind, done func(capadapter.Response, *capadapter.Error)) {
	if ctx.Err() != nil {
		done(capadapter.Response{}, ctxError(ctx))
		return
	}
	id := strconv.FormatUint(c.seq.Add(1), 10)
	frame, err := capadapter.EncodeRequest(req, id)
	if err != nil {
		done(capadapter.Response{}, asError(err, capadapter.CodeInvalidRequest))
		return
	}
	cl := &call{id: id, frame: frame, kind: kind, ctx: ctx, done: done}
	c.mu.Lock()
	if c.failure != nil || c.stopping {
		e := c.deadErrorLocked()
		c.mu.Unlock()
		done(capadapter.Response{}, e)
		return
	}
	if c.active != nil && len(c.queue) >= maxQueuedCalls {
		c.mu.Unlock()
		done(capadapter.Response{}, newError(capadapter.CodeUnavailable, "the adapter already has "+strconv.Itoa(maxQueuedCalls)+" calls waiting"))
		return
	}
	if ctx.Done() != nil {
		// Registered under mu, so that a cancellation finds the call admitted.
		cl.stopCtx = context.AfterFunc(ctx, func() { c.cancelCall(cl) })
	}
	var write []byte
	if c.active == nil {
		write = c.activateLocked(cl)
	} else {
		cl.state = callQueued
		c.queue = append(c.queue, cl)
	}
	c.release(write)
}

// activateLocked makes cl the active call and starts its deadline. It returns cl's frame when
// the caller now owns the write side and must write it (see release); otherwise the frame is
// left for the goroutine that owns it. c.mu is held.
func (c *Client) activateLocked(cl *call) []byte {
	cl.state = callActive
	c.active = cl
	// A timer rather than a derived context keeps the path free of context allocations; the
	// Client's one timer is reused, as one call is active at a time.
	deadline := time.Now().Add(c.callTimeout)
	if d, ok := cl.ctx.Deadline(); ok && (cl.kind == startupCall || d.Before(deadline)) {
		deadline = d
	}
	cl.deadline = deadline
	c.armLocked(deadline)
	if c.writing {
		c.pending = cl.frame
		return nil
	}
	c.writing = true
	return cl.frame
}

// release unlocks c.mu, then writes frame if the caller got the write side with it, and runs
// the done functions of the calls that ended meanwhile, so that no done runs under the lock.
// The write goes first: the child can work on the next request while this goroutine answers
// the previous one. Each call's cancellation is unregistered before its done runs: a caller
// that cancels its context once the call has ended would otherwise start a goroutine for
// cancelCall, which finds the call ended and does nothing.
func (c *Client) release(frame []byte) {
	cl := c.ended
	c.ended, c.lastEnd = nil, nil
	c.mu.Unlock()
	if frame != nil {
		c.write(frame, false)
	}
	for cl != nil {
		next := cl.next
		cl.next = nil
		if cl.stopCtx != nil {
			cl.stopCtx()
		}
		cl.done(cl.resp, cl.err)
		cl = next
	}
}

// endLocked ends cl with resp or e; its done runs at the next release. The caller has taken cl
// off active or the queue. c.mu is held.
func (c *Client) endLocked(cl *call, resp capadapter.Response, e *capadapter.Error) {
	if cl.state == callDone {
		return
	}
	cl.state = callDone
	cl.resp, cl.err = resp, e
	if c.lastEnd == nil {
		c.ended = cl
	} else {
		c.lastEnd.next = cl
	}
	c.lastEnd = cl
}

// endAllLocked ends the active call with e and every queued call as the child's death
// requires. c.mu is held.
func (c *Client) endAllLocked(e *capadapter.Error) {
	if cl := c.active; cl != nil {
		c.active = nil
		c.pending = nil
		c.timer.Stop()
		c.timerSet = false
		c.endLocked(cl, capadapter.Response{}, e)
	}
	for _, cl := range c.queue {
		c.endLocked(cl, capadapter.Response{}, c.deadErrorLocked())
	}
	clear(c.queue)
	c.queue = c.queue[:0]
}

// write writes frame to the child's stdin; the calling goroutine owns the write side, and
// keeps it to write the frame of a call activated meanwhile. The pipe nearly always has room
// for a whole frame, so a non-blocking attempt is all it takes; what the pipe does not take at
// once is written by a goroutine of its own (mayBlock), so that neither the caller nor the
// stdout reader ever waits for a child that does not read its stdin. That wait is bounded by
// the active call's deadline: its expiry kills the child and closes stdin, which ends the write.
func (c *Client) write(frame []byte, mayBlock bool) {
	for frame != nil {
		var err error
		if mayBlock {
			_, err = c.stdin.Write(frame)
		} else {
			var n int
			n, err = c.stdinTry.Write(frame)
			if err == nil && n < len(frame) {
				rest := frame[n:]
				c.mu.Lock()
				if !c.exited {
					c.writers.Add(1) // before wait() waits: exited is set first, under mu
					c.mu.Unlock()
					go func() {
						defer c.writers.Done()
						c.write(rest, true)
					}()
					return
				}
				c.mu.Unlock()
				err = os.ErrClosed // the child is gone: nothing reads the rest
			}
		}
		c.mu.Lock()
		if err != nil {
			c.failLocked(newError(capadapter.CodeUnavailable, "writing the request to the adapter failed"))
		}
		frame, c.pending = c.pending, nil
		if frame == nil {
			c.writing = false
		}
		c.release(nil)
	}
}

// armLocked makes sure the timer fires no later than deadline. The timer is left running when
// a call ends and is moved only when a deadline comes before the time it is set for: calls
// succeed each other without touching it, since each change of a timer that becomes the
// earliest one wakes the runtime's poller thread, an expensive wake-up on an idle machine.
// When it fires, expire finds the active call's deadline still ahead and sets it for that
// deadline. c.mu is held.
func (c *Client) armLocked(deadline time.Time) {
	if c.timerSet && !deadline.Before(c.timerAt) {
		return
	}
	c.timerSet, c.timerAt = true, deadline
	c.timer.Reset(time.Until(deadline))
}

// expire runs when the timer fires. When the active call missed its deadline, the child is
// failed, since its late answer could pair with the next request; a call whose deadline is
// still ahead (one that became active after the timer was set) has the timer set for it again.
func (c *Client) expire() {
	c.mu.Lock()
	c.timerSet = false
	if cl := c.active; cl != nil {
		if time.Now().Before(cl.deadline) {
			c.armLocked(cl.deadline)
		} else {
			c.failLocked(newError(capadapter.CodeTimeout, "the adapter did not answer before the deadline"))
		}
	}
	c.release(nil)
}

// cancelCall ends cl when its ctx is done: a queued call simply leaves the queue; the active
// one fails the child, as a missed deadline does.
func (c *Client) cancelCall(cl *call) {
	c.mu.Lock()
	switch cl.state {
	case callQueued:
		c.queue = slices.DeleteFunc(c.queue, func(x *call) bool { return x == cl })
		c.endLocked(cl, capadapter.Response{}, ctxError(cl.ctx))
	case callActive:
		c.failLocked(ctxError(cl.ctx))
	}
	c.release(nil)
}

func ctxError(ctx context.Context) *capadapter.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return newError(capadapter.CodeTimeout, "the adapter did not answer before the deadline")
	}
	return newError(capadapter.CodeUnavailable, "the call was cancelled")
}

func (c *Client) deadErrorLocked() *capadapter.Error {
	if c.failure != nil {
		return newError(capadapter.CodeUnavailable, "the adapter process is gone (it failed with "+c.failure.Code+")")
	}
	return newError(capadapter.CodeUnavailable, "the adapter process is stopping")
}

// fail records e as the failure, unless one is recorded, kills the process group and ends
// the calls (see failLocked).
func (c *Client) fail(e *capadapter.Error) {
	c.mu.Lock()
	c.failLocked(e)
	c.release(nil)
}

// failLocked records e as the failure, unless one is recorded, kills the process group, closes
// stdin, and ends the active call with e and the queued ones with unavailable; their done
// functions run at the next release. c.mu is held.
func (c *Client) failLocked(e *capadapter.Error) {
	if c.failure == nil {
		c.failure = e
	}
	c.signalLocked(unix.SIGKILL)
	c.closeStdinLocked()
	c.endAllLocked(e)
}

// readStdout is the one reader of the child's stdout. It answers the active call with each
// frame (see answer); a frame no call waits for (a duplicate or unsolicited response) fails
// the child.
func (c *Client) readStdout() {
	defer close(c.stdoutDone)
	fr := capadapter.NewFrameReader(c.stdout)
	for {
		line, err := fr.Next()
		if err != nil {
			e := asError(err, capadapter.CodeUnavailable)
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				e = newError(capadapter.CodeUnavailable, "the adapter closed its stdout")
			}
			c.mu.Lock()
			if !c.stopping || c.active != nil {
				c.failLocked(e)
			}
			c.release(nil)
			_, _ = io.Copy(io.Discard, c.stdout) // drain until the group is gone
			return
		}
		c.mu.Lock()
		cl := c.active
		if cl == nil {
			if c.failure == nil {
				c.failLocked(newError(capadapter.CodeMalformedResponse, "the adapter sent a frame no request was waiting for"))
			}
			c.release(nil)
			continue
		}
		c.mu.Unlock()
		c.answer(cl, append([]byte(nil), line...))
	}
}

// answer decodes frame as the response to cl and, for an observe or invoke, screens its result,
// then ends cl and makes the next queued call active. The call stays active while its frame is
// checked, so that no later request is written before the child is known to be sound. A frame
// that fails the protocol's checks (DecodeResponse, and a result's size) kills the child before
// the call learns why. A well-formed, correctly paired result that fails a screen ends cl with
// result_withheld and leaves the child serving: no stale answer is left to pair with a later
// request.
func (c *Client) answer(cl *call, frame []byte) {
	resp, err := capadapter.DecodeResponse(frame, cl.id)
	var withheld *capadapter.Error
	if err == nil && cl.kind == screenedCall && resp.ErrorCode == "" {
		err = capadapter.ScreenResult(resp.Result, false) // capadapter.DecodeResponse has checked the JSON whole
		if e, ok := err.(*capadapter.Error); ok && e.Code == capadapter.CodeResultWithheld {
			withheld, err, resp = e, nil, capadapter.Response{}
		}
	}
	c.mu.Lock()
	if c.active != cl { // the deadline, ctx or a failure ended it meanwhile
		c.release(nil)
		return
	}
	if err != nil {
		c.failLocked(asError(err, capadapter.CodeMalformedResponse))
		c.release(nil)
		return
	}
	c.active = nil
	c.endLocked(cl, resp, withheld)
	var write []byte
	if len(c.queue) > 0 {
		next := c.queue[0]
		c.queue = slices.Delete(c.queue, 0, 1)
		write = c.activateLocked(next)
	}
	c.release(write)
}
