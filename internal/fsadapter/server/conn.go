package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/expiry"
	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/ownersock"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/internal/trywrite"
)

// Error codes of result frames that airlock-fs adds to the fsops codes (fsops.Codes).
const (
	// CodeQueueCapacity: maxConcurrentRequests are running and maxQueuedRequests wait
	// (retryable). It is the daemon's code for the same condition.
	CodeQueueCapacity = "adapter_queue_capacity"
	// CodeIdempotencyConflict: the idempotency key was used with another operation or payload.
	CodeIdempotencyConflict = "idempotency_conflict"
	// CodeIdempotencyCapacity: maxIdempotencyKeys requests are still running (retryable).
	CodeIdempotencyCapacity = "idempotency_capacity"
	// CodeRequestTimeout: requestTimeoutMs passed since admission (retryable).
	CodeRequestTimeout = "request_timeout"
	// CodeOperationDenied: the grant does not include the operation.
	CodeOperationDenied = "operation_denied"
	// CodeInternal: a result could not be encoded; a bug.
	CodeInternal = "internal_error"
	// CodeHandleInResult: the result would contain the grant's capability handle (a file
	// holds it); the daemon would end the connection for the reflection, so it is refused.
	CodeHandleInResult = "handle_in_result"
)

// Timeouts of a serving connection; the bind deadline is ConnLimits.BindTimeout.
const (
	// writeTimeout bounds one frame write: the daemon reads continuously, so a write blocked
	// this long means it stopped, and the connection is closed.
	writeTimeout = 30 * time.Second
	// maxBindBytes bounds the first line: a bind frame with the longest identifiers and handle
	// is under 2 KiB.
	maxBindBytes = 16 << 10
)

// dispatchHook, when a test sets it, runs before each operation with its context.
var dispatchHook atomic.Pointer[func(ctx context.Context, op string)]

type reqState int

const (
	reqQueued reqState = iota
	reqActive
	reqJoined
	reqDone
)

// request is one invocation. grant.mu guards state and the queue/map membership.
type request struct {
	c        *conn
	id, key  string
	op       string
	args     any // the decoded fsops payload
	ctx      context.Context
	cancel   context.CancelCauseFunc // the clock cancels with errTimedOut, the rest with nil
	state    reqState
	entry    *idemEntry
	admitted time.Time
	// live links a queued or active request into its connection's clock.
	live expiry.Entry[*request]
}

// errTimedOut is the cause with which the connection's clock cancels a request whose
// requestTimeoutMs has passed since admission.
var errTimedOut = context.DeadlineExceeded

// conn is one bound serving connection. Its reader goroutine (serve) decodes frames and
// answers abort and revoke inline; each running invocation has a worker goroutine that, when it
// ends, takes the next queued one, or else waits for the next admitted one. Workers live as
// long as the connection, at most maxConcurrentRequests of them, so that the stacks they grew
// decoding and encoding JSON serve the next requests too (growing a fresh goroutine's stack
// was a sixth of the adapter's work per small request). A short operation that finds nothing
// else running is run by the reader goroutine itself (see inline). Writes are serialized by
// writeMu; a write that the socket does not take at once gets a deadline.
//
// One timer per connection, the clock, enforces requestTimeoutMs rather than one per request
// (see package expiry).
type conn struct {
	s      *Server
	g      *grant
	nc     *net.UnixConn
	br     *bufio.Reader // the reader goroutine's; see inline
	maxOut int
	// head is the start of every successful result frame of this connection, up to its
	// requestId (see resultFrame); nil sends results through tooladapter.EncodeFrame.
	head   []byte
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // workers

	writeMu sync.Mutex
	broken  bool // a write failed; guarded by writeMu

	// ready hands admitted requests to idle workers. Its capacity, maxConcurrentRequests,
	// bounds the workers, so a hand-off never blocks.
	ready chan *request

	direct *trywrite.Writer // writes frames without waiting (see send); guarded by writeMu

	// guarded by g.mu:
	reqs   map[string]*request // queued, active and joined, by request id
	queue  []*request
	active int                     // requests running, or handed to a worker
	idle   int                     // workers without a request; workers = active + idle
	clock  *expiry.Queue[*request] // the queued and active requests
}

// serveConn handles one accepted serving connection from bind to close. Until it binds, the
// connection has a place in the unbound pool, which may evict it to make room; a connection
// that is evicted or sends no bind line within the bind timeout is closed without a byte
// written, like a refused bind.
func (s *Server) serveConn(nc *net.UnixConn, slot *ownersock.Slot) {
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(s.limits.BindTimeout))
	br := bufio.NewReaderSize(nc, maxBindBytes)
	line, err := br.ReadSlice('\n')
	if err == nil && !slot.Hold() {
		err = errEvicted
	}
	if err != nil {
		reason := readReason(err)
		switch {
		case slot.Evicted():
			reason = "evicted"
		case reason == "timeout":
			reason = "bind_timeout"
			s.unbound.Warn(reason, slot.PID(), "connection flood: serving connections closed for not binding in time")
		}
		s.log.Debug("serving connection closed before bind", "reason", reason)
		return
	}
	// Bound or refused, the connection leaves the unbound pool now: a bound one is counted by
	// its grant, one per grant.
	slot.Close()
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	g, reason := s.bind(line)
	var c *conn
	if g != nil {
		c = &conn{s: s, g: g, nc: nc, br: br, maxOut: int(g.limits.MaxResponseBytes), head: resultHead(g.identity),
			ready: make(chan *request, g.limits.MaxConcurrentRequests), reqs: make(map[string]*request)}
		c.clock = expiry.New[*request](time.Duration(g.limits.RequestTimeoutMs)*time.Millisecond, c.tick)
		c.ctx, c.cancel = context.WithCancel(context.Background())
		if c.direct, err = trywrite.New(nc); err != nil {
			reason = "no_descriptor"
			c.cancel()
			g = nil
		} else if reason = g.claim(c); reason != "" {
			c.cancel()
			g = nil
		}
	}
	if g == nil {
		// Nothing is written: a peer that does not hold a live handle learns nothing.
		s.log.Warn("bind refused", "reason", reason)
		return
	}
	defer c.end()
	l := g.limits
	bound, e := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindBound, Identity: g.identity,
		Operations: g.ops, Limits: &l}, c.maxOut)
	if e != nil || !c.send(bound) {
		return
	}
	s.log.Info("grant bound", "grant", g.id, "session", g.identity.SessionID, "generation", g.identity.Generation)
	// A send buffer that holds a whole result frame lets a large one go out in one write
	// instead of one per default-sized buffer (about 200 KiB), each after the daemon drained the
	// last. The kernel caps the size (net.core.wmem_max) and charges only what is queued; a
	// smaller buffer only means more writes, so a failure is ignored.
	_ = nc.SetWriteBuffer(c.maxOut)
	_ = nc.SetReadDeadline(time.Time{})
	rd := ndjson.NewReader(br, int(l.MaxRequestBytes)-1)
	for {
		line, err := rd.Next()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Info("serving connection ended", "grant", g.id, "reason", readReason(err))
			}
			return
		}
		if !c.frame(line) {
			return
		}
	}
}

func readReason(err error) string {
	var fe *ndjson.FrameError
	switch {
	case errors.As(err, &fe):
		return fe.Code
	case errors.Is(err, bufio.ErrBufferFull):
		return "line_too_large"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "eof"
}

// bind checks a first line against the live grants. It returns nil and a content-free reason
// when the line is not a bind of a live grant with exactly its binding, operations and limits;
// the caller then claims the grant (one connection per grant).
func (s *Server) bind(line []byte) (*grant, string) {
	if !utf8.Valid(line) {
		return nil, "invalid_utf8"
	}
	f, e := tooladapter.DecodeFrame(line)
	if e != nil {
		return nil, "invalid_frame"
	}
	if f.Kind != tooladapter.KindBind {
		return nil, "not_bind"
	}
	s.mu.Lock()
	var g *grant
	for _, cand := range s.grants {
		// Every live handle is compared, in constant time each, so the time taken does not
		// depend on which grant (if any) matched.
		if cand.handle.Equal(f.CapabilityHandle) {
			g = cand
		}
	}
	s.mu.Unlock()
	switch {
	case g == nil:
		return nil, "unknown_handle"
	case f.Identity != g.identity:
		return nil, "binding_mismatch"
	case !slices.Equal(f.Operations, g.ops):
		return nil, "operations_mismatch"
	case *f.Limits != g.limits:
		return nil, "limits_mismatch"
	}
	return g, ""
}

// claim makes c the grant's connection, or returns why it cannot be: one connection per grant.
func (g *grant) claim(c *conn) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.revoked:
		return "grant_revoked"
	case g.conn != nil:
		return "grant_already_bound"
	}
	g.conn = c
	return ""
}

// end closes the connection: requests are cancelled, workers waited for, the grant released.
func (c *conn) end() {
	c.cancel()
	_ = c.nc.Close()
	c.wg.Wait()
	c.g.mu.Lock()
	c.clock.Stop()
	if c.g.conn == c {
		c.g.conn = nil
	}
	for _, r := range c.reqs {
		if r.state == reqJoined && r.entry != nil {
			r.entry.waiters = slices.DeleteFunc(r.entry.waiters, func(x *request) bool { return x == r })
		}
	}
	c.g.mu.Unlock()
	c.s.log.Info("grant unbound", "grant", c.g.id)
}

// send writes one frame; it reports false (and closes the connection) when the write fails.
// The socket nearly always takes a whole frame at once, so the first attempt does not wait and
// sets no deadline (a deadline is a timer); what it leaves is written with writeTimeout.
func (c *conn) send(b []byte) bool {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.broken {
		return false
	}
	n, err := c.direct.Write(b)
	if err == nil && n < len(b) {
		_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err = c.nc.Write(b[n:])
		// Cleared again: the next frame's first attempt sets no deadline, and a past one
		// fails it.
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		c.broken = true
		_ = c.nc.Close()
		return false
	}
	return true
}

// frame handles one inbound line after bind. It reports false when the connection must close.
func (c *conn) frame(line []byte) bool {
	f, e := tooladapter.DecodeFrame(line)
	if e != nil {
		if field, _ := e.Details[tooladapter.DetailField].(string); strings.HasPrefix(field, "payload") {
			// A well-formed invoke whose payload the shared parser refuses: answer it with
			// this adapter's own validation error instead of dropping the connection.
			if f := invokeWithoutPayload(line); f != nil && f.Identity == c.g.identity {
				return c.invoke(f)
			}
		}
		c.s.log.Warn("protocol violation; closing", "grant", c.g.id, "code", e.Code, "field", e.Details[tooladapter.DetailField])
		return false
	}
	if f.Identity != c.g.identity {
		c.s.log.Warn("frame identity mismatch; closing", "grant", c.g.id)
		return false
	}
	switch f.Kind {
	case tooladapter.KindInvoke:
		return c.invoke(f)
	case tooladapter.KindAbort:
		c.abort(f)
		return true
	case tooladapter.KindRevoke:
		if b, e := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindRevoked, Identity: c.g.identity}, c.maxOut); e == nil {
			c.send(b)
		}
		c.s.log.Info("revoked by the daemon", "grant", c.g.id)
		return false
	}
	c.s.log.Warn("unexpected frame; closing", "grant", c.g.id, "kind", string(f.Kind))
	return false
}

// invokeWithoutPayload re-reads an invoke line whose payload failed validation: with the
// payload replaced by a valid placeholder it must be a valid invoke frame, and then the original
// payload is put back for the adapter's own checks. It returns nil for anything else.
func invokeWithoutPayload(line []byte) *tooladapter.Frame {
	var m map[string]json.RawMessage
	if ndjson.Decode(line, &m, ndjson.Closed) != nil {
		return nil
	}
	var op string
	if json.Unmarshal(m["operation"], &op) != nil {
		return nil
	}
	placeholder, ok := map[string]string{
		tooladapter.OpList: `{"path":"."}`, tooladapter.OpStat: `{"path":"."}`, tooladapter.OpRead: `{"path":"."}`,
		tooladapter.OpSearch: `{"path":".","query":"x"}`, tooladapter.OpWrite: `{"path":"x","content":""}`,
		tooladapter.OpEdit: `{"path":"x","edits":[{"oldText":"x","newText":""}]}`,
	}[op]
	payload, present := m["payload"]
	if !ok || !present {
		return nil
	}
	m["payload"] = json.RawMessage(placeholder)
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	f, e := tooladapter.DecodeFrame(b)
	if e != nil || f.Kind != tooladapter.KindInvoke {
		return nil
	}
	f.Payload = payload
	return f
}

// decodeArgs decodes an invoke payload into its fsops payload type, strictly.
func decodeArgs(op string, raw json.RawMessage) (any, *protocol.Error) {
	if v := decodeArgsFast(op, raw); v != nil {
		return v, nil
	}
	var v any
	switch op {
	case tooladapter.OpList:
		v = &fsops.ListPayload{}
	case tooladapter.OpStat:
		v = &fsops.StatPayload{}
	case tooladapter.OpRead:
		v = &fsops.ReadPayload{}
	case tooladapter.OpSearch:
		v = &fsops.SearchPayload{}
	case tooladapter.OpWrite:
		v = &fsops.WritePayload{}
	case tooladapter.OpEdit:
		v = &fsops.EditPayload{}
	default:
		return nil, protocol.Errorf(CodeOperationDenied, "operation is not a tool operation")
	}
	if err := ndjson.Decode(raw, v, ndjson.Closed); err != nil {
		e := protocol.Errorf(fsops.CodeInvalidArgument, "payload is not a valid %s payload", op)
		var de *ndjson.DecodeError
		if errors.As(err, &de) && de.Path != "" {
			e = e.With(fsops.DetailField, de.Path)
		}
		return nil, e
	}
	return v, nil
}

// decodeArgsFast decodes the payloads of fs.stat and fs.read, the most frequent calls, in one
// strict walk over a raw mirror instead of a walk and encoding/json's reflective pass. It
// returns nil, and decodeArgs decodes in full, for anything it does not settle: a missing path,
// a member of another type, a string with escapes. What it returns is what the full decoding
// returns (FuzzDecodeArgs).
func decodeArgsFast(op string, raw json.RawMessage) any {
	switch op {
	case tooladapter.OpStat:
		var r struct {
			Path json.RawMessage `json:"path"`
		}
		if ndjson.Decode(raw, &r, ndjson.Closed) != nil {
			return nil
		}
		if path, ok := plainString(r.Path); ok {
			return &fsops.StatPayload{Path: path}
		}
	case tooladapter.OpRead:
		var r struct {
			Path     json.RawMessage `json:"path"`
			Offset   json.RawMessage `json:"offset"`
			MaxBytes json.RawMessage `json:"maxBytes"`
		}
		if ndjson.Decode(raw, &r, ndjson.Closed) != nil {
			return nil
		}
		path, ok := plainString(r.Path)
		offset, okOffset := optionalInt64(r.Offset)
		maxBytes, okMax := optionalInt64(r.MaxBytes)
		if ok && okOffset && okMax {
			return &fsops.ReadPayload{Path: path, Offset: offset, MaxBytes: maxBytes}
		}
	}
	return nil
}

// plainString returns the value of a JSON string without escapes whose text is valid UTF-8.
func plainString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') >= 0 || !utf8.Valid(inner) {
		return "", false
	}
	return string(inner), true
}

// optionalInt64 decodes an optional int64 member as encoding/json does: absent is nil, and a
// number is what strconv.ParseInt makes of it.
func optionalInt64(raw json.RawMessage) (*int64, bool) {
	if raw == nil {
		return nil, true
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return nil, false
	}
	return &n, true
}

// fingerprint identifies the semantic request: the operation and the payload re-encoded from
// its typed form, so that member order and spacing do not matter. The payloads of fs.stat and
// fs.read, the most frequent, are encoded by hand as encoding/json writes them without HTML
// escaping; a fingerprint is only ever compared with another of this process.
func fingerprint(op string, args any) [32]byte { return sha256.Sum256(fingerprintText(op, args)) }

// fingerprintText is the text fingerprint hashes: op, a NUL, and the payload's encoding.
func fingerprintText(op string, args any) []byte {
	b := make([]byte, 0, 128)
	b = append(b, op...)
	b = append(b, 0)
	switch a := args.(type) {
	case *fsops.StatPayload:
		b = ndjson.AppendString(append(b, `{"path":`...), a.Path)
		b = append(b, '}')
	case *fsops.ReadPayload:
		b = ndjson.AppendString(append(b, `{"path":`...), a.Path)
		if a.Offset != nil {
			b = strconv.AppendInt(append(b, `,"offset":`...), *a.Offset, 10)
		}
		if a.MaxBytes != nil {
			b = strconv.AppendInt(append(b, `,"maxBytes":`...), *a.MaxBytes, 10)
		}
		b = append(b, '}')
	default:
		enc, _ := json.Marshal(args) // plain structs of strings, numbers and bools
		b = append(b, enc...)
	}
	return b
}

func errBody(e *protocol.Error) *tooladapter.ErrorBody {
	msg := e.Message
	if msg == "" {
		msg = e.Code
	}
	if utf8.RuneCountInString(msg) > tooladapter.MaxErrorMessageLen {
		msg = string([]rune(msg)[:tooladapter.MaxErrorMessageLen])
	}
	return &tooladapter.ErrorBody{Code: e.Code, Message: msg, Retryable: e.Retryable}
}

// invoke admits one invocation, answers it at once, or joins it to a running one with the same
// idempotency key. It reports false when the connection must close.
func (c *conn) invoke(f *tooladapter.Frame) bool {
	g := c.g
	r := &request{c: c, id: f.RequestID, key: f.IdempotencyKey, op: f.Operation}
	args, perr := decodeArgs(f.Operation, f.Payload)
	if perr == nil && !slices.Contains(g.ops, f.Operation) {
		perr = protocol.Errorf(CodeOperationDenied, "operation is not granted")
	}
	if perr != nil {
		// Malformed requests do not touch the idempotency memory: they have no effect.
		c.g.mu.Lock()
		_, dup := c.reqs[r.id]
		c.g.mu.Unlock()
		if dup {
			return c.violation("duplicate_request_id")
		}
		return c.answer(r, outcome{err: errBody(perr)})
	}
	r.args = args
	fp := fingerprint(f.Operation, args)
	now := time.Now()

	g.mu.Lock()
	if _, dup := c.reqs[r.id]; dup {
		g.mu.Unlock()
		return c.violation("duplicate_request_id")
	}
	if e := g.idem.lookup(r.key, now); e != nil {
		if e.fp != fp {
			g.mu.Unlock()
			return c.answer(r, outcome{err: &tooladapter.ErrorBody{Code: CodeIdempotencyConflict,
				Message: "idempotency key was used with another operation or payload", Retryable: false}})
		}
		if e.done {
			res := e.res
			g.mu.Unlock()
			return c.answer(r, res)
		}
		r.state, r.entry = reqJoined, e
		e.waiters = append(e.waiters, r)
		c.reqs[r.id] = r
		g.mu.Unlock()
		return true
	}
	l := g.limits
	if int64(c.active) >= l.MaxConcurrentRequests && int64(len(c.queue)) >= l.MaxQueuedRequests {
		g.mu.Unlock()
		return c.answer(r, outcome{err: &tooladapter.ErrorBody{Code: CodeQueueCapacity,
			Message: "adapter request queue is full", Retryable: true}})
	}
	e, ok := g.idem.add(r.key, fp, now)
	if !ok {
		g.mu.Unlock()
		return c.answer(r, outcome{err: &tooladapter.ErrorBody{Code: CodeIdempotencyCapacity,
			Message: "too many requests with distinct idempotency keys are running", Retryable: true}})
	}
	e.effectFree = effectFree(r.op)
	r.entry, r.admitted = e, now
	r.ctx, r.cancel = context.WithCancelCause(c.ctx)
	c.clock.Push(&r.live, r, now)
	c.reqs[r.id] = r
	if c.active == 0 && len(c.queue) == 0 && c.br.Buffered() == 0 && inline(r.args) {
		c.active++
		r.state = reqActive
		g.mu.Unlock()
		c.complete(r, c.execute(r), false)
		return true
	}
	if int64(c.active) < l.MaxConcurrentRequests {
		c.active++
		r.state = reqActive
		if c.idle > 0 {
			c.idle--
			c.ready <- r
		} else {
			c.wg.Add(1)
			go c.work(r)
		}
	} else {
		r.state = reqQueued
		c.queue = append(c.queue, r)
	}
	g.mu.Unlock()
	return true
}

// effectFree reports whether op changes nothing: its outcome may be forgotten to bound the
// idempotency memory (see maxRememberedReadBytes).
func effectFree(op string) bool {
	switch op {
	case tooladapter.OpList, tooladapter.OpStat, tooladapter.OpRead, tooladapter.OpSearch:
		return true
	}
	return false
}

// inline reports whether a request with the decoded payload args is short enough for the
// reader goroutine to run it instead of handing it to a worker: a stat (one open and fstat) or
// a read of at most inlineReadBytes. The reader does so only when nothing else of the
// connection runs, waits or has been read ahead (then workers run requests side by side).
// While it runs, the connection reads no frames, so an abort of it arrives after its result;
// the hand-off it saves, a wake-up of another thread, cost about as much as the stat itself.
func inline(args any) bool {
	switch a := args.(type) {
	case *fsops.StatPayload:
		return true
	case *fsops.ReadPayload:
		return a.MaxBytes != nil && *a.MaxBytes <= inlineReadBytes
	}
	return false
}

// inlineReadBytes is the largest fs.read the reader goroutine runs itself (see inline).
const inlineReadBytes = 64 << 10

// tick runs when the clock fires: every request whose requestTimeoutMs has passed since its
// admission is cancelled with errTimedOut (its worker answers request_timeout; a queued one
// when a worker takes it).
func (c *conn) tick() {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	c.clock.Expire(time.Now(), func(r *request) { r.cancel(errTimedOut) })
}

func (c *conn) violation(reason string) bool {
	c.s.log.Warn("protocol violation; closing", "grant", c.g.id, "reason", reason)
	return false
}

// work runs r, then each queued request in turn, then waits for a request handed to it, until
// the connection ends. Requests are handed over only by the reader goroutine, before it ends
// the connection, so a worker that sees the end and then finds ready empty leaves nothing
// behind: every admitted request gets its result (canceled, once the connection ended).
func (c *conn) work(r *request) {
	defer c.wg.Done()
	for {
		for r != nil {
			res := c.execute(r)
			r = c.complete(r, res, true)
		}
		select {
		case r = <-c.ready:
		case <-c.ctx.Done():
			select {
			case r = <-c.ready:
			default:
				return
			}
		}
	}
}

// execute runs one operation under its context and encodes its data.
func (c *conn) execute(r *request) outcome {
	if e := ctxError(r.ctx); e != nil {
		return outcome{err: e}
	}
	if h := dispatchHook.Load(); h != nil {
		(*h)(r.ctx, r.op)
	}
	root := c.g.root
	var (
		v    any
		perr *protocol.Error
	)
	switch a := r.args.(type) {
	case *fsops.ListPayload:
		v, perr = root.List(r.ctx, *a)
	case *fsops.StatPayload:
		v, perr = root.Stat(r.ctx, *a)
	case *fsops.ReadPayload:
		v, perr = root.Read(r.ctx, *a)
	case *fsops.SearchPayload:
		v, perr = root.Search(r.ctx, *a)
	case *fsops.WritePayload:
		v, perr = root.Write(r.ctx, *a)
	case *fsops.EditPayload:
		v, perr = root.Edit(r.ctx, *a)
	}
	if perr != nil {
		if e := ctxError(r.ctx); e != nil && perr.Code == fsops.CodeCanceled {
			return outcome{err: e}
		}
		return outcome{err: errBody(perr)}
	}
	// The result frame is built around the data as it is encoded, so that the data (up to
	// 4 MiB of a read) is not copied again into its frame; frame is nil when the frame must
	// go through tooladapter.EncodeFrame (see resultFrame).
	var hint int
	switch v := v.(type) {
	case *fsops.ReadResult:
		hint = readSize(v)
	case *fsops.StatResult:
		hint = 128
	}
	var buf []byte
	if hint >= pooledFrameBytes {
		buf = ndjson.GetBuffer(len(c.head) + hint + 256)
	}
	frame, fast := c.appendResultHead(buf, r, hint)
	start := len(frame)
	switch v := v.(type) {
	case *fsops.ReadResult:
		frame = appendRead(frame, v)
	case *fsops.StatResult:
		frame = appendStat(frame, v)
	default:
		buf := bytes.NewBuffer(frame)
		enc := json.NewEncoder(buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return outcome{err: &tooladapter.ErrorBody{Code: CodeInternal, Message: "result is not serializable"}}
		}
		frame = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	data := frame[start:len(frame):len(frame)]
	e := checkResult(r.op, v, data)
	if rr, ok := v.(*fsops.ReadResult); ok {
		rr.Release() // encoded and checked: the frame holds the content now
	}
	if e != nil {
		c.s.log.Error("invalid result", "grant", c.g.id, "operation", r.op, "field", e.Details[tooladapter.DetailField])
		return outcome{err: &tooladapter.ErrorBody{Code: CodeInternal, Message: "result failed the protocol's result check"}}
	}
	if buf != nil {
		buf = frame // the frame as it ended up, in the pooled buffer unless it outgrew it
	}
	if !fast {
		return outcome{data: data, buf: buf}
	}
	return outcome{data: data, frame: append(frame, "}\n"...), owner: r, buf: buf}
}

// pooledFrameBytes is the estimated result size from which a result frame (that of a large
// read) is built in a pooled buffer: a fresh buffer of megabytes costs more to allocate and
// clear than the read itself. Such an outcome is not remembered for replay (see idemCache).
const pooledFrameBytes = 1 << 20

// checkResult runs the protocol's result check (tooladapter.ValidateResult) on data, the
// encoding of v, once per outcome, before it is written. A read's content — up to 4 MiB of
// text that decoding would only copy — is checked by its length, the check's one rule for it,
// and the rest of the read by the protocol's check of the same result with empty content.
func checkResult(op string, v any, data []byte) *protocol.Error {
	rr, ok := v.(*fsops.ReadResult)
	if !ok {
		return tooladapter.ValidateResult(op, data)
	}
	if len(rr.Content) > tooladapter.MaxContentBytes {
		return protocol.Errorf(tooladapter.CodeProtocolInvalid, "read content is too long").With(tooladapter.DetailField, "content")
	}
	skeleton := *rr
	skeleton.Content = ""
	var buf [128]byte
	return tooladapter.ValidateResult(op, appendRead(buf[:0], &skeleton))
}

// resultTail is the rest of the template frame resultHead encodes.
const resultTail = `,"requestId":"r","idempotencyKey":"k","operation":"fs.stat","ok":true,"data":{"type":"file","size":0}}` + "\n"

// resultHead returns the part of a successful result frame for id that precedes its requestId,
// cut from tooladapter.EncodeFrame's own encoding of a template result, or nil if that
// encoding does not end as expected.
func resultHead(id tooladapter.Identity) []byte {
	b, e := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindResult, Identity: id, RequestID: "r",
		IdempotencyKey: "k", Operation: tooladapter.OpStat, OK: true, Data: json.RawMessage(`{"type":"file","size":0}`)}, 0)
	if e != nil || !bytes.HasSuffix(b, []byte(resultTail)) {
		return nil
	}
	return b[:len(b)-len(resultTail)]
}

// resultFrame encodes the successful result frame of r around data, byte for byte what
// tooladapter.EncodeFrame writes (TestResultFrameMatchesEncodeFrame), without its second
// decoding and re-encoding of data: see appendResultHead. data is the compact encoding execute
// made and checked. It reports ok false when the frame must go through EncodeFrame instead.
func (c *conn) resultFrame(r *request, data []byte) (b []byte, ok bool) {
	b, ok = c.appendResultHead(nil, r, len(data))
	if !ok {
		return nil, false
	}
	b = append(b, data...)
	return append(b, "}\n"...), true
}

// appendResultHead appends the start of r's successful result frame, up to its data, with room
// for dataSize more bytes and the frame's end ("}\n"): the identity part is c.head; the request
// id and idempotency key passed the protocol's check when the invoke was decoded and are made
// of characters JSON never escapes (checked again here). It reports ok false, and appends
// nothing, when the frame must go through EncodeFrame instead.
func (c *conn) appendResultHead(b []byte, r *request, dataSize int) ([]byte, bool) {
	if c.head == nil || !plainToken(r.id) || !plainToken(r.key) || !plainToken(r.op) {
		return b, false
	}
	const fixed = len(`,"requestId":"","idempotencyKey":"","operation":"","ok":true,"data":}`) + 1
	b = slices.Grow(b, len(c.head)+len(r.id)+len(r.key)+len(r.op)+dataSize+fixed)
	b = append(b, c.head...)
	b = append(b, `,"requestId":"`...)
	b = append(b, r.id...)
	b = append(b, `","idempotencyKey":"`...)
	b = append(b, r.key...)
	b = append(b, `","operation":"`...)
	b = append(b, r.op...)
	b = append(b, `","ok":true,"data":`...)
	return b, true
}

// plainToken reports whether s is non-empty and made of the wire identifier characters
// [A-Za-z0-9._:-], which JSON never escapes.
func plainToken(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return s != ""
}

// ctxError maps a finished request context to its error body: the timeout from admission, or
// an abort (or the connection ending), both retryable.
func ctxError(ctx context.Context) *tooladapter.ErrorBody {
	switch {
	case ctx.Err() == nil:
		return nil
	case context.Cause(ctx) == errTimedOut:
		return &tooladapter.ErrorBody{Code: CodeRequestTimeout, Message: "request timed out", Retryable: true}
	}
	return &tooladapter.ErrorBody{Code: fsops.CodeCanceled, Message: "request was aborted", Retryable: true}
}

// complete ends r with res: its idempotency entry records the outcome (or forgets the key),
// requests that joined it are answered too, and a worker gets the next queued request, if
// any, to run next; else it is counted idle. The reader goroutine (worker false) ran r inline,
// which it does only when nothing else runs or waits, and admits nothing meanwhile, so the
// queue is empty.
func (c *conn) complete(r *request, res outcome, worker bool) *request {
	g := c.g
	g.mu.Lock()
	r.cancel(nil)
	c.clock.Remove(&r.live)
	r.state = reqDone
	delete(c.reqs, r.id)
	kept := res // remembered and replayed without r's own frame
	kept.frame, kept.owner = nil, nil
	waiters := g.idem.finish(r.entry, kept, time.Now())
	for _, w := range waiters {
		w.state = reqDone
		delete(w.c.reqs, w.id)
	}
	var next *request
	if worker && len(c.queue) > 0 {
		next = c.queue[0]
		c.queue = c.queue[1:]
		next.state = reqActive
	} else {
		c.active--
		if worker {
			c.idle++ // this worker waits in work once r is answered
		}
	}
	g.mu.Unlock()
	c.answer(r, res)
	for _, w := range waiters {
		w.c.answer(w, kept)
	}
	if res.buf != nil {
		ndjson.PutBuffer(res.buf) // answered, and not remembered
	}
	return next
}

// answer sends r's result frame. A result that does not fit maxResponseBytes, or fails the
// shared result check, is replaced by an error result. It reports false when the write failed.
func (c *conn) answer(r *request, res outcome) bool {
	f := &tooladapter.Frame{Kind: tooladapter.KindResult, Identity: c.g.identity, RequestID: r.id,
		IdempotencyKey: r.key, Operation: r.op, OK: res.err == nil, Data: res.data, Error: res.err}
	var (
		b  []byte
		e  *protocol.Error
		ok bool
	)
	if res.err == nil {
		if res.owner == r {
			b, ok = res.frame, true
		} else {
			b, ok = c.resultFrame(r, res.data)
		}
		if ok && len(b) > c.maxOut {
			e = protocol.Errorf(tooladapter.CodeRequestTooLarge, "frame of %d bytes exceeds the limit of %d", len(b), c.maxOut)
		}
	}
	if !ok {
		b, e = tooladapter.EncodeFrame(f, c.maxOut)
	}
	if e == nil && tooladapter.ContainsSecret(b, c.g.secret) {
		// Base64url characters are never escaped in JSON, so the raw bytes are the only form
		// the handle can take in a frame this adapter encodes.
		e = protocol.Errorf(CodeHandleInResult, "result contains the capability handle")
	}
	if e != nil {
		f.OK, f.Data = false, nil
		f.Error = &tooladapter.ErrorBody{Code: fsops.CodeTooLarge, Message: "result exceeds maxResponseBytes"}
		switch e.Code {
		case tooladapter.CodeRequestTooLarge:
		case CodeHandleInResult:
			f.Error = &tooladapter.ErrorBody{Code: CodeHandleInResult, Message: "result would contain the capability handle"}
		default:
			f.Error = &tooladapter.ErrorBody{Code: CodeInternal, Message: "result failed the protocol's result check"}
			c.s.log.Error("invalid result", "grant", c.g.id, "operation", r.op, "field", e.Details[tooladapter.DetailField])
		}
		if b, e = tooladapter.EncodeFrame(f, c.maxOut); e != nil {
			c.s.log.Error("error result does not fit maxResponseBytes; closing", "grant", c.g.id)
			_ = c.nc.Close()
			return false
		}
	}
	return c.send(b)
}

// abort cancels the target of an abort frame and acknowledges it: aborted is true when the
// target was queued, running or joined, false when it is unknown or already answered. The
// target still gets exactly one result frame (retryable canceled, unless it finished first).
func (c *conn) abort(f *tooladapter.Frame) {
	g := c.g
	var cancelled []*request
	g.mu.Lock()
	r := c.reqs[f.TargetRequestID]
	aborted := r != nil
	if r != nil {
		switch r.state {
		case reqActive:
			r.cancel(nil) // the worker answers it
		case reqQueued:
			r.cancel(nil)
			c.clock.Remove(&r.live)
			r.state = reqDone
			c.queue = slices.DeleteFunc(c.queue, func(x *request) bool { return x == r })
			delete(c.reqs, r.id)
			cancelled = append(cancelled, r)
			for _, w := range g.idem.finish(r.entry, outcome{err: ctxError(r.ctx)}, time.Now()) {
				w.state = reqDone
				delete(w.c.reqs, w.id)
				cancelled = append(cancelled, w)
			}
		case reqJoined:
			r.entry.waiters = slices.DeleteFunc(r.entry.waiters, func(x *request) bool { return x == r })
			r.state = reqDone
			delete(c.reqs, r.id)
			cancelled = append(cancelled, r)
		}
	}
	g.mu.Unlock()
	b, e := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindAborted, Identity: g.identity,
		RequestID: f.RequestID, TargetRequestID: f.TargetRequestID, Aborted: aborted}, c.maxOut)
	if e == nil {
		c.send(b)
	}
	body := &tooladapter.ErrorBody{Code: fsops.CodeCanceled, Message: "request was aborted", Retryable: true}
	for _, w := range cancelled {
		w.c.answer(w, outcome{err: body})
	}
}
