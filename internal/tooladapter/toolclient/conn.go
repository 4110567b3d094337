package toolclient

// This file owns the connection: its state, Connect and the bind handshake, and Close.

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/expiry"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/internal/trywrite"
)

// maxRevokeWait bounds how long Close waits for the best-effort revoke frame to be written; the
// descriptor's requestTimeoutMs lowers it further. Closing the socket is the final revocation,
// so a slow adapter must not hold up a session close for longer than this.
const maxRevokeWait = 100 * time.Millisecond

// dial connects to the adapter socket. Tests replace it to hold a connect open.
var dial = func(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}

// Options configure Connect.
type Options struct {
	// Root is the canonical session cwd (see tooladapter.CanonicalRoot). When set, Invoke lstat-walks every
	// payload path beneath it before admission (see tooladapter.ResolveUnder); when empty, only the path
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
	d       *tooladapter.Descriptor
	id      tooladapter.Identity
	invokes *tooladapter.InvokeEncoder
	opts    Options
	log     *slog.Logger
	nc      net.Conn
	direct  trywrite.Writer // for non-blocking direct writes; not Ready when nc has no descriptor
	rd      *ndjson.Reader
	screen  tooladapter.Screen // searches every inbound line for the handle
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
func Connect(ctx context.Context, d *tooladapter.Descriptor, opts Options) (*Conn, *protocol.Error) {
	if e := tooladapter.CheckEndpoint(d.Endpoint.Path); e != nil {
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
			return nil, protocol.Retryable(tooladapter.CodeConnectionFailed, "connecting to the tool adapter was cancelled")
		case dctx.Err() != nil || isTimeout(err):
			return nil, protocol.Retryable(tooladapter.CodeConnectTimeout, "tool adapter did not accept the connection within %d ms", d.Limits.RequestTimeoutMs)
		}
		// The dial error names the socket path; it is deliberately dropped.
		return nil, protocol.Retryable(tooladapter.CodeConnectionFailed, "cannot connect to the tool adapter")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Conn{
		d: d, id: d.Identity(), invokes: tooladapter.NewInvokeEncoder(d.Identity()), opts: opts, log: log, nc: nc,
		rd:          ndjson.NewReader(nc, int(d.Limits.MaxResponseBytes)-1),
		screen:      d.Binding.CapabilityHandle.Screen(),
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
	frame, fe := tooladapter.EncodeFrame(c.d.BindFrame(), 0)
	if fe != nil {
		return protocol.Errorf(tooladapter.CodeRequestInvalid, "bind frame is not serializable")
	}
	timedOut := func() *protocol.Error {
		if ctx.Err() != nil {
			return protocol.Retryable(tooladapter.CodeConnectionFailed, "binding the tool adapter was cancelled")
		}
		return protocol.Retryable(tooladapter.CodeBindTimeout, "tool adapter did not answer bind within %d ms", c.d.Limits.RequestTimeoutMs)
	}
	if _, err := c.nc.Write(frame); err != nil {
		if isTimeout(err) {
			return timedOut()
		}
		return protocol.Retryable(tooladapter.CodeConnectionFailed, "cannot write to the tool adapter")
	}
	line, err := c.rd.Next()
	if err != nil {
		if isTimeout(err) {
			return timedOut()
		}
		e := c.readError(err)
		if e.Code == tooladapter.CodeConnectionClosed {
			// An adapter refuses a bind by closing without a byte (airlock-fs does), so this is
			// what an open with a revoked or mismatched grant sees: say so.
			e.Message = "tool adapter closed the connection without answering bind: it refused the binding (is the grant live, and minted for this host instance, session, generation, operations and limits?) or stopped"
		}
		return e
	}
	f, e := c.inbound(line)
	if e != nil {
		return e
	}
	if f.Kind != tooladapter.KindBound {
		return protocol.Errorf(tooladapter.CodeProtocolInvalid, "tool adapter sent %s before bound", f.Kind)
	}
	if !slices.Equal(f.Operations, c.d.Operations) {
		return fieldError(tooladapter.CodeContractMismatch, "operations", "bound does not echo the granted operations in order")
	}
	if *f.Limits != c.d.Limits {
		return fieldError(tooladapter.CodeContractMismatch, "limits", "bound does not echo the descriptor limits")
	}
	_ = c.nc.SetDeadline(time.Time{})
	return nil
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
			c.failPending(tooladapter.CodeSessionClosed, "tool adapter session is closed", false)
			c.clock.Stop() // no call is live any more
			if frame, fe := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindRevoke, Identity: c.id}, 0); fe == nil {
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
func (c *Conn) Summary() tooladapter.Summary { return c.d.Summary() }

// Incarnation returns the host, session and generation this connection is bound to.
func (c *Conn) Incarnation() tooladapter.Binding { return c.d.Incarnation() }
