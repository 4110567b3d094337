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
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/expiry"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/trywrite"
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
// the writer goroutine.
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
	done        func(json.RawMessage, *protocol.Error) // see Start

	admitted time.Time
	stopCtx  func() bool // unregisters the cancellation of the caller's context
	state    callState
	written  bool // the invoke frame was taken for writing: the adapter may act on it
	data     json.RawMessage
	err      *protocol.Error
	next     *call // in Conn's list of ended calls whose done has not run yet

	live expiry.Entry[*call] // in Conn.clock until the call ends
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
// whose small invoke frame finds the writer idle makes one non-blocking write of it itself, and
// the reader goroutine runs a call's completion as soon as its result is decoded, so the common
// uncontended call crosses no goroutine hand-off on the daemon side. Everything else (queued
// invokes, aborts, revoke, and whatever a direct write could not place at once) goes through
// the writer goroutine: the rest of a partly written frame first, then control frames, then
// invokes.
type Conn struct {
	d       *Descriptor
	id      Identity
	invokes *invokeEncoder
	opts    Options
	log     *slog.Logger
	nc      net.Conn
	direct  trywrite.Writer // for non-blocking direct writes; not Ready when nc has no descriptor
	rd      *ndjson.Reader
	secret  []byte
	rare    int // rarestByte(secret)
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
	partial []byte           // the unwritten rest of a frame a direct write began: written first
	control [][]byte         // abort and revoke frames: written before any invoke
	revoke  bool             // control ends with the revoke frame
	writing bool             // a goroutine is writing to the socket: writes are serialized
	keys    map[string]bool  // idempotency keys in flight
	aborts  *abortMemory
	tel     *telemetry
	// ended lists the calls that ended under mu and whose done has yet to run; unlock runs them.
	ended, endedTail *call
	// clock holds the admitted calls that have not ended. Every call has the same timeout, so
	// one timer serves them all (package expiry), and tick ends the calls that are due.
	clock *expiry.Queue[*call]
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
		d: d, id: d.identity(), invokes: newInvokeEncoder(d.identity()), opts: opts, log: log, nc: nc,
		rd:          ndjson.NewReader(nc, int(d.Limits.MaxResponseBytes)-1),
		secret:      []byte(d.Binding.CapabilityHandle.v),
		rare:        rarestByte([]byte(d.Binding.CapabilityHandle.v)),
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
	c.clock = expiry.New[*call](timeout, c.tick)
	if sc, ok := nc.(syscall.Conn); ok {
		_ = c.direct.Init(sc)
	}
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
//
// The frame's Data is a slice of line, not a copy: line is the reader's buffer, valid until the
// next read, and a result's done runs on the reader before that (see Start), so the up to
// several MiB of a result are not copied once more on their way to the caller.
func (c *Conn) inbound(line []byte) (*Frame, *protocol.Error) {
	if reflectsHandleAt(line, c.secret, c.rare) {
		return nil, protocol.Retryable(CodeSecretReflected, "tool adapter reflected the capability handle")
	}
	f, e := decodeFrame(line, true, &c.id)
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

// reflectsHandle reports whether the JSON text line holds secret, a base64url handle, in any
// key or string once its escapes are resolved: "\u0063ap…" spells the same handle as "cap…".
//
// Only a \u escape can stand for a base64url character; every other escape (\" \\ \/ \b \f
// \n \r \t) stands for one that is not. So in a line without "\u" every handle a string
// spells is there byte for byte, and the literal search finds it; with one, each string
// holding a \u escape is decoded and searched. That is exactly as strong as decoding the whole
// line and searching every string (TestReflectsHandleMatchesExhaustive,
// FuzzReflectsHandle), without decoding a large result, which nearly always has no \u.
func reflectsHandle(line, secret []byte) bool { return reflectsHandleAt(line, secret, -1) }

// reflectsHandleAt is reflectsHandle with rare, when not negative, the index of the rarest
// byte of secret (see containsSecret).
func reflectsHandleAt(line, secret []byte, rare int) bool {
	if containsSecret(line, secret, rare) {
		return true
	}
	if !bytes.Contains(line, []byte(`\u`)) {
		return false
	}
	for i := 0; i < len(line); i++ {
		if line[i] != '"' {
			continue
		}
		// A string runs to the first quote not escaped by a backslash.
		end, hasU := -1, false
		for j := i + 1; j < len(line); j++ {
			if c := line[j]; c == '"' {
				end = j
				break
			} else if c == '\\' {
				if j+1 < len(line) && line[j+1] == 'u' {
					hasU = true
				}
				j++
			}
		}
		if end < 0 {
			return false // unterminated: not JSON, and refused as such
		}
		if hasU {
			var s string
			if json.Unmarshal(line[i:end+1], &s) == nil && strings.Contains(s, string(secret)) {
				return true
			}
		}
		i = end
	}
	return false
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
				c.unlock() // a result's completion runs here, on the reader goroutine
			}
		}
		if e != nil {
			c.mu.Lock()
			c.fail(e)
			c.unlock()
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
	var batch net.Buffers
	for {
		c.mu.Lock()
		for (c.state == stateOpen || c.state == stateClosing) && (c.writing || c.partial == nil && len(c.control) == 0 && len(c.outbox) == 0) {
			c.cond.Wait()
		}
		if c.state != stateOpen && c.state != stateClosing {
			c.mu.Unlock()
			return
		}
		// One write takes the rest of a partly written frame, then the control frames, then
		// invokes: the first in any case, more while the batch stays small enough to go out at
		// once, since a frame taken for writing counts as possibly received.
		batch = batch[:0]
		size := 0
		if c.partial != nil {
			batch = append(batch, c.partial)
			size += len(c.partial)
			c.partial = nil
		}
		for _, b := range c.control {
			batch = append(batch, b)
			size += len(b)
		}
		last := c.revoke && len(c.control) > 0
		c.control = nil
		n := 0
		for _, cl := range c.outbox {
			if n > 0 && size+len(cl.frame) > maxDirectWrite {
				break
			}
			cl.written = true
			batch = append(batch, cl.frame)
			size += len(cl.frame)
			n++
		}
		c.outbox = c.outbox[n:]
		c.writing = true
		c.mu.Unlock()
		if !c.write(batch) || last {
			return
		}
	}
}

// write writes a batch of frames from the writer goroutine; the caller has set c.writing, so it
// is the only writer. It clears c.writing and reports whether the write succeeded (a failure
// has failed the connection).
func (c *Conn) write(batch net.Buffers) bool {
	_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeoutFactor * c.timeout))
	_, err := batch.WriteTo(c.nc)
	// Cleared again: writeDirect sets no deadline, and a past one fails its write.
	_ = c.nc.SetWriteDeadline(time.Time{})
	c.mu.Lock()
	defer c.unlock()
	c.writing = false
	if err != nil {
		c.fail(protocol.Retryable(CodeConnectionFailed, "cannot write to the tool adapter"))
		return false
	}
	return true
}

// writeDirect makes one non-blocking attempt to write the invoke frame of cl from the calling
// goroutine; admit has set c.writing and cl.written. What the socket does not take at once is
// left to the writer goroutine: a frame of which nothing went out goes back to the head of the
// outbox, unsent, and times out as such; the rest of a partly written frame is written before
// anything else, since the stream is corrupt until it is complete.
func (c *Conn) writeDirect(cl *call) {
	n, err := c.direct.Write(cl.frame) // admit writes directly only when c.direct is Ready
	c.mu.Lock()
	defer c.unlock()
	c.writing = false
	switch {
	case err != nil:
		c.fail(protocol.Retryable(CodeConnectionFailed, "cannot write to the tool adapter"))
		return
	case n == 0:
		if cl.state == callActive {
			cl.written = false
			c.outbox = slices.Insert(c.outbox, 0, cl)
		}
	case n < len(cl.frame):
		c.partial = cl.frame[n:]
	}
	if c.partial != nil || len(c.control) > 0 || len(c.outbox) > 0 {
		c.cond.Signal()
	}
}

// unlock releases c.mu and then runs the done functions of the calls that ended while it was
// held, in the order they ended. Every section that may end a call releases c.mu with unlock,
// so that a completion never runs under the lock and never waits for a later unlock. The
// cancellation of a call's context is unregistered after its done has run, off the answer's
// path; one that fires meanwhile finds the call ended and does nothing.
func (c *Conn) unlock() {
	cl := c.ended
	c.ended, c.endedTail = nil, nil
	c.mu.Unlock()
	for cl != nil {
		next := cl.next
		cl.next = nil
		cl.done(cl.data, cl.err)
		cl.data = nil // a slice of the reader's buffer (see Start): do not keep it alive
		if cl.stopCtx != nil {
			cl.stopCtx()
		}
		cl = next
	}
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
	var data json.RawMessage
	var e *protocol.Error
	ended := make(chan struct{})
	c.Start(ctx, op, key, payload, func(d json.RawMessage, err *protocol.Error) {
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
	cl, e := c.prepare(ctx, op, key, payload)
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
		if _, ok := e.Details[DetailIndeterminate]; !ok {
			e = e.With(DetailIndeterminate, false)
		}
	}
	return e
}

// prepare runs every check that needs no lock and builds the call with its invoke frame.
func (c *Conn) prepare(ctx context.Context, op, key string, payload json.RawMessage) (*call, *protocol.Error) {
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
	frame, err := c.invokes.encodeWalked(id, key, op, payload) // payloadPath walked it
	if err != nil {
		return nil, protocol.Errorf(CodeRequestInvalid, "invoke frame is not serializable")
	}
	if len(frame) > c.maxReq {
		return nil, protocol.Errorf(CodeRequestTooLarge, "invoke frame of %d bytes exceeds maxRequestBytes %d", len(frame), c.maxReq)
	}
	return &call{id: id, key: key, op: op, frame: frame}, nil
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

// admit queues cl or refuses it. Nothing has been written when it refuses. An admitted call's
// clock starts: it expires requestTimeoutMs later, or when ctx is cancelled. When cl got an
// active slot and nothing else waits to be written, admit makes the caller the writer (direct):
// the common uncontended call then skips the hand-off to the writer goroutine.
func (c *Conn) admit(ctx context.Context, cl *call) (direct bool, e *protocol.Error) {
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
	c.clock.Push(&cl.live, cl, now)
	if ctx.Done() != nil {
		cl.stopCtx = context.AfterFunc(ctx, func() { c.expire(cl, CodeRequestAborted) })
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

// tick runs when the clock fires: every call whose deadline has passed times out, oldest
// first.
func (c *Conn) tick() {
	c.mu.Lock()
	defer c.unlock()
	now := time.Now()
	c.clock.Expire(now, func(cl *call) { c.expireLocked(cl, CodeRequestTimeout, now) })
}

// Close revokes the capability: pending requests fail adapter_session_closed (indeterminate if
// they may have reached the adapter), a best-effort revoke frame is written within
// min(100 ms, requestTimeoutMs), and the socket is closed. Close does not wait for revoked. It
// returns after the connection's goroutines have exited; it is idempotent and safe to call
// concurrently. The done functions of the requests it ends (see Start) run on the calling
// goroutine before it returns.
func (c *Conn) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		wait := false
		if c.state == stateOpen {
			c.state = stateClosing
			c.failPending(CodeSessionClosed, "tool adapter session is closed", false)
			c.clock.Stop() // no call is live any more
			if frame, err := marshalFrame(&Frame{Kind: KindRevoke, Identity: c.id}); err == nil {
				c.control = append(c.control, frame)
				c.revoke = true
				wait = true
			}
			c.cond.Broadcast()
		}
		c.unlock()
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
		c.unlock()
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
