package daemon

import (
	"context"
	"encoding/json"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter/toolclient"
)

// toolCall decodes and checks an invokeTool command and returns the adapter connection of its
// session generation, the payload and the idempotency key of the call.
func (s *Server) toolCall(cmd *protocol.Command) (*toolclient.Conn, *protocol.InvokeToolPayload, string, error) {
	p, e := protocol.DecodeInvokeToolPayload(cmd)
	if e != nil {
		return nil, nil, "", e
	}
	if e := p.Validate(); e != nil {
		return nil, nil, "", e
	}
	tc, err := s.sessions.Tool(cmd.SessionID, cmd.Generation)
	if err != nil {
		return nil, nil, "", err
	}
	return tc, p, toolclient.IdempotencyKey(p.Operation, p.ToolCallID), nil
}

// invokeTool runs invokeTool and waits for the adapter's answer.
func (s *Server) invokeTool(ctx context.Context, cmd *protocol.Command) (any, error) {
	tc, p, key, err := s.toolCall(cmd)
	if err != nil {
		return nil, err
	}
	data, e := tc.Invoke(ctx, p.Operation, key, p.Arguments)
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
	tc, p, key, err := c.srv.toolCall(cmd)
	if err != nil {
		c.endTool(cmd, nil, err)
		return
	}
	tc.Start(c.ctx, p.Operation, key, p.Arguments, func(data json.RawMessage, e *protocol.Error) {
		if e != nil {
			c.endTool(cmd, nil, e)
			return
		}
		// The connection returns data that DecodeFrame walked and compacted. It is a slice
		// of the connection's read buffer, valid only until this function returns
		// (toolclient.Conn.Start): endTool copies it into the answer before that.
		c.endTool(cmd, &protocol.CompactToolResult{ToolResult: protocol.ToolResult{ToolCallID: p.ToolCallID, Operation: p.Operation, Data: data}}, nil)
	})
}

func (c *conn) endTool(cmd *protocol.Command, data any, err error) {
	defer c.handlers.Done()
	c.reply(cmd.RequestID, c.srv.respond(cmd, data, err))
}
