package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/ownersock"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/trywrite"
)

// conn is one client connection. The reader runs on the goroutine that serves the connection;
// each command runs on its own goroutine, bounded by the in-flight limit, except those that run
// inline and the adapter and room calls (invokeTool, observeCapability, invokeCapability,
// observeRoomCapability, invokeRoomCapability), which are answered by the goroutine that ends
// them; one writer goroutine owns the writes that cannot
// be made at once. Nothing else touches the socket.
type conn struct {
	srv    *Server
	nc     *net.UnixConn
	direct trywrite.Writer // not Ready when the connection has no descriptor (closed)
	log    *slog.Logger
	ctx    context.Context         // cancelled when the connection is failing or the server stops
	cancel context.CancelCauseFunc // errDaemonStopping when the server stops
	// slot is the connection's place in the server's pool: held (never evicted) while a
	// command is in flight or a session is attached. Set before serve starts.
	slot *ownersock.Slot
	// peer is the process at the other end, whose executable the journal reads once. Set
	// with slot.
	peer *gate.Peer
	// lines enforces the first-line and line deadlines on what the reader reads.
	lines *ownersock.LineDeadline

	handlers sync.WaitGroup // command goroutines
	tools    toolCalls      // invokeTool calls in flight, for abortTool
	writer   sync.WaitGroup

	// mu guards the fields below.
	mu       sync.Mutex
	cond     *sync.Cond // signals the writer: queue non-empty, finishing or broken
	inflight map[string]struct{}
	attached map[string]struct{} // sessions attached on this connection; each holds the slot
	queue    [][]byte
	pooled   [][]byte // the pooled buffers of lines in queue: released once they are written
	queued   int      // bytes queued or being written
	finish   bool     // no more input: the writer exits once the queue is empty
	broken   bool     // the connection failed: drop everything
	writing  bool     // someone is writing to the socket: the writer or a direct write in run
	closing  bool     // evicted while an answer was being written: close once the queue is out
	evicted  bool     // the eviction notice was sent or queued
}

func newConn(srv *Server, nc *net.UnixConn, log *slog.Logger) *conn {
	ctx, cancel := context.WithCancelCause(srv.ctx)
	c := &conn{srv: srv, nc: nc, log: log, ctx: ctx, cancel: cancel, inflight: make(map[string]struct{}),
		attached: make(map[string]struct{})}
	c.lines = ownersock.NewLineDeadline(nc, srv.limits.FirstLineTimeout, srv.limits.LineTimeout)
	// This fails only for a closed connection, and then every later write fails too.
	_ = c.direct.Init(nc)
	c.cond = sync.NewCond(&c.mu)
	return c
}

// firstReadBytes is the size of a connection's first read, which holds a handshake line.
const firstReadBytes = 512

// serve reads commands until the peer stops sending, a framing error, an incompatible version
// or server shutdown. Commands still in flight are answered before the connection closes.
func (c *conn) serve() {
	c.writer.Add(1)
	go c.writeLoop()
	defer c.close()

	// The line reader's buffer (64 KiB) is allocated once the first bytes arrived: a flood of
	// connections that never send costs a small read each, not the buffer. An error of this
	// first read is met again by the line reader's.
	first := make([]byte, firstReadBytes)
	n, _ := c.lines.Read(first)
	r := ndjson.NewReader(io.MultiReader(bytes.NewReader(first[:n]), c.lines), c.srv.limits.MaxLineBytes)
	for {
		line, err := r.Next()
		if err != nil {
			var fe *ndjson.FrameError
			var te *ownersock.LineTimeoutError
			switch {
			case errors.As(err, &fe):
				c.refuse(protocol.FrameError(err))
			case errors.As(err, &te):
				c.timedOut(te)
			case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil:
				c.log.Debug("connection read ended", "err", err)
			}
			return
		}
		c.lines.FirstLineDone()
		if !c.handle(line) {
			return
		}
	}
}

// timedOut answers a connection whose first line, or a line it began, did not arrive in time;
// the connection then closes. The answer is in 1.0, as framing errors are: the line that
// would carry a version never came.
func (c *conn) timedOut(te *ownersock.LineTimeoutError) {
	c.srv.count("connectionsTimedOut")
	c.srv.pool.Warn("line_timeout", c.slot.PID(), "connection flood: connections closed for not completing a line in time")
	c.log.Debug("closing connection: line deadline passed", "firstLine", te.FirstLine, "timeout", te.Limit)
	c.sendError(protocol.Version1, "invalid-"+newID(), protocol.Retryable(protocol.CodeLineTimeout, "%s", te.Error()).
		With("timeoutMs", te.Limit.Milliseconds()).With("firstLine", te.FirstLine))
}

// evict closes an idle connection that the pool chose to make room for a new one: it is told
// why (connection_evicted, in 1.0) and closed. It runs on the accept goroutine and does not
// block.
func (c *conn) evict() {
	c.srv.count("connectionsEvicted")
	c.noticeEvicted()
}

// noticeEvicted sends the eviction notice, once, and closes the connection. Both the pool's
// evict and the reader that finds its slot evicted as a line arrives (handle) call it,
// whichever comes first: the reader must not close the connection silently before the pool's
// call, since the notice is what tells a client that none of its unanswered commands ran and
// that it may send them again on a new connection (TestEvictionNoticeRacesALine).
func (c *conn) noticeEvicted() {
	line := c.srv.encodeResponse(&protocol.Response{
		ProtocolVersion: protocol.Version1,
		Kind:            protocol.KindResponse,
		RequestID:       "invalid-" + newID(),
		HostInstanceID:  c.srv.hostID,
		Error: protocol.Retryable(protocol.CodeConnectionEvicted, "idle connection closed to admit another; reconnect to continue").
			With("maxConnections", c.srv.limits.MaxConnections).With("maxConnectionsPerPeer", c.srv.pool.PerPeer()),
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.evicted || c.broken || c.closing {
		return
	}
	c.evicted = true
	// An idle connection usually has nothing queued and nobody writing: one attempt that does
	// not wait, and the descriptor is released at once, whatever a flood's pace.
	if !c.writing && len(c.queue) == 0 {
		if c.direct.Ready() {
			c.direct.Write(line)
		}
		c.failLocked()
		return
	}
	// A command's hold ends as its answer is handed over, so the answer may still be going out:
	// the notice goes after it and the writer closes the connection once both are written. A
	// client that does not read holds the descriptor no longer than the deadline.
	c.enqueueLocked(line)
	c.closing = true
	_ = c.nc.SetWriteDeadline(time.Now().Add(evictWriteTimeout))
}

// evictWriteTimeout bounds how long an evicted connection's last answer and notice may take.
const evictWriteTimeout = time.Second

// handle admits one command line. It returns false when the connection must stop reading.
func (c *conn) handle(line []byte) bool {
	cmd, perr := protocol.ParseCommand(line)
	if perr != nil {
		c.refuse(perr)
		return !perr.Close
	}
	if c.slot.Control() && !protocol.ControlOperation(cmd.Operation) {
		c.refuseControlOnly(cmd)
		return false
	}
	c.mu.Lock()
	if _, dup := c.inflight[cmd.RequestID]; dup {
		c.mu.Unlock()
		c.sendError(cmd.Version.Raw, cmd.RequestID, protocol.Errorf(protocol.CodeDuplicateRequestID,
			"requestId is already in flight on this connection"))
		return true
	}
	cancels := preempts(cmd.Operation)
	if len(c.inflight) >= c.srv.limits.MaxInFlight && !cancels {
		c.mu.Unlock()
		c.sendError(cmd.Version.Raw, cmd.RequestID, protocol.Retryable(protocol.CodeConnectionBusy,
			"connection has %d requests in flight", c.srv.limits.MaxInFlight).With("maxInFlightRequests", c.srv.limits.MaxInFlight))
		return true
	}
	if !c.slot.Hold() {
		// The pool evicted the connection as this line arrived: the line is not run, and
		// the connection closes once the notice is out.
		c.mu.Unlock()
		c.noticeEvicted()
		return false
	}
	c.inflight[cmd.RequestID] = struct{}{}
	c.mu.Unlock()

	if cancels || inline(cmd.Operation) && c.srv.hook == nil {
		c.run(cmd)
		return true
	}
	if c.srv.hook == nil {
		switch cmd.Operation {
		case protocol.OpInvokeTool:
			c.startTool(cmd)
			return true
		case protocol.OpObserveCapability, protocol.OpInvokeCapability:
			c.startCapability(cmd)
			return true
		case protocol.OpObserveRoomCapability, protocol.OpInvokeRoomCapability:
			c.startRoomCall(cmd)
			return true
		}
	}
	c.handlers.Add(1)
	go func() {
		defer c.handlers.Done()
		c.run(cmd)
	}()
	return true
}

// run executes one admitted command and queues its answer.
func (c *conn) run(cmd *protocol.Command) {
	resp := c.srv.dispatch(c.ctx, c, cmd)
	if resp.Error == nil && (cmd.Operation == protocol.OpAttach || cmd.Operation == protocol.OpDetach) {
		c.noteAttachment(cmd.SessionID, cmd.Operation == protocol.OpAttach)
	}
	c.reply(cmd.RequestID, resp)
}

// noteAttachment keeps the slot held while a session is attached, so that the pool never
// evicts a connection that waits for events. It runs before the command's own hold ends. A
// session that closes leaves its attachment counted until the connection ends or detaches: a
// connection is kept too long rather than evicted under a subscriber.
func (c *conn) noteAttachment(sessionID string, attach bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, was := c.attached[sessionID]
	switch {
	case attach && !was:
		c.attached[sessionID] = struct{}{}
		c.slot.Hold()
	case !attach && was:
		delete(c.attached, sessionID)
		c.slot.Unhold()
	}
}

// reply sends the answer to the admitted command requestID.
func (c *conn) reply(requestID string, resp *protocol.Response) {
	line, pooled := c.srv.encodeReply(resp)
	c.mu.Lock()
	// The id is released in the same critical section that queues the answer, so a client
	// that reuses an id after reading its answer is never refused as a duplicate.
	delete(c.inflight, requestID)
	c.slot.Unhold()
	c.sendLocked(line, pooled)
}

// sendLocked sends one line and unlocks c.mu. With nothing queued and nobody writing, the line
// goes out from here: handing it to the writer goroutine would cost a wake-up on every round
// trip. Otherwise it queues behind what is already waiting, so a connection's output keeps the
// order in which it was produced.
func (c *conn) sendLocked(line []byte, pooled bool) {
	if !c.writing && len(c.queue) == 0 && !c.broken && line != nil {
		c.writing = true
		c.mu.Unlock()
		c.writeDirect(line, pooled)
		return
	}
	queued := c.enqueueLocked(line)
	if queued && pooled {
		c.pooled = append(c.pooled, line)
	}
	c.mu.Unlock()
	if !queued && pooled {
		ndjson.PutBuffer(line)
	}
}

// writeDirect makes one non-blocking write attempt from the calling goroutine; c.writing is
// set. Whatever the socket does not take at once (a client that is not reading) is queued, in
// front of anything queued meanwhile, and the writer goroutine finishes it under the outbound
// bound like everything else. A pooled line goes back to the pool once it is written.
func (c *conn) writeDirect(line []byte, pooled bool) {
	n, err := 0, error(net.ErrClosed)
	if c.direct.Ready() {
		n, err = c.direct.Write(line)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writing = false
	if err != nil {
		c.failLocked()
		return
	}
	if rest := line[n:]; len(rest) > 0 {
		c.queue = append([][]byte{rest}, c.queue...)
		c.queued += len(rest)
		if c.queued > c.srv.limits.MaxOutboundBytes {
			c.srv.count("connectionsOverflowed")
			c.failLocked()
			return
		}
		if pooled {
			c.pooled = append(c.pooled, line)
		}
	} else if pooled {
		ndjson.PutBuffer(line)
	}
	if len(c.queue) > 0 {
		c.cond.Signal()
	}
}

// inline reports whether an operation runs on the reader goroutine. These operations only read
// memory and never wait, so running them in place saves two goroutine hand-offs per command
// without delaying the next line; anything that writes the store or waits gets its own
// goroutine so that one slow command never stalls the connection.
func inline(op string) bool {
	switch op {
	case protocol.OpHandshake, protocol.OpStatus, protocol.OpAttach, protocol.OpDetach:
		return true
	}
	return false
}

// preempts reports whether an operation goes ahead of the in-flight bound: it only ends work
// that is already admitted (abortTool ends an invokeTool of this connection, abort a session's
// turn), so it must never wait behind, or be refused because of, the work it cancels, as x/tools'
// jsonrpc2 lets a Preempter handle cancellations before its queue. Such a command runs inline on
// the reader, only cancels a context in memory and never waits (the Preempter's "must not
// block"); even with a dispatch hook it runs there. The preempted path is therefore bounded
// without a bound of its own: at most one such command per connection exists at a time, the
// reader does not read the next line until it is answered, and its answer goes through the
// connection's outbound bound like any other, so a flood of aborts from a client that does not
// read fails its connection rather than queueing.
func preempts(op string) bool {
	return op == protocol.OpAbortTool || op == protocol.OpAbort
}

// refuse answers a command that could not be parsed.
func (c *conn) refuse(pe *protocol.ParseError) {
	rid := pe.RequestID
	if rid == "" {
		rid = "invalid-" + newID()
	}
	c.sendError(pe.Version, rid, pe.Error)
}

func (c *conn) sendError(version, requestID string, e *protocol.Error) {
	line := c.srv.encodeResponse(&protocol.Response{
		ProtocolVersion: version,
		Kind:            protocol.KindResponse,
		RequestID:       requestID,
		HostInstanceID:  c.srv.hostID,
		Error:           e,
	})
	c.mu.Lock()
	c.enqueueLocked(line)
	c.mu.Unlock()
}

// Deliver queues an event line; it implements session.Subscriber.
func (c *conn) Deliver(line []byte) {
	c.mu.Lock()
	c.enqueueLocked(line)
	c.mu.Unlock()
}

// Evict implements session.Subscriber: the connection's attachment made room for another at an
// attachment bound. line (attachmentEvicted) goes out after what is already queued, and the
// writer closes the connection once it is written; the reader stops at once, so that the
// connection admits nothing more. A client that does not read holds the descriptor no longer
// than evictWriteTimeout. It is called with the session Manager's lock held and does not block.
func (c *conn) Evict(line []byte) {
	c.srv.pool.Warn("attachment_evicted", c.slot.PID(), "attachment flood: attachments evicted at an attachment bound")
	c.mu.Lock()
	if !c.broken && !c.closing {
		c.enqueueLocked(line)
		c.closing = true
	}
	c.mu.Unlock()
	c.lines.Stop()
}

// Peer implements session.Subscriber: the connection's peer process.
func (c *conn) Peer() int { return c.slot.PID() }

// refuseControlOnly answers a command that a connection of the control band may not run; the
// connection then closes. A band connection is never promoted to a regular one, so it could
// serve nothing else later, and closing it at once gives its place in the band back to the
// next operator instead of leaving it for an eviction.
func (c *conn) refuseControlOnly(cmd *protocol.Command) {
	c.srv.count("controlOnlyRefused")
	n, _ := c.srv.pool.Control()
	c.sendError(cmd.Version.Raw, cmd.RequestID, protocol.Retryable(protocol.CodeConnectionControlOnly,
		"every regular connection is busy: this connection, one of the %d reserved for control, serves only handshake, status, drain, close and abort", n).
		With("maxConnections", c.srv.limits.MaxConnections).With("controlConnections", n))
}

// enqueueLocked queues one line and reports whether it did. Past the outbound bound the
// connection is failed rather than allowed to grow: a client that does not read cannot make the
// daemon hold unbounded memory.
func (c *conn) enqueueLocked(line []byte) bool {
	if c.broken || c.closing || line == nil {
		return false
	}
	if c.queued+len(line) > c.srv.limits.MaxOutboundBytes {
		c.log.Warn("closing connection: bounded outbound queue exceeded", "queuedBytes", c.queued, "maxBytes", c.srv.limits.MaxOutboundBytes)
		c.srv.count("connectionsOverflowed")
		c.failLocked()
		return false
	}
	c.queue = append(c.queue, line)
	c.queued += len(line)
	c.cond.Signal()
	return true
}

// failLocked drops the connection: queued output is discarded and the socket closed, which
// unblocks the reader and the writer.
func (c *conn) failLocked() {
	if c.broken {
		return
	}
	c.broken = true
	c.queue = nil
	c.pooled = nil // left to the garbage collector: a failed connection is rare
	c.cancel(nil)
	c.nc.Close()
	c.cond.Broadcast()
}

func (c *conn) writeLoop() {
	defer c.writer.Done()
	var spare, spareHeld [][]byte
	for {
		c.mu.Lock()
		for (c.writing || len(c.queue) == 0) && !c.finish && !c.broken {
			c.cond.Wait()
		}
		if c.broken || len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		batch, held := c.queue, c.pooled
		c.queue, c.pooled = spare[:0], spareHeld[:0]
		c.writing = true
		if c.closing {
			// An evicted connection's last lines get evictWriteTimeout from when they are
			// written, not from the eviction: on a loaded host the writer may run later.
			_ = c.nc.SetWriteDeadline(time.Now().Add(evictWriteTimeout))
		}
		c.mu.Unlock()

		n := 0
		for _, b := range batch {
			n += len(b)
		}
		bufs := net.Buffers(batch)
		_, err := bufs.WriteTo(c.nc)

		c.mu.Lock()
		c.writing = false
		c.queued -= n
		if err != nil {
			if !c.broken {
				c.log.Debug("connection write failed", "err", err)
			}
			c.failLocked()
		} else if c.closing && len(c.queue) == 0 {
			c.failLocked() // evicted: its last answer and the notice are out
		}
		c.mu.Unlock()
		// The batch is written, or failed: nothing refers to its pooled buffers any more.
		for _, b := range held {
			ndjson.PutBuffer(b)
		}
		clear(batch)
		clear(held)
		spare, spareHeld = batch, held
	}
}

// stop makes serve return: the reader is unblocked and handlers see a cancelled context.
// errDaemonStopping is why a connection's work is cancelled when the daemon stops: a call
// waiting for the operator is refused saying so, not that its caller stopped waiting
// (TestApprovalWaitEndsWithTheDaemon).
var errDaemonStopping = errors.New("the daemon is stopping")

func (c *conn) stop() {
	c.cancel(errDaemonStopping)
	c.lines.Stop()
}

// close runs when the reader is done: it waits for the commands in flight, lets the writer
// flush their answers, and closes the socket. Once the peer is gone entirely, which nothing
// else tells while the commands in flight only wait (for the operator's decision above all:
// it waited its whole timeout, and could still be approved and run for a caller long gone,
// TestApprovalWaitEndsWithItsConnection), their context is cancelled.
func (c *conn) close() {
	stopWatching := c.watchPeer()
	c.handlers.Wait()
	stopWatching()
	c.srv.sessions.DetachAll(c)
	c.srv.endOwned(c)
	c.mu.Lock()
	c.finish = true
	c.cond.Broadcast()
	c.mu.Unlock()
	c.writer.Wait()
	c.cancel(nil)
	c.nc.Close()
}

// peerPoll is how often a connection whose reader has ended checks, while commands are in
// flight, whether its peer has gone entirely: the read ends as soon when the peer only shut
// down its writing and still reads the answers.
const peerPoll = 250 * time.Millisecond

// watchPeer cancels the connection's context once its peer is gone entirely (at once, in the
// usual case of a process that closed its socket or died), until the returned stop is called;
// stop waits for the watch to end.
func (c *conn) watchPeer() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(peerPoll)
		defer t.Stop()
		for {
			if ownersock.PeerGone(c.nc) {
				c.cancel(nil)
				return
			}
			select {
			case <-done:
				return
			case <-c.ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// deadlineSoon bounds the one write made to a connection that is refused at once.
func deadlineSoon() time.Time { return time.Now().Add(time.Second) }
