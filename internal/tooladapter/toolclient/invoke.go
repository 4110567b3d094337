package toolclient

// This file owns a request's life: admission and its refusals, the FIFO queue and active
// slots, the clock and cancellation that expire a request, targeted aborts, and the one end of
// every request (finish, and fail for a connection's failure), whose completion runs outside
// the lock (unlock).

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// Invoke sends one operation to the adapter and waits for its result. key is the idempotency
// key (see IdempotencyKey); a retry of the same tool call must pass the same key.
//
// Before admission Invoke refuses, without writing anything: a closed or failed connection
// (adapter_session_closed, with details.cause when it failed), an operation the descriptor does
// not grant (adapter_operation_denied), a malformed key or payload (adapter_request_invalid,
// invalid_tool_adapter_path), a path the walk beneath Options.Root refuses, a frame over
// maxRequestBytes (adapter_request_too_large), a key already in flight (adapter_request_invalid,
// retryable) and full capacity (adapter_queue_capacity, retryable, details.retryAfterMs).
//
// After admission the request times out requestTimeoutMs after admission
// (adapter_request_timeout, retryable); ctx cancels it (adapter_request_aborted, retryable).
// Either way a request whose frame may have reached the adapter gets one targeted abort frame and
// fails indeterminate. An adapter failure keeps the adapter's code when well-formed (else
// adapter_error) and drops its message. Every error has details.indeterminate.
//
// The data of a success is one well-formed JSON value, checked against the operation's result
// schema, without whitespace between tokens, so that it can be copied into a response as it
// stands.
func (c *Conn) Invoke(ctx context.Context, op, key string, payload json.RawMessage) (json.RawMessage, *protocol.Error) {
	return c.InvokeChecked(ctx, op, key, payload, nil)
}

// InvokeChecked is Invoke with check run once the grant and path checks passed, before
// anything is sent: it gets the path the payload names (relative to the grant's root, "" for
// none), and an error it returns fails the call with nothing sent. The daemon's gate is the
// check (internal/gate); check may block, and no lock of c is held while it runs.
func (c *Conn) InvokeChecked(ctx context.Context, op, key string, payload json.RawMessage, check func(path string) *protocol.Error) (json.RawMessage, *protocol.Error) {
	var data json.RawMessage
	var e *protocol.Error
	ended := make(chan struct{})
	c.StartChecked(ctx, op, key, payload, check, func(d json.RawMessage, err *protocol.Error) {
		data, e = bytes.Clone(d), err // d is valid only until this function returns
		close(ended)
	})
	<-ended
	return data, e
}

// Start is Invoke without the wait: it admits or refuses the request and returns, and done
// receives exactly what Invoke would return, exactly once. A refusal before admission runs done
// before Start returns; otherwise done runs when the request ends, on whichever goroutine ends
// it: the connection's reader for a result (the common case: the answer then leaves without a
// goroutine hand-off), a timer, the cancellation of ctx, a failed write, or Close. No lock of c
// is held then, but the reader waits for done to return, so done must not block, nor wait for
// Close or for another request of c; and since Close may run it, Close must not be called with a
// lock that done takes.
//
// The data done receives is valid only until done returns: it is a slice of the reader's line
// buffer, which the next frame reuses, so that a result of several MiB is not copied before the
// caller copies it into its own output. A caller that keeps it must copy it, as Invoke does.
//
// Start writes a small invoke frame itself when nothing else is waiting to be written, with one
// non-blocking write; it never waits for the socket.
func (c *Conn) Start(ctx context.Context, op, key string, payload json.RawMessage, done func(json.RawMessage, *protocol.Error)) {
	c.StartChecked(ctx, op, key, payload, nil, done)
}

// StartChecked is Start with check, as InvokeChecked has it; a refusal of check runs done
// before StartChecked returns.
func (c *Conn) StartChecked(ctx context.Context, op, key string, payload json.RawMessage, check func(path string) *protocol.Error, done func(json.RawMessage, *protocol.Error)) {
	cl, e := c.prepare(ctx, op, key, payload, check)
	if e != nil {
		done(nil, determinate(e))
		return
	}
	cl.done = done
	direct, e := c.admit(ctx, cl)
	if e != nil {
		done(nil, determinate(e))
		return
	}
	if direct {
		c.writeDirect(cl)
	}
}

// determinate marks an error without details.indeterminate as not indeterminate: every error
// of a request says whether the adapter may have acted on it.
func determinate(e *protocol.Error) *protocol.Error {
	if e != nil {
		if _, ok := e.Details[tooladapter.DetailIndeterminate]; !ok {
			e = e.With(tooladapter.DetailIndeterminate, false)
		}
	}
	return e
}

// prepare runs every check that needs no lock and builds the call with its invoke frame.
func (c *Conn) prepare(ctx context.Context, op, key string, payload json.RawMessage, check func(string) *protocol.Error) (*call, *protocol.Error) {
	if e := c.closedError(); e != nil {
		return nil, e
	}
	if ctx.Err() != nil {
		return nil, protocol.Retryable(tooladapter.CodeRequestAborted, "tool adapter request was aborted before admission")
	}
	if !c.d.Grants(op) {
		return nil, protocol.Errorf(tooladapter.CodeOperationDenied, "operation is not granted to this session").With(tooladapter.DetailField, "operation")
	}
	if !tooladapter.ValidWireID(key, tooladapter.MaxIdempotencyKeyLen) {
		return nil, fieldError(tooladapter.CodeRequestInvalid, "idempotencyKey", "idempotencyKey must be 1 to %d characters of [A-Za-z0-9._:-] starting with a letter or digit", tooladapter.MaxIdempotencyKeyLen)
	}
	p, e := tooladapter.PayloadPath(op, payload)
	if e != nil {
		return nil, e
	}
	if c.opts.Root != "" {
		if e := tooladapter.ResolveUnder(c.opts.Root, p, op == tooladapter.OpWrite); e != nil {
			return nil, e
		}
	}
	if check != nil {
		if e := check(p); e != nil {
			return nil, e
		}
	}
	id := newRequestID()
	frame, err := c.invokes.EncodeWalked(id, key, op, payload) // PayloadPath walked it
	if err != nil {
		return nil, protocol.Errorf(tooladapter.CodeRequestInvalid, "invoke frame is not serializable")
	}
	if len(frame) > c.maxReq {
		return nil, protocol.Errorf(tooladapter.CodeRequestTooLarge, "invoke frame of %d bytes exceeds maxRequestBytes %d", len(frame), c.maxReq)
	}
	return &call{id: id, key: key, op: op, frame: frame}, nil
}

func (c *Conn) closedError() *protocol.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateOpen {
		return nil
	}
	e := protocol.Errorf(tooladapter.CodeSessionClosed, "tool adapter session is closed")
	if c.failure != nil {
		e = e.With(detailCause, c.failure.Code)
	}
	return e
}

// admit queues cl or refuses it. Nothing has been written when it refuses. An admitted call's
// clock starts: it expires requestTimeoutMs later, or when ctx is cancelled. When cl got an
// active slot and nothing else waits to be written, admit makes the caller the writer (direct):
// the common uncontended call then skips the hand-off to the writer goroutine.
func (c *Conn) admit(ctx context.Context, cl *call) (direct bool, e *protocol.Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateOpen {
		e := protocol.Errorf(tooladapter.CodeSessionClosed, "tool adapter session is closed")
		if c.failure != nil {
			e = e.With(detailCause, c.failure.Code)
		}
		return false, e
	}
	if c.keys[cl.key] {
		return false, protocol.Retryable(tooladapter.CodeRequestInvalid, "a request with this idempotency key is already in flight").
			With(tooladapter.DetailField, "idempotencyKey").With(tooladapter.DetailReason, "duplicate_idempotency_key")
	}
	l := c.d.Limits
	if int64(len(c.active)) >= l.MaxConcurrentRequests && int64(len(c.queue)) >= l.MaxQueuedRequests {
		c.tel.rejected(cl.op)
		return false, protocol.Retryable(tooladapter.CodeQueueCapacity, "tool adapter request queue is full").
			With(tooladapter.DetailRetryAfterMs, RetryAfter(l.RequestTimeoutMs))
	}
	now := time.Now()
	cl.admitted = now
	c.clock.Push(&cl.live, cl, now)
	if ctx.Done() != nil {
		cl.stopCtx = context.AfterFunc(ctx, func() { c.expire(cl, tooladapter.CodeRequestAborted) })
	}
	c.keys[cl.key] = true
	c.tel.accepted(cl.op)
	c.queue = append(c.queue, cl)
	c.tel.moved(cl.op, 0, 1)
	if !c.pump(now) {
		return false, nil
	}
	if c.direct.Ready() && len(cl.frame) <= maxDirectWrite && !c.writing && c.partial == nil && len(c.control) == 0 &&
		len(c.outbox) == 1 && c.outbox[0] == cl {
		c.outbox = c.outbox[:0]
		cl.written = true
		c.writing = true
		return true, nil
	}
	c.cond.Signal()
	return false, nil
}

// unlock releases c.mu and then runs the done functions of the calls that ended while it was
// held, in the order they ended. Every section that may end a call releases c.mu with unlock,
// so that a completion never runs under the lock and never waits for a later unlock. The
// cancellation of a call's context is unregistered before its done runs: a caller commonly
// cancels the context once its call has ended (the daemon does, in done), and a cancellation
// still registered then starts a goroutine to run expire, which finds the call ended and does
// nothing, a goroutine started and ended on every call. One that fires before finds the call
// ended too.
func (c *Conn) unlock() {
	cl := c.ended
	c.ended, c.endedTail = nil, nil
	c.mu.Unlock()
	for cl != nil {
		next := cl.next
		cl.next = nil
		if cl.stopCtx != nil {
			cl.stopCtx()
		}
		cl.done(cl.data, cl.err)
		cl.data = nil // a slice of the reader's buffer (see Start): do not keep it alive
		cl = next
	}
}

// finish ends cl and starts queued work in the freed slot. c.mu is held.
func (c *Conn) finish(cl *call, now time.Time, data json.RawMessage, e *protocol.Error, out outcome, answered bool) {
	switch cl.state {
	case callDone:
		return
	case callQueued:
		c.queue = slices.DeleteFunc(c.queue, func(x *call) bool { return x == cl })
		c.tel.moved(cl.op, 0, -1)
	case callActive:
		delete(c.active, cl.id)
		c.tel.moved(cl.op, -1, 0)
		if !cl.written {
			c.outbox = slices.DeleteFunc(c.outbox, func(x *call) bool { return x == cl })
		}
	}
	cl.state = callDone
	c.clock.Remove(&cl.live)
	cl.data, cl.err = data, determinate(e)
	delete(c.keys, cl.key)
	c.tel.ended(cl.op, out, now.Sub(cl.admitted), answered)
	if c.endedTail == nil {
		c.ended = cl
	} else {
		c.endedTail.next = cl
	}
	c.endedTail = cl
	if c.pump(now) {
		c.cond.Signal()
	}
}

// pump moves queued requests into free active slots, in FIFO order, and reports whether it
// moved any; their frames wait in the outbox for a writer. c.mu is held.
func (c *Conn) pump(now time.Time) bool {
	moved := false
	for c.state == stateOpen && int64(len(c.active)) < c.d.Limits.MaxConcurrentRequests && len(c.queue) > 0 {
		cl := c.queue[0]
		c.queue[0] = nil
		if len(c.queue) == 1 {
			// Emptied, it starts again at the front of its array: the common queue of one
			// then never reallocates, as one that only ever moved forward would.
			c.queue = c.queue[:0]
		} else {
			c.queue = c.queue[1:]
		}
		cl.state = callActive
		c.active[cl.id] = cl
		c.outbox = append(c.outbox, cl)
		c.tel.moved(cl.op, 1, -1)
		c.tel.activated(cl.op, now.Sub(cl.admitted))
		moved = true
	}
	c.observe(now)
	return moved
}

// observe updates occupancy telemetry; the per-operation counts are kept current by the
// transitions themselves. c.mu is held.
func (c *Conn) observe(now time.Time) {
	c.tel.totals(now, len(c.active), len(c.queue))
}

// expire ends cl early: code is adapter_request_timeout or adapter_request_aborted. A request
// the adapter may have seen gets one targeted abort frame, is remembered so that its late
// result is dropped, and fails indeterminate.
func (c *Conn) expire(cl *call, code string) {
	c.mu.Lock()
	defer c.unlock()
	c.expireLocked(cl, code, time.Now())
}

// expireLocked is expire with c.mu held.
func (c *Conn) expireLocked(cl *call, code string, now time.Time) {
	if cl.state == callDone {
		return
	}
	out, msg := outTimedOut, "tool adapter request timed out"
	if code == tooladapter.CodeRequestAborted {
		out, msg = outCancelled, "tool adapter request was aborted"
	}
	if cl.state == callQueued || !cl.written {
		c.finish(cl, now, nil, protocol.Retryable(code, "%s before it was sent", msg), out, false)
		return
	}
	abortID := newRequestID()
	if !c.aborts.add(cl.id, abortEntry{abortID: abortID, key: cl.key, op: cl.op}, now) {
		c.fail(protocol.Retryable(tooladapter.CodeAbortCapacity, "tool adapter abort memory is full"))
		return
	}
	frame, fe := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindAbort, Identity: c.id, RequestID: abortID, TargetRequestID: cl.id}, 0)
	if fe == nil {
		c.control = append(c.control, frame)
		c.cond.Signal()
	}
	c.finish(cl, now, nil, indeterminate(protocol.Retryable(code, "%s; it may have been executed", msg)), out, false)
}

// tick runs when the clock fires: every call whose deadline has passed times out, oldest
// first.
func (c *Conn) tick() {
	c.mu.Lock()
	defer c.unlock()
	now := time.Now()
	c.clock.Expire(now, func(cl *call) { c.expireLocked(cl, tooladapter.CodeRequestTimeout, now) })
}

// fail ends the connection with e: every queued request fails with e's code, every active one
// too and indeterminate if its frame was taken by the writer. c.mu is held.
func (c *Conn) fail(e *protocol.Error) {
	if c.state != stateOpen {
		return
	}
	c.state = stateFailed
	c.failure = e
	c.failPending(e.Code, e.Message, true)
	_ = c.nc.Close()
	c.cond.Broadcast()
	c.log.Warn("tool adapter connection failed", "code", e.Code)
}

// failPending ends every queued and active request with code. c.mu is held.
func (c *Conn) failPending(code, msg string, retryable bool) {
	now := time.Now()
	// finish edits these collections; iterate over copies.
	for _, cl := range slices.Concat(c.queue, c.outbox) {
		c.finish(cl, now, nil, &protocol.Error{Code: code, Message: msg, Retryable: retryable}, outFailed, false)
	}
	for _, cl := range slices.Collect(maps.Values(c.active)) {
		c.finish(cl, now, nil, indeterminate(&protocol.Error{Code: code, Message: msg, Retryable: retryable}), outFailed, false)
	}
}

// IdempotencyKey returns the idempotency key of one tool call:
// "tool-" + hex(sha256(operation + "\x00" + toolCallID)). A retry of the same call gets the
// same key, so the adapter can deduplicate it.
func IdempotencyKey(operation, toolCallID string) string {
	// The input is assembled on the stack when it fits, as it nearly always does.
	var buf [256]byte
	in := append(append(append(buf[:0], operation...), 0), toolCallID...)
	sum := sha256.Sum256(in)
	var key [len("tool-") + 2*sha256.Size]byte
	copy(key[:], "tool-")
	hex.Encode(key[len("tool-"):], sum[:])
	return string(key[:])
}

// newRequestID returns a random version 4 UUID.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
