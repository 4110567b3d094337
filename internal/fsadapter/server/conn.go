package server

// This file owns the serving connection: the result codes and timeouts it adds, its state and
// that of a request, and its life from accept to close: the bind line read under the unbound
// pool's rules, the check of a bind against the live grants and the claim of one, the read
// loop, and end. read.go owns what the reader does with each line after bind, execute.go a
// request's run and end, and write.go the frames that go to the daemon.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/expiry"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/ownersock"
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
	// CodeIdempotencyInFlight: the idempotency key is still running under another grant of
	// the same session generation (retryable).
	CodeIdempotencyInFlight = "idempotency_in_flight"
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
		// Nothing is written: a peer that does not hold a live handle learns nothing. The
		// warning is rate-limited like the pool's own, so a peer that keeps presenting a dead
		// handle cannot flood the log.
		s.unbound.Warn("bind_refused", slot.PID(), "bind refused: "+reason)
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
			c.g.idem.leave(r)
		}
	}
	c.g.mu.Unlock()
	c.s.log.Info("grant unbound", "grant", c.g.id)
}
