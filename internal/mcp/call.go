package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/hint"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// MetaIdempotencyKey is the _meta member of a tools/call by which a client names the call
// itself: calls of the same tool with the same key are one call, across MCP sessions and
// bridge processes, and the same key with other arguments is idempotency_conflict (airlock-fs's
// for fs tools, the bridge's for capability actions; see keyTable).
const MetaIdempotencyKey = "io.airlock/idempotencyKey"

// maxExplicitKeyLen bounds MetaIdempotencyKey's value, in bytes.
const maxExplicitKeyLen = 256

// handler returns the SDK handler of one tool.
func (b *Bridge) handler(s toolSpec) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		args, err := objectArguments(req.Params.Arguments)
		if err != nil {
			return nil, err
		}
		explicit, err := explicitKey(req.Params.Meta)
		if err != nil {
			return nil, err
		}
		sessionID, clientName := "", clientNameOf(req.ClientInfo())
		if req.Session != nil {
			sessionID = req.Session.ID()
		}
		switch s.kind {
		case kindFS:
			if explicit == "" && !writes(s.operation) {
				// A read has no effect a retry could repeat: each call gets a key of its own,
				// so that identical reads in flight together are not one call to the daemon,
				// which refuses a key already in flight.
				return b.callFS(ctx, req, s, "", clientName, args)
			}
			return b.callFS(ctx, req, s, callFingerprint(sessionID, s.tool.Name, args, explicit), clientName, args)
		case kindComposed:
			return b.callComposed(ctx, req, s, clientName, args)
		case kindPropose, kindProposals:
			return b.callProposal(ctx, s, clientName, args)
		case kindObserve:
			if e := noArguments(args); e != nil {
				return errorResult(e), nil
			}
			return b.callCapability(ctx, b.gated(client.Command{Operation: protocol.OpObserveCapability,
				Payload: protocol.CapabilityPayload{CapabilityID: s.capabilityID}}, clientName))
		case kindRoomObserve:
			if e := noArguments(args); e != nil {
				return errorResult(e), nil
			}
			return b.callCapability(ctx, client.Command{Operation: protocol.OpObserveRoomCapability, Client: clientName,
				Payload: protocol.RoomCallPayload{Room: s.room, Provider: s.provider, CapabilityID: s.capabilityID}})
		case kindRoomAction:
			if e := argsTooLarge(args, protocol.MaxRoomArgsBytes); e != nil {
				return errorResult(e), nil
			}
			return b.callAction(ctx, client.Command{Operation: protocol.OpInvokeRoomCapability, Client: clientName,
				Payload: protocol.RoomCallPayload{Room: s.room, Provider: s.provider, CapabilityID: s.capabilityID, Action: s.action, Args: args}},
				callFingerprint(sessionID, s.tool.Name, args, explicit), args)
		default:
			if e := argsTooLarge(args, protocol.MaxCapabilityArgsBytes); e != nil {
				return errorResult(e), nil
			}
			return b.callAction(ctx, b.gated(client.Command{Operation: protocol.OpInvokeCapability,
				Payload: protocol.InvokeCapabilityPayload{CapabilityID: s.capabilityID, Action: s.action, Args: args}}, clientName),
				callFingerprint(sessionID, s.tool.Name, args, explicit), args)
		}
	}
}

// noArguments refuses the arguments of an observe tool, whose input schema is the empty
// closed object, as the daemon refuses an action's undeclared argument: invalid_args, naming
// what the tool takes and not quoting what the call sent (capadapter.ValidateArgs). An
// observe's command has no arguments to send, so without this the call ran with them unread.
func noArguments(args json.RawMessage) *protocol.Error {
	if string(args) == "{}" {
		return nil
	}
	return protocol.Errorf(capadapter.CodeInvalidArgs, "an argument is not declared by observe, which takes no arguments")
}

// argsTooLarge refuses an action's arguments over bound bytes as sent (the adapter protocol's
// bound for a local action, the room edge's for a room one) with too_large, as the supervisor
// and the adapter protocol name it. The daemon's envelope check refuses them invalid_field,
// the code of a request that airlock's own client got wrong, whose hint tells the model to
// send the same arguments again.
func argsTooLarge(args json.RawMessage, bound int) *protocol.Error {
	if len(args) <= bound {
		return nil
	}
	return protocol.Errorf(capadapter.CodeTooLarge, "the arguments are %d bytes as JSON, over the %d an action takes", len(args), bound)
}

// gated fills a local capability call's actor members: the bridge's session, so that the
// daemon's gate applies the session's policy, and the MCP client's name.
func (b *Bridge) gated(cmd client.Command, clientName string) client.Command {
	if b.cfg.SessionID != "" {
		cmd.SessionID, cmd.Generation = b.cfg.SessionID, &b.cfg.Generation
	}
	cmd.Client = clientName
	return cmd
}

// unnamedClient is the envelope's client member for an MCP client that gave no name the
// member takes (none at all, which the 2026-07-28 revision allows; an empty one; one too long
// or with control characters). The member is what marks a call as the bridge's (door mcp, as
// the policy and the audit journal see it): without it, such a client's calls counted as the
// operator's own (door socket).
const unnamedClient = "(unnamed)"

// clientNameOf is the name an MCP client gave for itself, bounded to what the envelope's
// client member takes (unnamedClient otherwise): info is the request's own clientInfo
// (each request of the stateless revision may name its client in _meta), else the one given
// at initialize, as sdk.ServerRequest.ClientInfo returns it.
func clientNameOf(info *sdk.Implementation) string {
	if info == nil {
		return unnamedClient
	}
	name := info.Name
	if name == "" || utf8.RuneCountInString(name) > protocol.MaxClientNameLen || strings.ContainsFunc(name, unicode.IsControl) {
		return unnamedClient
	}
	return name
}

// objectArguments returns a call's arguments as compact JSON: absent arguments are {}; anything
// but one JSON object is the only malformed request a tool answers with a protocol error
// (invalid params), since no tool result could name its field.
func objectArguments(raw json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return json.RawMessage(`{}`), nil
	}
	if t[0] != '{' || ndjson.Valid(t) != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tool arguments must be a JSON object without duplicate keys"}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, t); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tool arguments must be a JSON object"}
	}
	return buf.Bytes(), nil
}

// explicitKey reads MetaIdempotencyKey: absent, or a string of 1 to maxExplicitKeyLen bytes.
func explicitKey(meta sdk.Meta) (string, error) {
	v, ok := meta[MetaIdempotencyKey]
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	if !ok || s == "" || len(s) > maxExplicitKeyLen {
		return "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: fmt.Sprintf("_meta[%q] must be a string of 1 to %d bytes", MetaIdempotencyKey, maxExplicitKeyLen)}
	}
	return s, nil
}

// writes reports whether an fs operation changes the tree.
func writes(op string) bool { return op == tooladapter.OpWrite || op == tooladapter.OpEdit }

// callFS runs one fs tool call through invokeTool. With a fingerprint fp, the call is tracked
// in the key table from before it is sent until its outcome is known; a cancelled call is
// aborted in the daemon (abortTool), which aborts the adapter request, and its key stays open
// for a retry. Without one (a read), the call gets a fresh key.
func (b *Bridge) callFS(ctx context.Context, req *sdk.CallToolRequest, s toolSpec, fp, clientName string, args json.RawMessage) (*sdk.CallToolResult, error) {
	progress := newProgress(ctx, req, s.operation == tooladapter.OpSearch)
	progress.send(0, "searching")
	data, failed, err := b.invokeKeyed(ctx, s.operation, fp, clientName, args)
	switch {
	case err != nil:
		return nil, err
	case failed != nil:
		return failed, nil
	}
	if s.operation == tooladapter.OpRead {
		// The file's text is both the structured content and the text rendering: it is
		// decoded once. Whether the SDK gets the structured content as this Go value or
		// as the raw result makes no measurable difference to its encoding (make
		// bench-mcp's analysis, docs/mcp.md); it costs what the text's length costs.
		var r readResult
		if err := json.Unmarshal(data, &r); err != nil {
			return errUnreadable(), nil
		}
		text := r.Content
		if !r.EOF {
			text += readNote(r.BytesRead)
		}
		return &sdk.CallToolResult{StructuredContent: r, Content: []sdk.Content{&sdk.TextContent{Text: text}}}, nil
	}
	text, rendered := "", false
	switch s.operation {
	case tooladapter.OpList:
		text, rendered = listText(data)
	case tooladapter.OpSearch:
		var n int
		var truncated bool
		if text, n, truncated, rendered = searchText(data); rendered {
			msg := strconv.Itoa(n) + " matches"
			if truncated {
				msg += ", truncated"
			}
			progress.send(1, msg)
		}
	}
	if !rendered {
		text = string(data)
	}
	return &sdk.CallToolResult{StructuredContent: data, Content: []sdk.Content{&sdk.TextContent{Text: text}}}, nil
}

// invokeKeyed is invokeFS under the key of the call fingerprint fp, tracked in the key table
// from before the call is sent until its outcome is known, and released before the answer is
// written, so that the same call sent again once its answer is read is a new call; or under a
// fresh key when fp is "". Both doors of a tools/call use it.
func (b *Bridge) invokeKeyed(ctx context.Context, op, fp, clientName string, args json.RawMessage) (json.RawMessage, *sdk.CallToolResult, error) {
	if fp == "" {
		data, failed, _, err := b.invokeFS(ctx, op, b.keys.fresh(), clientName, args)
		return data, failed, err
	}
	e := b.keys.acquire(fp)
	data, failed, definite, err := b.invokeFS(ctx, op, e.key, clientName, args)
	b.keys.release(fp, e, definite)
	return data, failed, err
}

// invokeFS sends one fs operation to the daemon through invokeTool, with the
// idempotency key toolCallID, and returns the adapter's result, or the call's error result
// and whether its outcome is definite, or the context's error. Both doors of a tools/call use
// it: the SDK's handler (callFS) and the stdio fast path (fastPath).
func (b *Bridge) invokeFS(ctx context.Context, op, toolCallID, clientName string, args json.RawMessage) (data json.RawMessage, failed *sdk.CallToolResult, definite bool, err error) {
	data, perr, definite, err := b.invokeTool(ctx, op, toolCallID, clientName, args)
	if perr != nil {
		return nil, errorResult(perr), definite, nil
	}
	return data, nil, definite, err
}

// invokeTool sends op as invokeTool, with the idempotency key toolCallID, and returns the
// adapter's result (a compact JSON object, checked by the daemon against the operation's
// result schema); or the daemon's refusal (or why it could not be reached), and whether the
// call's outcome is definite; or the context's error, once the call was aborted in the daemon
// (abortTool, which aborts the adapter request). fs tools (invokeFS) and composed tools
// (composedCall.invoke) call it.
func (b *Bridge) invokeTool(ctx context.Context, op, toolCallID, clientName string, args json.RawMessage) (data json.RawMessage, perr *protocol.Error, definite bool, err error) {
	l, err := b.lease(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, false, ctx.Err()
		}
		return nil, protocol.AsError(err), false, nil
	}
	defer l.release()
	rid := b.requestID()
	resp, err := l.send(ctx, client.Command{
		Operation: protocol.OpInvokeTool, SessionID: b.cfg.SessionID, Generation: &b.cfg.Generation, RequestID: rid,
		Client:  clientName,
		Payload: invokeToolPayload(toolCallID, op, args),
	})
	if err != nil {
		if ctx.Err() != nil {
			b.abort(l, rid)
			return nil, nil, false, ctx.Err()
		}
		// A call too long to send is definite (it never left); one whose connection ended
		// may have run.
		pe := protocol.AsError(err)
		return nil, pe, pe.Code == tooladapter.CodeRequestTooLarge, nil
	}
	if e := resp.Err(); e != nil {
		pe := protocol.AsError(e)
		return nil, pe, pe.Details["indeterminate"] != true, nil
	}
	// invokeTool's data is a protocol.ToolResult; its own data, the adapter's result, is
	// found by one walk of the daemon's answer (a slice of it) instead of encoding/json's
	// syntax check and skip, two slower passes over up to megabytes. The daemon sends it
	// checked against the operation's result schema and compact.
	var res struct {
		Data json.RawMessage `json:"data"`
	}
	if err := ndjson.DecodeAliased(resp.Data, &res, ndjson.Open); err != nil || len(res.Data) == 0 || res.Data[0] != '{' {
		return nil, unreadableResult(), true, nil
	}
	return res.Data, nil, true, nil
}

// invokeToolPayload is the payload of invokeTool, protocol.InvokeToolPayload's members
// written by hand around args, a JSON object (the client compacts the payload it is given).
func invokeToolPayload(toolCallID, op string, args json.RawMessage) json.RawMessage {
	p := make([]byte, 0, 64+len(toolCallID)+len(op)+len(args))
	p = append(p, `{"toolCallId":`...)
	p = ndjson.AppendString(p, toolCallID)
	p = append(p, `,"operation":`...)
	p = ndjson.AppendString(p, op)
	p = append(p, `,"arguments":`...)
	p = append(p, args...)
	return append(p, '}')
}

func errUnreadable() *sdk.CallToolResult { return errorResult(unreadableResult()) }

func unreadableResult() *protocol.Error {
	return &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon's tool result is not readable"}
}

// readResult is fs.read's result, as its output schema has it.
type readResult struct {
	Content   string `json:"content"`
	BytesRead int64  `json:"bytesRead"`
	EOF       bool   `json:"eof"`
}

// abort sends abortTool for the daemon request rid on the connection that carries it (the
// daemon aborts only calls of the same connection), on a detached context: the call's own
// context is done. The daemon answers the aborted invokeTool adapter_request_aborted, which
// nobody reads any more.
func (b *Bridge) abort(l *lease, rid string) {
	ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
	defer cancel()
	resp, err := l.send(ctx, client.Command{Operation: protocol.OpAbortTool, Payload: protocol.AbortToolPayload{RequestID: rid}})
	if err == nil {
		err = resp.Err()
	}
	if err != nil {
		b.log.Debug("abortTool failed", "requestId", rid, "err", err)
	}
}

// callCapability runs an observe (of a local capability or of one published into the room)
// and renders its result.
func (b *Bridge) callCapability(ctx context.Context, cmd client.Command) (*sdk.CallToolResult, error) {
	resp, err := b.send(ctx, cmd)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return errorResult(protocol.AsError(err)), nil
	}
	return capabilityResult(resp), nil
}

func capabilityResult(resp *client.Response) *sdk.CallToolResult {
	if perr := resp.Err(); perr != nil {
		return errorResult(protocol.AsError(perr))
	}
	var res struct {
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(resp.Data, &res) != nil || len(res.Result) == 0 || res.Result[0] != '{' {
		return errorResult(&protocol.Error{Code: protocol.CodeInternal, Message: "the daemon's capability result is not readable"})
	}
	return &sdk.CallToolResult{StructuredContent: res.Result, Content: []sdk.Content{&sdk.TextContent{Text: string(res.Result)}}}
}

// callAction runs one capability action, cmd, with arguments args: invokeCapability, or
// invokeRoomCapability for an action published into the room. Neither has an idempotency key,
// so the bridge itself makes a retry safe: the action runs on a detached context owned by the
// Bridge, at most once per key fp, and a retry with an open key (a call whose client gave up,
// one still running, or a client-named call whose outcome is remembered) gets that run's
// outcome instead of running it again. A client-named key already used with other arguments
// is idempotency_conflict, and nothing runs.
func (b *Bridge) callAction(ctx context.Context, cmd client.Command, fp string, args json.RawMessage) (*sdk.CallToolResult, error) {
	e, conflict := b.keys.acquireAction(fp, canonicalJSON(args))
	if conflict {
		return errorResult(&protocol.Error{Code: protocol.CodeIdempotencyConflict,
			Message: "idempotency key was used with other arguments of this tool"}), nil
	}
	first := b.keys.startRun(e)
	if first {
		b.mu.Lock()
		closed := b.closed
		if !closed {
			b.wg.Add(1)
		}
		b.mu.Unlock()
		if closed {
			b.keys.finishRun(fp, e, errorResult(&protocol.Error{Code: CodeDaemonUnreachable, Message: errClosed.Error(), Retryable: true}))
		} else {
			go func() {
				defer b.wg.Done()
				// The daemon bounds an action by the adapter's deadline; this bounds a wedged
				// daemon.
				rctx, cancel := context.WithTimeout(context.Background(), actionTimeout)
				defer cancel()
				resp, err := b.send(rctx, cmd)
				var res *sdk.CallToolResult
				if err != nil {
					res = errorResult(protocol.AsError(err))
					if rctx.Err() != nil {
						res = errorResult(&protocol.Error{Code: CodeDaemonUnreachable, Message: "airlockd did not answer the action in time", Retryable: true})
					}
				} else {
					res = capabilityResult(resp)
				}
				b.keys.finishRun(fp, e, res)
			}()
		}
	}
	select {
	case <-e.done:
		b.keys.release(fp, e, true)
		return e.res, nil
	case <-ctx.Done():
		b.keys.release(fp, e, false)
		return nil, ctx.Err()
	}
}

// MetaError is the _meta member of an error result that carries airlock's error as an object
// {code, message, retryable, details?, hint}.
const MetaError = "io.airlock/error"

// metaError is airlock's error as _meta[MetaError] carries it: the daemon's error and the
// code's hint.
type metaError struct {
	Code      string         `json:"code"`
	Message   string         `json:"message"`
	Retryable bool           `json:"retryable"`
	Details   map[string]any `json:"details,omitempty"`
	Hint      string         `json:"hint"`
}

// errorResult renders an airlock error as a tool result: isError, a text of two lines (the
// code and the message, then the code's hint: what to do next), and the error itself with
// its hint in _meta[MetaError]. It carries no structuredContent: clients built on the
// TypeScript SDK validate structuredContent against the tool's outputSchema even when isError
// is set, and reject a result that does not match it, so an error object there would hide the
// error behind a protocol failure.
func errorResult(e *protocol.Error) *sdk.CallToolResult {
	h := hint.For(e.Code)
	text := "airlock: " + e.Code + ": " + e.Message
	if e.Retryable {
		text += " (retryable)"
	}
	text += "\n" + h
	me := &metaError{Code: e.Code, Message: e.Message, Retryable: e.Retryable, Details: e.Details, Hint: h}
	return &sdk.CallToolResult{IsError: true, Meta: sdk.Meta{MetaError: me}, Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

// codeOf returns the airlock code of err, or "".
func codeOf(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// progress sends notifications/progress for one call when the client asked for them with a
// progressToken and the tool reports progress; otherwise it does nothing.
type progress struct {
	ctx   context.Context
	ss    *sdk.ServerSession
	token any
}

func newProgress(ctx context.Context, req *sdk.CallToolRequest, reports bool) *progress {
	p := &progress{ctx: ctx}
	if reports && req.Session != nil {
		p.ss, p.token = req.Session, req.Params.GetProgressToken()
	}
	return p
}

// send reports done of 1 with a message. A failed notification is not the call's failure.
func (p *progress) send(done float64, msg string) {
	if p.ss == nil || p.token == nil {
		return
	}
	p.ss.NotifyProgress(p.ctx, &sdk.ProgressNotificationParams{ProgressToken: p.token, Progress: done, Total: 1, Message: msg})
}
