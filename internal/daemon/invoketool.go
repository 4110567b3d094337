package daemon

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter/toolclient"
)

// toolCall decodes and checks an invokeTool command and returns the adapter connection of its
// session generation, the payload and the call at the gate (c is nil for a command that did
// not arrive on a connection). A command that does not decode is no call; one whose session
// generation has no tools, or whose grant airlockd's airlock-fs took with it when it exited
// (fs_adapter_unavailable, retryable, until managedFS.restore grants it again), is a call the
// door refused, reported to the gate's hooks.
func (s *Server) toolCall(ctx context.Context, c *conn, cmd *protocol.Command) (*toolclient.Conn, *protocol.InvokeToolPayload, *gated, error) {
	p, e := protocol.DecodeInvokeToolPayload(cmd)
	if e != nil {
		return nil, nil, nil, e
	}
	if e := p.Validate(); e != nil {
		return nil, nil, nil, e
	}
	x := s.gateTool(ctx, c, cmd, p, toolclient.IdempotencyKey(p.Operation, p.ToolCallID))
	tc, rules, err := s.sessions.GatedTool(cmd.SessionID, cmd.Generation)
	if err != nil {
		x.done(protocol.AsError(err).Code)
		return nil, nil, nil, err
	}
	if f := tc.Err(); f != nil && s.fsys.awaiting(cmd.SessionID, cmd.Generation, f) {
		// Its grant went with airlockd's airlock-fs, and comes back with the next one
		// (managedFS.restore): call again, rather than adapter_session_closed's "for good".
		// awaiting may hold this (reader) goroutine up to managedExitWait, once per failed
		// connection, to see whether the child exits.
		e := awaitingError()
		x.done(e.Code)
		return nil, nil, nil, e
	}
	x.rules = rules
	return tc, p, x, nil
}

// invokeTool runs invokeTool and waits for the adapter's answer. The adapter connection runs
// the grant and path checks, then the gate (gated.check), then sends.
func (s *Server) invokeTool(ctx context.Context, c *conn, cmd *protocol.Command) (any, error) {
	tc, p, x, err := s.toolCall(ctx, c, cmd)
	if err != nil {
		return nil, err
	}
	data, e := tc.InvokeChecked(ctx, p.Operation, x.call.Key, p.Arguments, x.check)
	x.done(codeOf(e))
	if e != nil {
		return nil, e
	}
	// The connection returns data that DecodeFrame walked and compacted.
	return &protocol.CompactToolResult{ToolResult: protocol.ToolResult{ToolCallID: p.ToolCallID, Operation: p.Operation, Data: data}}, nil
}

// startTool runs an admitted invokeTool command without a goroutine of its own. The reader
// goroutine decodes it, checks it and hands it to the adapter connection, which writes the
// invoke frame at once when it can and never waits for the socket; the answer is sent by
// whichever goroutine ends the call, normally the adapter connection's reader as soon as the
// result is decoded. A round trip then costs no goroutine hand-off in the daemon, and a slow
// adapter still never stalls this connection: the call waits without holding a goroutine.
//
// The handlers group counts the call until its answer is queued, so that close answers it
// first, as it does for commands that run on their own goroutine.
func (c *conn) startTool(cmd *protocol.Command) {
	c.handlers.Add(1)
	ctx, done := c.tools.track(c.ctx, cmd.RequestID)
	tc, p, x, err := c.srv.toolCall(ctx, c, cmd)
	if err != nil {
		done()
		c.endTool(cmd, nil, err)
		return
	}
	if x.mayAsk() {
		// The gate may wait for the operator (approval.Queue): never on the reader. The
		// goroutine ends once the call is admitted or refused; the handlers group counts it
		// as it counts the call.
		c.handlers.Add(1)
		go func() {
			defer c.handlers.Done()
			c.startChecked(ctx, cmd, tc, p, x, done)
		}()
		return
	}
	c.startChecked(ctx, cmd, tc, p, x, done)
}

// startChecked hands an invokeTool call to its adapter connection behind the gate; done
// ends its tracking.
func (c *conn) startChecked(ctx context.Context, cmd *protocol.Command, tc *toolclient.Conn, p *protocol.InvokeToolPayload, x *gated, done func()) {
	tc.StartChecked(ctx, p.Operation, x.call.Key, p.Arguments, x.check, func(data json.RawMessage, e *protocol.Error) {
		done()
		if c.srv.offReader(x, data, func(data json.RawMessage) { c.finishTool(cmd, p, x, data, e) }) {
			return
		}
		c.finishTool(cmd, p, x, data, e)
	})
}

// finishTool records an ended invokeTool and answers it. data is valid only until
// it returns (toolclient.Conn.Start), unless offReader copied it.
func (c *conn) finishTool(cmd *protocol.Command, p *protocol.InvokeToolPayload, x *gated, data json.RawMessage, e *protocol.Error) {
	x.done(codeOf(e))
	if e != nil {
		c.endTool(cmd, nil, e)
		return
	}
	// The connection returns data that DecodeFrame walked and compacted: endTool copies it
	// into the answer.
	c.endTool(cmd, &protocol.CompactToolResult{ToolResult: protocol.ToolResult{ToolCallID: p.ToolCallID, Operation: p.Operation, Data: data}}, nil)
}

func (c *conn) endTool(cmd *protocol.Command, data any, err error) {
	defer c.handlers.Done()
	c.reply(cmd.RequestID, c.srv.respond(cmd, data, err))
}

// toolCalls are a connection's invokeTool calls in flight, each with the cancel function of its
// adapter request, so that abortTool can end exactly one of them. Request ids are unique among
// a connection's commands in flight, and a call leaves the table before its answer releases its
// id, so an id names at most one call here.
type toolCalls struct {
	mu    sync.Mutex
	calls map[string]context.CancelFunc
}

// track registers the call requestID and returns its context, a child of parent, and the
// function to call once the call has ended (before its answer is queued).
func (t *toolCalls) track(parent context.Context, requestID string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	t.mu.Lock()
	if t.calls == nil {
		t.calls = make(map[string]context.CancelFunc)
	}
	t.calls[requestID] = cancel
	t.mu.Unlock()
	return ctx, func() {
		t.mu.Lock()
		delete(t.calls, requestID)
		t.mu.Unlock()
		cancel()
	}
}

// abort cancels the call requestID and reports whether it was in flight. The call is answered
// adapter_request_aborted by the adapter connection, which sends the adapter its abort frame.
func (t *toolCalls) abort(requestID string) bool {
	t.mu.Lock()
	cancel := t.calls[requestID]
	delete(t.calls, requestID)
	t.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	return true
}

// abortTool runs abortTool: it aborts an invokeTool in flight on the same connection.
func (c *conn) abortTool(cmd *protocol.Command) (any, error) {
	var p protocol.AbortToolPayload
	if e := decodeValid(cmd, &p); e != nil {
		return nil, e
	}
	return &protocol.AbortResult{Aborted: c.tools.abort(p.RequestID)}, nil
}
