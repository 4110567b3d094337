// Package turn runs one agent turn: it sends a conversation to a model, streams what the model
// says as events, calls the session's granted tools for the model and feeds their bounded
// output back, until the model answers without asking for a tool.
//
// The package knows neither sockets nor storage: the caller supplies the model client, the tool
// invoker (the session's host tool adapter), an event sink and the transcript recorder.
package turn

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"

	"github.com/airlockhq/airlock/internal/hint"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/internal/tooladapter/toolclient"
)

// Defaults of Spec.
const (
	// DefaultMaxToolOutputBytes bounds what one tool call shows the model.
	DefaultMaxToolOutputBytes = 32 << 10
	// DefaultMaxModelCalls bounds the model calls of one turn: a model that keeps asking for
	// tools ends the turn with stopReason "model_call_limit".
	DefaultMaxModelCalls = 32
	// maxEventArgumentBytes is the largest tool-call argument text a toolStart event repeats.
	maxEventArgumentBytes = 2048
)

// CodeUnknownTool is the error a model's call of a tool the session was not granted gets, as
// the tool's output.
const CodeUnknownTool = "unknown_tool"

// Stop reasons of a completed turn besides the model's own finish reason.
const (
	StopModelCallLimit = "model_call_limit"
)

// Completer is a model backend; *model.Client is the real one.
type Completer interface {
	Complete(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Response, error)
}

// Invoker calls one granted tool operation; *toolclient.Conn is the real one.
type Invoker interface {
	Invoke(ctx context.Context, op, key string, args json.RawMessage) (json.RawMessage, *protocol.Error)
}

// Spec is what a session's policy fixes for all of its turns.
type Spec struct {
	Model        Completer
	ModelID      string
	Reasoning    string // the model's reasoning effort, "" for the provider's default
	SystemPrompt string
	// Tools and Operations are the session's host tool adapter and its granted operations;
	// a nil Tools offers the model no tools at all.
	Tools      Invoker
	Operations []string
	Limits     tooladapter.Limits
	// Room, when not nil, adds the capabilities published into the session's room as tools,
	// listed once per turn.
	Room RoomTools
	// Host, when not nil, adds tools the daemon serves itself (the adapter proposal tools of
	// a session whose policy allows proposals), listed once per turn.
	Host HostTools

	MaxToolOutputBytes int // DefaultMaxToolOutputBytes when 0
	MaxModelCalls      int // DefaultMaxModelCalls when 0
}

// Sink receives a turn's events and durable messages.
type Sink interface {
	// Emit sends an event to the session's attached clients. It must not block.
	Emit(event string, data any)
	// Record appends messages to the session's transcript, durably, in order.
	Record(msgs ...model.Message) error
}

// Request is one wake.
type Request struct {
	RequestID string
	// CallScope makes tool-call idempotency keys unique to this wake: models number their
	// tool calls per response ("call_0"), so the key derives from the scope and the id.
	CallScope string
	Prompt    string
	History   []model.Message // the conversation so far, oldest first
}

// Mailbox carries steer and followUp messages into a running turn. Its methods are safe for
// concurrent use. Once the turn has decided to end, the mailbox is closed and refuses
// messages, so that none is accepted and then never read.
type Mailbox struct {
	mu     sync.Mutex
	steer  []string
	follow []string
	closed bool
}

// Steer queues a message the model sees before its next call, after the tool calls in
// progress finish. It reports false when the turn has ended.
func (m *Mailbox) Steer(msg string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.steer = append(m.steer, msg)
	return true
}

// FollowUp queues a message the turn continues with once the model would otherwise finish. It
// reports false when the turn has ended.
func (m *Mailbox) FollowUp(msg string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.follow = append(m.follow, msg)
	return true
}

// steers takes the steer messages.
func (m *Mailbox) steers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.steer
	m.steer = nil
	return out
}

// finish is called when the model answered without tool calls: it returns the messages the
// turn goes on with (steers, then follow-ups), or closes the mailbox when there are none.
func (m *Mailbox) finish() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append(m.steer, m.follow...)
	m.steer, m.follow = nil, nil
	if len(out) == 0 {
		m.closed = true
	}
	return out
}

// close refuses messages from now on.
func (m *Mailbox) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}

// ErrAborted is the cancellation cause an abort gives the turn's context.
var ErrAborted = errors.New("turn aborted")

// Run runs one turn to its end. A cancelled ctx ends it with aborted; a model failure with
// the model's error code; a transcript failure with the transcript's code. Tool failures are not
// turn failures: the model sees them as the tool's output and decides what to do.
func Run(ctx context.Context, spec *Spec, req Request, mb *Mailbox, sink Sink) (*protocol.TurnResult, *protocol.Error) {
	if mb == nil {
		mb = &Mailbox{}
	}
	defer mb.close()
	maxOut := spec.MaxToolOutputBytes
	if maxOut <= 0 {
		maxOut = DefaultMaxToolOutputBytes
	}
	maxCalls := spec.MaxModelCalls
	if maxCalls <= 0 {
		maxCalls = DefaultMaxModelCalls
	}
	var tools []model.Tool
	if spec.Tools != nil {
		tools = Definitions(spec.Operations, spec.Limits)
	}
	var roomTools []RoomTool
	if spec.Room != nil {
		roomTools = spec.Room.Tools(ctx)
		for _, rt := range roomTools {
			if operationOf(rt.Tool.Name, spec.Operations) == "" {
				tools = append(tools, rt.Tool)
			}
		}
	}

	var hostTools []model.Tool
	if spec.Host != nil {
		hostTools = spec.Host.Tools()
		tools = append(tools, hostTools...)
	}

	msgs := make([]model.Message, 0, len(req.History)+8)
	if spec.SystemPrompt != "" {
		msgs = append(msgs, model.Message{Role: model.RoleSystem, Content: spec.SystemPrompt})
	}
	msgs = append(msgs, answerUnanswered(req.History)...)
	// addUser records user messages (the prompt, steers, follow-ups) and adds them to the
	// conversation.
	addUser := func(texts []string) *protocol.Error {
		for _, t := range texts {
			m := model.Message{Role: model.RoleUser, Content: t}
			if err := sink.Record(m); err != nil {
				return protocol.AsError(err)
			}
			msgs = append(msgs, m)
		}
		return nil
	}
	if e := addUser([]string{req.Prompt}); e != nil {
		return nil, e
	}
	sink.Emit(protocol.EventTurnStart, nil)

	res := &protocol.TurnResult{RequestID: req.RequestID}
	for {
		if e := addUser(mb.steers()); e != nil {
			return nil, e
		}
		if res.ModelCalls == maxCalls {
			res.StopReason = StopModelCallLimit
			break
		}
		if e := aborted(ctx); e != nil {
			return nil, e
		}
		sink.Emit(protocol.EventMessageStart, messageStart{Role: string(model.RoleAssistant)})
		resp, err := spec.Model.Complete(ctx, model.Request{
			Model: spec.ModelID, Messages: msgs, Tools: tools, Stream: true, ReasoningEffort: spec.Reasoning,
		}, func(d model.Delta) {
			if d.Text != "" {
				sink.Emit(protocol.EventMessageUpdate, messageUpdate{Delta: d.Text})
			}
		})
		res.ModelCalls++
		if err != nil {
			if e := aborted(ctx); e != nil {
				return nil, e
			}
			return nil, modelError(err)
		}
		res.Usage.PromptTokens += resp.Usage.PromptTokens
		res.Usage.CompletionTokens += resp.Usage.CompletionTokens
		res.Usage.TotalTokens += resp.Usage.TotalTokens

		reply := resp.Message
		reply.Role = model.RoleAssistant
		if err := sink.Record(reply); err != nil {
			return nil, protocol.AsError(err)
		}
		msgs = append(msgs, reply)
		sink.Emit(protocol.EventMessageEnd, endOf(reply))

		if len(reply.ToolCalls) == 0 {
			if more := mb.finish(); len(more) > 0 {
				if e := addUser(more); e != nil {
					return nil, e
				}
				continue
			}
			res.Text = reply.Content
			res.StopReason = resp.FinishReason
			if res.StopReason == "" {
				res.StopReason = "stop"
			}
			break
		}
		// Providers number tool calls per response ("call_0"), so the key's scope names the
		// model call too: two calls of one turn never share a key, and a retry of the same turn
		// derives the same keys.
		scope := req.CallScope + "\x00" + strconv.Itoa(res.ModelCalls)
		for _, tc := range reply.ToolCalls {
			out := callTool(ctx, spec, roomTools, hostTools, scope, tc, maxOut, sink)
			res.ToolCalls++
			if err := sink.Record(out); err != nil {
				return nil, protocol.AsError(err)
			}
			msgs = append(msgs, out)
		}
	}
	sink.Emit(protocol.EventTurnEnd, turnEnd{StopReason: res.StopReason, ModelCalls: res.ModelCalls, ToolCalls: res.ToolCalls, Usage: res.Usage})
	return res, nil
}

// unansweredCode is what a tool call that has no recorded result shows the model: its
// effect is as unknown as a wake's a restart left indeterminate, and the code's hint says
// to check before calling again.
const unansweredCode = "request_indeterminate"

// answerUnanswered returns history with a result for every tool call that has none, placed
// right after the calls' assistant message and the results it has. A daemon that died during
// a tool call (kill -9, a power cut) leaves a transcript whose assistant message asks for
// calls that nothing answers; providers refuse such a conversation (OpenAI: "An assistant
// message with 'tool_calls' must be followed by tool messages responding to each
// 'tool_call_id'"), so that every later turn of the session would fail. The transcript keeps
// what happened; only what the model is sent is completed, the same way at every turn.
func answerUnanswered(history []model.Message) []model.Message {
	var (
		out     []model.Message // nil until a call is found unanswered
		pending []model.ToolCall
		from    int // history[from:] is not yet in out
	)
	flush := func(at int) {
		if len(pending) == 0 {
			return
		}
		out = append(out, history[from:at]...)
		from = at
		for _, tc := range pending {
			b, _ := json.Marshal(map[string]any{"error": toolError{Code: unansweredCode,
				Message:   "airlockd stopped before this tool call's result was recorded: it may or may not have run",
				Retryable: false, Hint: hint.For(unansweredCode)}})
			out = append(out, model.Message{Role: model.RoleTool, ToolCallID: tc.ID, Content: string(b)})
		}
		pending = nil
	}
	for i, m := range history {
		if m.Role == model.RoleTool {
			pending = slices.DeleteFunc(pending, func(tc model.ToolCall) bool { return tc.ID == m.ToolCallID })
			continue
		}
		flush(i)
		if m.Role == model.RoleAssistant {
			pending = slices.Clone(m.ToolCalls)
		}
	}
	flush(len(history))
	if out == nil {
		return history
	}
	return append(out, history[from:]...)
}

// aborted returns the aborted error once ctx is done.
func aborted(ctx context.Context) *protocol.Error {
	if ctx.Err() == nil {
		return nil
	}
	msg := "the turn was aborted"
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, ErrAborted) && !errors.Is(cause, context.Canceled) {
		msg = "the turn was aborted: " + cause.Error()
	}
	return protocol.Retryable(protocol.CodeAborted, "%s", msg)
}

// modelError keeps a model failure's own code, message and retryability, and the delay its
// provider asked for (Retry-After) as details.retryAfterMs, so that a harness waits that long.
func modelError(err error) *protocol.Error {
	var me *model.Error
	if errors.As(err, &me) {
		pe := &protocol.Error{Code: me.Code, Message: me.Message, Retryable: me.Retryable}
		if me.Retryable && me.RetryAfter > 0 {
			pe = pe.With(tooladapter.DetailRetryAfterMs, me.RetryAfter.Milliseconds())
		}
		return pe
	}
	return protocol.Errorf(protocol.CodeTurnFailed, "the model call failed")
}

// callTool runs one tool call of the model and returns the tool message that answers it. It
// never fails the turn: an unknown tool, malformed arguments or an adapter error become the
// output the model reads.
func callTool(ctx context.Context, spec *Spec, roomTools []RoomTool, hostTools []model.Tool, scope string, tc model.ToolCall, maxOut int, sink Sink) model.Message {
	op := operationOf(tc.Name, spec.Operations)
	var rt *RoomTool
	host := false
	if op == "" {
		if rt = findRoomTool(roomTools, tc.Name); rt != nil {
			op = rt.operation()
		} else if slices.ContainsFunc(hostTools, func(t model.Tool) bool { return t.Name == tc.Name }) {
			op, host = tc.Name, true
		}
	}
	start := toolStart{ToolCallID: tc.ID, Name: tc.Name, Operation: op}
	if rt != nil {
		start.Room = rt.call()
	}
	if len(tc.Arguments) <= maxEventArgumentBytes && json.Valid([]byte(tc.Arguments)) {
		start.Arguments = json.RawMessage(tc.Arguments)
	}
	sink.Emit(protocol.EventToolStart, start)

	var (
		output string
		fail   *protocol.Error
	)
	args := json.RawMessage(tc.Arguments)
	switch {
	case op == "" || (rt == nil && !host && spec.Tools == nil):
		fail = protocol.Errorf(CodeUnknownTool, "no tool named %q is granted to this session", tc.Name)
	case !isObject(args):
		fail = protocol.Errorf(tooladapter.CodeRequestInvalid, "the arguments are not a JSON object")
	case host:
		data, e := spec.Host.Call(ctx, tc.Name, args)
		if e != nil {
			fail = e
		} else {
			output = string(data)
		}
	case rt != nil:
		data, e := spec.Room.Call(ctx, *rt, args)
		if e != nil {
			fail = e
		} else {
			output = string(data)
		}
	default:
		data, e := spec.Tools.Invoke(ctx, op, toolclient.IdempotencyKey(op, scope+"\x00"+tc.ID), args)
		if e != nil {
			fail = e
		} else {
			output = string(data)
		}
	}
	if fail != nil {
		// The model reads the code's hint beside the error: what to do next, from the one
		// table the MCP door shows too.
		b, _ := json.Marshal(map[string]any{"error": toolError{Code: fail.Code, Message: fail.Message, Retryable: fail.Retryable, Hint: hint.For(fail.Code)}})
		output = string(b)
	}
	full := len(output)
	output, truncated := boundOutput(output, maxOut)
	end := toolEnd{ToolCallID: tc.ID, Name: tc.Name, Operation: op, Room: start.Room, OK: fail == nil, OutputBytes: full, Truncated: truncated}
	if fail != nil {
		end.Error = &protocol.Error{Code: fail.Code, Message: fail.Message, Retryable: fail.Retryable}
	}
	sink.Emit(protocol.EventToolEnd, end)
	return model.Message{Role: model.RoleTool, ToolCallID: tc.ID, Content: output}
}

func isObject(raw json.RawMessage) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal(raw, &v) == nil && v != nil
}

// Event data.
type (
	messageStart struct {
		Role string `json:"role"`
	}
	messageUpdate struct {
		Delta string `json:"delta"`
	}
	messageEnd struct {
		Role      string         `json:"role"`
		Content   string         `json:"content"`
		ToolCalls []toolCallName `json:"toolCalls,omitempty"`
	}
	toolCallName struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	toolStart struct {
		ToolCallID string          `json:"toolCallId"`
		Name       string          `json:"name"`
		Operation  string          `json:"operation,omitempty"`
		Room       *roomCall       `json:"room,omitempty"`
		Arguments  json.RawMessage `json:"arguments,omitempty"`
	}
	toolEnd struct {
		ToolCallID  string          `json:"toolCallId"`
		Name        string          `json:"name"`
		Operation   string          `json:"operation,omitempty"`
		Room        *roomCall       `json:"room,omitempty"`
		OK          bool            `json:"ok"`
		Error       *protocol.Error `json:"error,omitempty"`
		OutputBytes int             `json:"outputBytes"`
		Truncated   bool            `json:"truncated"`
	}
	toolError struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
		Hint      string `json:"hint"`
	}
	turnEnd struct {
		StopReason string         `json:"stopReason"`
		ModelCalls int            `json:"modelCalls"`
		ToolCalls  int            `json:"toolCalls"`
		Usage      protocol.Usage `json:"usage"`
	}
)

func endOf(m model.Message) messageEnd {
	e := messageEnd{Role: string(m.Role), Content: m.Content}
	for _, tc := range m.ToolCalls {
		e.ToolCalls = append(e.ToolCalls, toolCallName{ID: tc.ID, Name: tc.Name})
	}
	return e
}
