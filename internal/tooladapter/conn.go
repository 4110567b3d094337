package tooladapter

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// maxRevokeWait bounds how long Close waits for the best-effort revoke frame to be written; the
// descriptor's requestTimeoutMs lowers it further. Closing the socket is the final revocation,
// so a slow adapter must not hold up a session close for longer than this.
const maxRevokeWait = 100 * time.Millisecond

// writeTimeoutFactor sets the write deadline to this many request timeouts. Requests time out
// on their own clock from admission; the deadline only detects an adapter that stopped reading,
// and it is long enough that requests stuck behind a blocked write time out first, unsent and
// therefore not indeterminate (TestWriteBlockedTimeout).
const writeTimeoutFactor = 2

// maxDirectWrite is the largest invoke frame a caller writes itself. It is well below a Unix
// socket's send buffer, so such a write normally completes at once; larger frames go through
// the writer goroutine, so that their callers can time out while the write is blocked.
const maxDirectWrite = 32 << 10

// dial connects to the adapter socket. Tests replace it to hold a connect open.
var dial = func(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}

// Options configure Connect.
type Options struct {
	// Root is the canonical session cwd (see CanonicalRoot). When set, Invoke lstat-walks every
	// payload path beneath it before admission (see ResolveUnder); when empty, only the path
	// syntax is checked.
	Root string
	// Logger receives content-free diagnostics: codes and counts, never a path, payload or
	// handle. Nil discards them.
	Logger *slog.Logger
}

type connState int

const (
	stateOpen    connState = iota // bound; Invoke admits work
	stateClosing                  // Close called: pending work failed, revoke being written
	stateFailed                   // a protocol violation or the transport ended the connection
	stateClosed                   // Close finished
)

type callState int

const (
	callQueued callState = iota
	callActive
	callDone
)

// call is one admitted request. Conn.mu guards every field but those set at construction.
type call struct {
	id, key, op string
	frame       []byte
	admitted    time.Time
	done        chan struct{}

	state   callState
	written bool // the writer took the invoke frame: the adapter may act on it
	data    json.RawMessage
	err     *protocol.Error
}

// Conn is the runtime client of one bound capability: one Unix-socket connection to an adapter
// for one (host, session, generation). It multiplexes Invoke calls up to maxConcurrentRequests,
// queues up to maxQueuedRequests more in FIFO order, and refuses the rest.
//
// Guarantees: no frame but bind ever carries the capability handle; every inbound frame must
// carry the descriptor's exact identity, and one that contains the handle anywhere ends the
// connection; every request ends exactly once, and a request that may have reached the adapter
// ends with details.indeterminate set when it did not get an answer. Conn never retries.
//
// Concurrency: all methods are safe for concurrent use. Each connection has one reader
// goroutine and one writer goroutine, and Close waits for both. Writes are serialized: a caller
// whose small invoke frame finds the writer idle writes it itself, which saves a goroutine
// hand-off on the common path; everything else (queued invokes, aborts, revoke) goes through the
// writer goroutine, control frames first.
type Conn struct {
	d       *Descriptor
	id      Identity
	opts    Options
	log     *slog.Logger
	nc      net.Conn
	rd      *ndjson.Reader
	secret  []byte
	timeout time.Duration
	maxReq  int

	wg          sync.WaitGroup
	writerDone  chan struct{}
	closeOnce   sync.Once
	closeFinish chan struct{}

	// mu guards the fields below; cond (on mu) wakes the writer.
	mu      sync.Mutex
	cond    *sync.Cond
	state   connState
	failure *protocol.Error  // why the connection failed (stateFailed)
	queue   []*call          // admitted, waiting for an active slot, FIFO
	active  map[string]*call // by request id: holding an active slot
	outbox  []*call          // active, invoke frame not yet taken by the writer, FIFO
	control [][]byte         // abort and revoke frames: written before any invoke
	revoke  bool             // control ends with the revoke frame
	writing bool             // a goroutine is writing to the socket: writes are serialized
	keys    map[string]bool  // idempotency keys in flight
	aborts  *abortMemory
	tel     *telemetry
}

// Connect checks the endpoint, connects and binds, all within requestTimeoutMs, and returns the
// bound connection. ctx cancels the connect and bind only; the connection then lives until
// Close or a failure.
//
// Errors: adapter_endpoint_insecure; adapter_connect_timeout and adapter_bind_timeout
// (retryable); adapter_connection_failed and adapter_connection_closed (retryable);
// adapter_secret_reflected, adapter_protocol_invalid, tool_adapter_identity_mismatch,
// tool_adapter_binding_mismatch and tool_adapter_contract_mismatch for a misbehaving adapter.
func Connect(ctx context.Context, d *Descriptor, opts Options) (*Conn, *protocol.Error) {
	if e := CheckEndpoint(d.Endpoint.Path); e != nil {
		return nil, e
	}
	timeout := time.Duration(d.Limits.RequestTimeoutMs) * time.Millisecond
	deadline := time.Now().Add(timeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := dial(dctx, d.Endpoint.Path)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, protocol.Retryable(CodeConnectionFailed, "connecting to the tool adapter was cancelled")
		case dctx.Err() != nil || isTimeout(err):
			return nil, protocol.Retryable(CodeConnectTimeout, "tool adapter did not accept the connection within %d ms", d.Limits.RequestTimeoutMs)
		}
		// The dial error names the socket path; it is deliberately dropped.
		return nil, protocol.Retryable(CodeConnectionFailed, "cannot connect to the tool adapter")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Conn{
		d: d, id: d.identity(), opts: opts, log: log, nc: nc,
		rd:          ndjson.NewReader(nc, int(d.Limits.MaxResponseBytes)-1),
		secret:      []byte(d.Binding.CapabilityHandle.v),
		timeout:     timeout,
		maxReq:      int(d.Limits.MaxRequestBytes),
		writerDone:  make(chan struct{}),
		closeFinish: make(chan struct{}),
		active:      make(map[string]*call),
		keys:        make(map[string]bool),
		aborts:      newAbortMemory(int(d.Limits.MaxIdempotencyKeys), time.Duration(d.Limits.IdempotencyTtlMs)*time.Millisecond),
		tel:         newTelemetry(d.Limits, d.Operations),
	}
	c.cond = sync.NewCond(&c.mu)
	if e := c.bind(ctx, deadline); e != nil {
		_ = nc.Close()
		log.Warn("tool adapter bind failed", "code", e.Code)
		return nil, e
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c, nil
}

// bind writes the bind frame and waits for a matching bound frame, before any goroutine runs.
func (c *Conn) bind(ctx context.Context, deadline time.Time) *protocol.Error {
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = c.nc.SetDeadline(deadline)
	frame, err := marshalFrame(c.d.bindFrame())
	if err != nil {
		return protocol.Errorf(CodeRequestInvalid, "bind frame is not serializable")
	}
	timedOut := func() *protocol.Error {
		if ctx.Err() != nil {
			return protocol.Retryable(CodeConnectionFailed, "binding the tool adapter was cancelled")
		}
		return protocol.Retryable(CodeBindTimeout, "tool adapter did not answer bind within %d ms", c.d.Limits.RequestTimeoutMs)
	}
	if _, err := c.nc.Write(frame); err != nil {
		if isTimeout(err) {
			return timedOut()
		}
		return protocol.Retryable(CodeConnectionFailed, "cannot write to the tool adapter")
	}
	line, err := c.rd.Next()
	if err != nil {
		if isTimeout(err) {
			return timedOut()
		}
		return c.readError(err)
	}
	f, e := c.inbound(line)
	if e != nil {
		return e
	}
	if f.Kind != KindBound {
		return protocol.Errorf(CodeProtocolInvalid, "tool adapter sent %s before bound", f.Kind)
	}
	if !slices.Equal(f.Operations, c.d.Operations) {
		return fieldError(CodeContractMismatch, "operations", "bound does not echo the granted operations in order")
	}
	if *f.Limits != c.d.Limits {
		return fieldError(CodeContractMismatch, "limits", "bound does not echo the descriptor limits")
	}
	_ = c.nc.SetDeadline(time.Time{})
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// readError maps a failed read to the connection's failure code.
func (c *Conn) readError(err error) *protocol.Error {
	var fe *ndjson.FrameError
	switch {
	case errors.As(err, &fe):
		return protocol.Retryable(CodeProtocolInvalid, "tool adapter sent an unframeable line (%s)", fe.Code).With(DetailReason, fe.Code)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return protocol.Retryable(CodeConnectionClosed, "tool adapter closed the connection")
	}
	return protocol.Retryable(CodeConnectionFailed, "tool adapter connection failed")
}

// inbound checks one line from the adapter: the handle must not appear in it (checked on the
// raw bytes, before anything parses them), it must decode as a frame, and it must carry this
// binding's identity.
func (c *Conn) inbound(line []byte) (*Frame, *protocol.Error) {
	if bytes.Contains(line, c.secret) || (bytes.IndexByte(line, '\\') >= 0 && containsEscaped(line, string(c.secret))) {
		return nil, protocol.Retryable(CodeSecretReflected, "tool adapter reflected the capability handle")
	}
	f, e := DecodeFrame(line)
	if e != nil {
		e.Retryable = true
		return nil, e
	}
	switch {
	case f.AdapterID != c.id.AdapterID:
		return nil, fieldError(CodeIdentityMismatch, "adapterId", "frame is from another adapter")
	case f.AdapterVersion != c.id.AdapterVersion:
		return nil, fieldError(CodeIdentityMismatch, "adapterVersion", "frame is from another adapter version")
	case f.HostInstanceID != c.id.HostInstanceID:
		return nil, fieldError(CodeBindingMismatch, "hostInstanceId", "frame is bound to another host instance")
	case f.SessionID != c.id.SessionID:
		return nil, fieldError(CodeBindingMismatch, "sessionId", "frame is bound to another session")
	case f.Generation != c.id.Generation:
		return nil, fieldError(CodeBindingMismatch, "generation", "frame is bound to another generation")
	}
	return f, nil
}

// containsEscaped reports whether any key or string of the JSON text line holds secret once
// its escapes are resolved: "\u0063ap…" spells the same handle as "cap…". Lines without a
// backslash never get here, and a line that is not JSON is refused later anyway.
func containsEscaped(line []byte, secret string) bool {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return false
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case string:
			return strings.Contains(x, secret)
		case []any:
			return slices.ContainsFunc(x, walk)
		case map[string]any:
			for k, e := range x {
				if strings.Contains(k, secret) || walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	for {
		line, err := c.rd.Next()
		var e *protocol.Error
		if err != nil {
			e = c.readError(err)
		} else {
			var f *Frame
			if f, e = c.inbound(line); e == nil {
				c.mu.Lock()
				e = c.dispatch(f)
				c.mu.Unlock()
			}
		}
		if e != nil {
			c.mu.Lock()
			c.fail(e)
			c.mu.Unlock()
			return
		}
	}
}

// dispatch handles one valid inbound frame of this binding. c.mu is held.
func (c *Conn) dispatch(f *Frame) *protocol.Error {
	if c.state != stateOpen {
		return nil // pending work has already ended; only the checks in inbound still apply
	}
	now := time.Now()
	switch f.Kind {
	case KindRevoked:
		return nil
	case KindBound:
		return protocol.Retryable(CodeProtocolInvalid, "tool adapter sent a second bound")
	case KindBind, KindInvoke, KindAbort, KindRevoke:
		return protocol.Retryable(CodeProtocolInvalid, "tool adapter sent a daemon-only %s frame", f.Kind)
	case KindAborted:
		if !c.aborts.ack(f.TargetRequestID, f.RequestID, now) {
			return protocol.Retryable(CodeResponseMismatch, "aborted does not match an abort in flight")
		}
		return nil
	case KindResult:
		cl := c.active[f.RequestID]
		if cl == nil || !cl.written {
			if c.aborts.result(f.RequestID, f.IdempotencyKey, f.Operation, now) {
				return nil // late result of an aborted request: dropped
			}
			return protocol.Retryable(CodeResponseMismatch, "result does not match a request in flight")
		}
		if cl.key != f.IdempotencyKey || cl.op != f.Operation {
			return protocol.Retryable(CodeResponseMismatch, "result does not match its request's idempotency key or operation")
		}
		if f.OK {
			c.finish(cl, now, f.Data, nil, outCompleted, true)
			return nil
		}
		c.finish(cl, now, nil, adapterError(f.Error), outFailed, true)
		return nil
	}
	return protocol.Retryable(CodeProtocolInvalid, "unexpected frame")
}

// adapterError turns an adapter's error body into the caller's error: the code passes if it is
// a well-formed code, the message never does.
func adapterError(b *ErrorBody) *protocol.Error {
	code := b.Code
	if !validAdapterCode(code) {
		code = CodeAdapterError
	}
	return (&protocol.Error{Code: code, Message: "host tool adapter request failed", Retryable: b.Retryable}).
		With(detailOrigin, originAdapter)
}

func (c *Conn) writeLoop() {
	defer c.wg.Done()
	defer close(c.writerDone)
	for {
		c.mu.Lock()
		for (c.state == stateOpen || c.state == stateClosing) && (c.writing || len(c.control) == 0 && len(c.outbox) == 0) {
			c.cond.Wait()
		}
		if c.state != stateOpen && c.state != stateClosing {
			c.mu.Unlock()
			return
		}
		var b []byte
		last := false
		if len(c.control) > 0 {
			b = c.control[0]
			c.control = c.control[1:]
			last = c.revoke && len(c.control) == 0
		} else {
			cl := c.outbox[0]
			c.outbox = c.outbox[1:]
			cl.written = true
			b = cl.frame
		}
		c.writing = true
		c.mu.Unlock()
		if !c.write(b, nil) || last {
			return
		}
	}
}

// write writes one frame; the caller has set c.writing, so it is the only writer. It clears
// c.writing, wakes the writer goroutine if work waits, and reports whether the write succeeded
// (a failure has failed the connection).
//
// direct is the call whose own goroutine writes its invoke frame. Its write may not outlast
// its timeout: if nothing of the frame went out by then, the call times out unsent and the
// connection lives on; a partial frame corrupts the stream and fails the connection.
func (c *Conn) write(b []byte, direct *call) bool {
	deadline := time.Now().Add(writeTimeoutFactor * c.timeout)
	if direct != nil {
		deadline = direct.admitted.Add(c.timeout)
	}
	_ = c.nc.SetWriteDeadline(deadline)
	n, err := c.nc.Write(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writing = false
	if err != nil && direct != nil && n == 0 && isTimeout(err) {
		direct.written = false
		c.finish(direct, time.Now(), nil, protocol.Retryable(CodeRequestTimeout, "tool adapter request timed out before it was sent"), outTimedOut, false)
		c.cond.Broadcast()
		return true
	}
	if err != nil {
		c.fail(protocol.Retryable(CodeConnectionFailed, "cannot write to the tool adapter"))
		return false
	}
	if len(c.control) > 0 || len(c.outbox) > 0 {
		c.cond.Broadcast()
	}
	return true
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

// finish ends cl and starts queued work in the freed slot. c.mu is held.
func (c *Conn) finish(cl *call, now time.Time, data json.RawMessage, e *protocol.Error, out outcome, answered bool) {
	switch cl.state {
	case callDone:
		return
	case callQueued:
		c.queue = slices.DeleteFunc(c.queue, func(x *call) bool { return x == cl })
	case callActive:
		delete(c.active, cl.id)
		if !cl.written {
			c.outbox = slices.DeleteFunc(c.outbox, func(x *call) bool { return x == cl })
		}
	}
	cl.state = callDone
	cl.data, cl.err = data, e
	delete(c.keys, cl.key)
	c.tel.ended(cl.op, out, now.Sub(cl.admitted), answered)
	close(cl.done)
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
		c.queue = c.queue[1:]
		cl.state = callActive
		c.active[cl.id] = cl
		c.outbox = append(c.outbox, cl)
		c.tel.activated(cl.op, now.Sub(cl.admitted))
		moved = true
	}
	c.observe(now)
	return moved
}

// observe updates occupancy telemetry. c.mu is held.
func (c *Conn) observe(now time.Time) {
	var active, queued map[string]int
	if len(c.active) > 0 {
		active = make(map[string]int, len(c.d.Operations))
		for _, cl := range c.active {
			active[cl.op]++
		}
	}
	if len(c.queue) > 0 {
		queued = make(map[string]int, len(c.d.Operations))
		for _, cl := range c.queue {
			queued[cl.op]++
		}
	}
	c.tel.occupancy(now, active, queued, len(c.active), len(c.queue))
}

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
func (c *Conn) Invoke(ctx context.Context, op, key string, payload json.RawMessage) (json.RawMessage, *protocol.Error) {
	data, e := c.invoke(ctx, op, key, payload)
	if e != nil {
		if _, ok := e.Details[DetailIndeterminate]; !ok {
			e = e.With(DetailIndeterminate, false)
		}
	}
	return data, e
}

func (c *Conn) invoke(ctx context.Context, op, key string, payload json.RawMessage) (json.RawMessage, *protocol.Error) {
	if e := c.closedError(); e != nil {
		return nil, e
	}
	if ctx.Err() != nil {
		return nil, protocol.Retryable(CodeRequestAborted, "tool adapter request was aborted before admission")
	}
	if !c.d.Grants(op) {
		return nil, protocol.Errorf(CodeOperationDenied, "operation is not granted to this session").With(DetailField, "operation")
	}
	if !validWireID(key, MaxIdempotencyKeyLen) {
		return nil, fieldError(CodeRequestInvalid, "idempotencyKey", "idempotencyKey must be 1 to %d characters of [A-Za-z0-9._:-] starting with a letter or digit", MaxIdempotencyKeyLen)
	}
	p, e := payloadPath(op, payload)
	if e != nil {
		return nil, e
	}
	if c.opts.Root != "" {
		if e := ResolveUnder(c.opts.Root, p, op == OpWrite); e != nil {
			return nil, e
		}
	}
	id := newRequestID()
	frame, err := marshalFrame(&Frame{Kind: KindInvoke, Identity: c.id, RequestID: id, IdempotencyKey: key, Operation: op, Payload: payload})
	if err != nil {
		return nil, protocol.Errorf(CodeRequestInvalid, "invoke frame is not serializable")
	}
	if len(frame) > c.maxReq {
		return nil, protocol.Errorf(CodeRequestTooLarge, "invoke frame of %d bytes exceeds maxRequestBytes %d", len(frame), c.maxReq)
	}
	cl := &call{id: id, key: key, op: op, frame: frame, done: make(chan struct{})}
	direct, e := c.admit(cl)
	if e != nil {
		return nil, e
	}
	if direct {
		c.write(frame, cl)
	}
	timer := time.NewTimer(c.timeout - time.Since(cl.admitted)) // the clock runs from admission
	defer timer.Stop()
	select {
	case <-cl.done:
	case <-timer.C:
		c.expire(cl, CodeRequestTimeout)
	case <-ctx.Done():
		c.expire(cl, CodeRequestAborted)
	}
	<-cl.done
	return cl.data, cl.err
}

func (c *Conn) closedError() *protocol.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateOpen {
		return nil
	}
	e := protocol.Errorf(CodeSessionClosed, "tool adapter session is closed")
	if c.failure != nil {
		e = e.With(detailCause, c.failure.Code)
	}
	return e
}

// admit queues cl or refuses it. Nothing has been written when it refuses. When cl got an
// active slot and nothing else waits to be written, admit makes the caller the writer (direct):
// the common uncontended call then skips the hand-off to the writer goroutine.
func (c *Conn) admit(cl *call) (direct bool, e *protocol.Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateOpen {
		e := protocol.Errorf(CodeSessionClosed, "tool adapter session is closed")
		if c.failure != nil {
			e = e.With(detailCause, c.failure.Code)
		}
		return false, e
	}
	if c.keys[cl.key] {
		return false, protocol.Retryable(CodeRequestInvalid, "a request with this idempotency key is already in flight").
			With(DetailField, "idempotencyKey").With(DetailReason, "duplicate_idempotency_key")
	}
	l := c.d.Limits
	if int64(len(c.active)) >= l.MaxConcurrentRequests && int64(len(c.queue)) >= l.MaxQueuedRequests {
		c.tel.rejected(cl.op)
		return false, protocol.Retryable(CodeQueueCapacity, "tool adapter request queue is full").
			With(DetailRetryAfterMs, RetryAfter(l.RequestTimeoutMs))
	}
	now := time.Now()
	cl.admitted = now
	c.keys[cl.key] = true
	c.tel.accepted(cl.op)
	c.queue = append(c.queue, cl)
	if !c.pump(now) {
		return false, nil
	}
	if len(cl.frame) <= maxDirectWrite && !c.writing && len(c.control) == 0 && len(c.outbox) == 1 && c.outbox[0] == cl {
		c.outbox = c.outbox[:0]
		cl.written = true
		c.writing = true
		return true, nil
	}
	c.cond.Signal()
	return false, nil
}

// expire ends cl early: code is adapter_request_timeout or adapter_request_aborted. A request
// the adapter may have seen gets one targeted abort frame, is remembered so that its late
// result is dropped, and fails indeterminate.
func (c *Conn) expire(cl *call, code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl.state == callDone {
		return
	}
	now := time.Now()
	out, msg := outTimedOut, "tool adapter request timed out"
	if code == CodeRequestAborted {
		out, msg = outCancelled, "tool adapter request was aborted"
	}
	if cl.state == callQueued || !cl.written {
		c.finish(cl, now, nil, protocol.Retryable(code, "%s before it was sent", msg), out, false)
		return
	}
	abortID := newRequestID()
	if !c.aborts.add(cl.id, abortEntry{abortID: abortID, key: cl.key, op: cl.op}, now) {
		c.fail(protocol.Retryable(CodeAbortCapacity, "tool adapter abort memory is full"))
		return
	}
	frame, err := marshalFrame(&Frame{Kind: KindAbort, Identity: c.id, RequestID: abortID, TargetRequestID: cl.id})
	if err == nil {
		c.control = append(c.control, frame)
		c.cond.Signal()
	}
	c.finish(cl, now, nil, indeterminate(protocol.Retryable(code, "%s; it may have been executed", msg)), out, false)
}

// Close revokes the capability: pending requests fail adapter_session_closed (indeterminate if
// they may have reached the adapter), a best-effort revoke frame is written within
// min(100 ms, requestTimeoutMs), and the socket is closed. Close does not wait for revoked. It
// returns after the connection's goroutines have exited; it is idempotent and safe to call
// concurrently.
func (c *Conn) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		wait := false
		if c.state == stateOpen {
			c.state = stateClosing
			c.failPending(CodeSessionClosed, "tool adapter session is closed", false)
			if frame, err := marshalFrame(&Frame{Kind: KindRevoke, Identity: c.id}); err == nil {
				c.control = append(c.control, frame)
				c.revoke = true
				wait = true
			}
			c.cond.Broadcast()
		}
		c.mu.Unlock()
		if wait {
			t := time.NewTimer(min(maxRevokeWait, c.timeout))
			select {
			case <-c.writerDone:
			case <-t.C:
			}
			t.Stop()
		}
		c.mu.Lock()
		if c.state == stateClosing {
			c.state = stateClosed
		}
		c.cond.Broadcast()
		c.mu.Unlock()
		_ = c.nc.Close()
		c.wg.Wait()
		close(c.closeFinish)
	})
	<-c.closeFinish
}

// Err returns the error that failed the connection, or nil while it is open or after a plain
// Close.
func (c *Conn) Err() *protocol.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failure
}

// Telemetry returns the connection's content-free queue telemetry.
func (c *Conn) Telemetry() QueueSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tel.snapshot(time.Now())
}

// Summary returns the secret-free policy summary of the bound descriptor.
func (c *Conn) Summary() Summary { return c.d.Summary() }

// Incarnation returns the host, session and generation this connection is bound to.
func (c *Conn) Incarnation() Binding { return c.d.Incarnation() }

// IdempotencyKey returns the idempotency key of one tool call:
// "tool-" + hex(sha256(operation + "\x00" + toolCallID)). A retry of the same call gets the
// same key, so the adapter can deduplicate it.
func IdempotencyKey(operation, toolCallID string) string {
	sum := sha256.Sum256([]byte(operation + "\x00" + toolCallID))
	return "tool-" + hex.EncodeToString(sum[:])
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
