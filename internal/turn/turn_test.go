package turn

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/hint"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/internal/tooladapter/toolclient"
)

// script is a model double: it answers each call with the next response and records what it
// was sent. before, when set, runs at the start of each call.
type script struct {
	mu      sync.Mutex
	replies []model.Response
	errs    []error
	sent    [][]model.Message
	tools   [][]model.Tool
	before  func(call int)
}

func (s *script) Complete(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Response, error) {
	s.mu.Lock()
	n := len(s.sent)
	s.sent = append(s.sent, slices.Clone(req.Messages))
	s.tools = append(s.tools, req.Tools)
	before := s.before
	s.mu.Unlock()
	if before != nil {
		before(n)
	}
	if n < len(s.errs) && s.errs[n] != nil {
		return model.Response{}, s.errs[n]
	}
	if n >= len(s.replies) {
		return model.Response{}, errors.New("script: no reply left")
	}
	r := s.replies[n]
	if r.Message.Content != "" {
		onDelta(model.Delta{Text: r.Message.Content})
	}
	return r, nil
}

// tools is an adapter double answering every call with out, or failing with fail.
type tools struct {
	mu    sync.Mutex
	calls []string
	keys  []string
	out   string
	fail  *protocol.Error
}

func (t *tools) Invoke(ctx context.Context, op, key string, args json.RawMessage) (json.RawMessage, *protocol.Error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, op+" "+string(args))
	t.keys = append(t.keys, key)
	if t.fail != nil {
		return nil, t.fail
	}
	return json.RawMessage(t.out), nil
}

type sink struct {
	mu       sync.Mutex
	events   []string
	data     []any
	recorded []model.Message
	failAt   int // fail the Nth Record call (1-based); 0 never
}

func (s *sink) Emit(event string, data any) {
	s.mu.Lock()
	s.events = append(s.events, event)
	s.data = append(s.data, data)
	s.mu.Unlock()
}

func (s *sink) Record(msgs ...model.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAt > 0 {
		if s.failAt--; s.failAt == 0 {
			return protocol.Errorf("transcript_full", "full")
		}
	}
	s.recorded = append(s.recorded, msgs...)
	return nil
}

func call(id, name, args string) model.ToolCall {
	return model.ToolCall{ID: id, Name: name, Arguments: args}
}

func reply(text string, calls ...model.ToolCall) model.Response {
	return model.Response{Message: model.Message{Role: model.RoleAssistant, Content: text, ToolCalls: calls}, FinishReason: "stop"}
}

var limits = tooladapter.Limits{MaxRequestBytes: 1 << 20, MaxResponseBytes: 1 << 20, MaxConcurrentRequests: 4,
	MaxQueuedRequests: 16, RequestTimeoutMs: 30000, MaxIdempotencyKeys: 256, IdempotencyTtlMs: 3600000}

func TestToolFailuresAreOutputNotTurnFailures(t *testing.T) {
	m := &script{replies: []model.Response{
		reply("", call("a", "fs_read", `{"path":"x"}`), call("b", "fs_write", `{"path":"x","content":""}`),
			call("c", "fs_read", `[1]`), call("d", "fs_read", `{"path":"big"}`)),
		reply("done"),
	}}
	tl := &tools{out: `{"content":"` + strings.Repeat("é", 100) + `","bytesRead":200,"eof":true}`}
	s := &sink{}
	spec := &Spec{Model: m, ModelID: "m", Tools: tl, Operations: []string{"fs.read"}, Limits: limits, MaxToolOutputBytes: 64}
	res, e := Run(context.Background(), spec, Request{RequestID: "r", CallScope: "scope", Prompt: "go"}, nil, s)
	if e != nil || res.Text != "done" || res.ToolCalls != 4 || res.ModelCalls != 2 {
		t.Fatalf("run: %v %+v", e, res)
	}
	if len(tl.calls) != 2 || tl.keys[0] != toolclient.IdempotencyKey("fs.read", "scope\x001\x00a") {
		t.Fatalf("adapter calls %v %v", tl.calls, tl.keys)
	}
	outs := s.recorded[2:6] // user, assistant, then four tool messages
	if !strings.Contains(outs[1].Content, "unknown_tool") || !strings.Contains(outs[2].Content, "adapter_request_invalid") {
		t.Fatalf("refusals shown to the model: %q / %q", outs[1].Content, outs[2].Content)
	}
	if !strings.Contains(outs[3].Content, "[airlock: tool output truncated: ") || !strings.HasPrefix(outs[3].Content, `{"content":"`) {
		t.Fatalf("truncation notice: %q", outs[3].Content)
	}
	if strings.ContainsRune(outs[3].Content, '\uFFFD') {
		t.Fatal("truncation split a rune")
	}
	if got := m.tools[0]; len(got) != 1 || got[0].Name != "fs_read" {
		t.Fatalf("offered tools %v", got)
	}
}

func TestNoToolsOffersNone(t *testing.T) {
	m := &script{replies: []model.Response{reply("hi")}}
	if _, e := Run(context.Background(), &Spec{Model: m, Operations: []string{"fs.read"}}, Request{Prompt: "x"}, nil, &sink{}); e != nil {
		t.Fatal(e)
	}
	if len(m.tools[0]) != 0 {
		t.Fatalf("tools offered without an adapter: %v", m.tools[0])
	}
}

func TestModelCallLimit(t *testing.T) {
	loop := reply("", call("a", "fs_read", `{"path":"x"}`))
	m := &script{replies: []model.Response{loop, loop, loop}}
	spec := &Spec{Model: m, Tools: &tools{out: `{}`}, Operations: []string{"fs.read"}, Limits: limits, MaxModelCalls: 2}
	res, e := Run(context.Background(), spec, Request{Prompt: "x"}, nil, &sink{})
	if e != nil || res.StopReason != StopModelCallLimit || res.ModelCalls != 2 {
		t.Fatalf("%v %+v", e, res)
	}
}

func TestSteerAndFollowUp(t *testing.T) {
	mb := &Mailbox{}
	m := &script{replies: []model.Response{reply("", call("a", "fs_read", `{"path":"x"}`)), reply("first"), reply("second")}}
	m.before = func(n int) {
		if n == 0 {
			mb.Steer("also check y")
			mb.FollowUp("and then summarize")
		}
	}
	spec := &Spec{Model: m, Tools: &tools{out: `{}`}, Operations: []string{"fs.read"}, Limits: limits}
	res, e := Run(context.Background(), spec, Request{Prompt: "x"}, mb, &sink{})
	if e != nil || res.Text != "second" || res.ModelCalls != 3 {
		t.Fatalf("%v %+v", e, res)
	}
	last := func(call int) model.Message { return m.sent[call][len(m.sent[call])-1] }
	if got := last(1); got.Role != model.RoleUser || got.Content != "also check y" {
		t.Fatalf("steer not before the second call: %+v", got)
	}
	if got := last(2); got.Role != model.RoleUser || got.Content != "and then summarize" {
		t.Fatalf("follow-up not before the third call: %+v", got)
	}
}

func TestFailures(t *testing.T) {
	me := &model.Error{Code: "model_auth_failed", Message: "provider refused the key"}
	m := &script{errs: []error{me}}
	if _, e := Run(context.Background(), &Spec{Model: m}, Request{Prompt: "x"}, nil, &sink{}); e == nil || e.Code != "model_auth_failed" {
		t.Fatalf("model error: %v", e)
	}
	// A rate limit keeps the delay the provider asked for, for the harness.
	m = &script{errs: []error{&model.Error{Code: model.CodeRateLimited, Message: "slow down", Retryable: true, Status: 429, RetryAfter: 7 * time.Second}}}
	if _, e := Run(context.Background(), &Spec{Model: m}, Request{Prompt: "x"}, nil, &sink{}); e == nil || e.Code != model.CodeRateLimited || !e.Retryable ||
		e.Details[tooladapter.DetailRetryAfterMs] != int64(7000) {
		t.Fatalf("rate limited: %+v", e)
	}
	m = &script{errs: []error{errors.New("boom")}}
	if _, e := Run(context.Background(), &Spec{Model: m}, Request{Prompt: "x"}, nil, &sink{}); e == nil || e.Code != protocol.CodeTurnFailed {
		t.Fatalf("untyped model error: %v", e)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	m = &script{replies: []model.Response{reply("never")}, before: func(int) { cancel(ErrAborted) }}
	m.errs = []error{context.Canceled}
	if _, e := Run(ctx, &Spec{Model: m}, Request{Prompt: "x"}, nil, &sink{}); e == nil || e.Code != protocol.CodeAborted || !e.Retryable {
		t.Fatalf("abort: %v", e)
	}
	if _, e := Run(context.Background(), &Spec{Model: &script{replies: []model.Response{reply("x")}}}, Request{Prompt: "x"}, nil, &sink{failAt: 2}); e == nil || e.Code != "transcript_full" {
		t.Fatalf("record failure: %v", e)
	}
}

func TestEventsOfATurn(t *testing.T) {
	m := &script{replies: []model.Response{reply("", call("a", "fs_read", `{"path":"x"}`)), reply("ok")}}
	s := &sink{}
	spec := &Spec{Model: m, Tools: &tools{fail: protocol.Errorf("adapter_path_unavailable", "no such path")}, Operations: []string{"fs.read"}, Limits: limits}
	if _, e := Run(context.Background(), spec, Request{Prompt: "x"}, nil, s); e != nil {
		t.Fatal(e)
	}
	want := []string{"turnStart", "messageStart", "messageEnd", "toolStart", "toolEnd", "messageStart", "messageUpdate", "messageEnd", "turnEnd"}
	if !slices.Equal(s.events, want) {
		t.Fatalf("events %v", s.events)
	}
	end := s.data[4].(toolEnd)
	if end.OK || end.Error == nil || end.Error.Code != "adapter_path_unavailable" {
		t.Fatalf("toolEnd %+v", end)
	}
}

func TestDefinitionsAreClosedAndBounded(t *testing.T) {
	small := limits
	small.MaxResponseBytes = 4096
	defs := Definitions(tooladapter.Operations, small)
	if len(defs) != 6 {
		t.Fatalf("%d definitions", len(defs))
	}
	for _, d := range defs {
		var s map[string]any
		if err := json.Unmarshal(d.Parameters, &s); err != nil || s["additionalProperties"] != false || s["type"] != "object" {
			t.Fatalf("%s: %s", d.Name, d.Parameters)
		}
		if strings.Contains(d.Name, ".") {
			t.Fatalf("name %s", d.Name)
		}
	}
	var read map[string]any
	json.Unmarshal(defs[2].Parameters, &read)
	if max := read["properties"].(map[string]any)["maxBytes"].(map[string]any)["maximum"]; max != float64(4096-1024) {
		t.Fatalf("fs_read maxBytes bound %v", max)
	}
	// The write's flags say their defaults, as airlock-fs applies them: a model read "Allow
	// creating the file." as off unless set.
	var write map[string]any
	json.Unmarshal(defs[4].Parameters, &write)
	props := write["properties"].(map[string]any)
	if c, o := props["create"].(map[string]any)["description"].(string), props["overwrite"].(map[string]any)["description"].(string); !strings.Contains(c, "default true") || !strings.Contains(o, "default false") {
		t.Fatalf("fs_write's flags: %q, %q", c, o)
	}
}

// TestToolErrorsCarryTheHint: a failed tool call shows the model the error's code and the
// code's hint from internal/hint (what to do next), for an adapter's refusal that reaches the
// runtime as a bare code and for the turn's own unknown_tool.
func TestToolErrorsCarryTheHint(t *testing.T) {
	m := &script{replies: []model.Response{
		reply("", call("a", "fs_read", `{"path":"x"}`), call("b", "fs_delete", `{"path":"x"}`)),
		reply("done"),
	}}
	tl := &tools{fail: (&protocol.Error{Code: "file_exists", Message: "host tool adapter request failed"}).With("origin", "adapter")}
	s := &sink{}
	spec := &Spec{Model: m, Tools: tl, Operations: []string{"fs.read"}, Limits: limits}
	if _, e := Run(context.Background(), spec, Request{Prompt: "go"}, nil, s); e != nil {
		t.Fatal(e)
	}
	for i, want := range []string{"file_exists", CodeUnknownTool} {
		var out struct {
			Error struct {
				Code string `json:"code"`
				Hint string `json:"hint"`
			} `json:"error"`
		}
		content := s.recorded[2+i].Content
		if err := json.Unmarshal([]byte(content), &out); err != nil || out.Error.Code != want || out.Error.Hint != hint.For(want) || out.Error.Hint == hint.Fallback {
			t.Errorf("tool output %q, want %s with its hint", content, want)
		}
	}
	if !strings.Contains(s.recorded[2].Content, "overwrite true") {
		t.Errorf("file_exists does not say how to overwrite: %q", s.recorded[2].Content)
	}
}

// TestDigestSchemaIsTheWire: the expectedDigest the model is told to send is the one the
// runtime accepts (64 lowercase hex digits, as writes return it); the "sha256:" form the
// schema once asked for is refused by both.
func TestDigestSchemaIsTheWire(t *testing.T) {
	hexDigest := strings.Repeat("ab", 32)
	for _, d := range Definitions([]string{tooladapter.OpWrite, tooladapter.OpEdit}, limits) {
		var s struct {
			Properties map[string]struct {
				Pattern string `json:"pattern"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(d.Parameters, &s); err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(s.Properties["expectedDigest"].Pattern)
		for _, digest := range []string{hexDigest, "sha256:" + hexDigest} {
			args, _ := json.Marshal(map[string]any{"path": "a", "content": "x", "edits": []any{map[string]string{"oldText": "a", "newText": "b"}}, "expectedDigest": digest})
			var m map[string]any
			json.Unmarshal(args, &m)
			if d.Name == "fs_write" {
				delete(m, "edits")
			} else {
				delete(m, "content")
			}
			args, _ = json.Marshal(m)
			runtimeOK := tooladapter.ValidatePayload(operationOf(d.Name, tooladapter.Operations), args) == nil
			if re.MatchString(digest) != runtimeOK {
				t.Errorf("%s: expectedDigest %q: schema accepts %v, runtime accepts %v", d.Name, digest, re.MatchString(digest), runtimeOK)
			}
		}
	}
}

// hostTools is a HostTools double: one tool, answering out or failing with fail.
type hostTools struct {
	mu    sync.Mutex
	calls []string
	out   string
	fail  *protocol.Error
}

func (h *hostTools) Tools() []model.Tool {
	return []model.Tool{{Name: "adapter_propose", Description: "propose", Parameters: json.RawMessage(`{"type":"object"}`)}}
}

func (h *hostTools) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, *protocol.Error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, name+" "+string(args))
	if h.fail != nil {
		return nil, h.fail
	}
	return json.RawMessage(h.out), nil
}

// TestHostToolsAreOfferedAndCalled: the daemon's own tools are offered beside the granted
// operations, even without a tool adapter; a call reaches them with the model's arguments,
// their refusal is the tool's output with its hint, and the events name the tool.
func TestHostToolsAreOfferedAndCalled(t *testing.T) {
	m := &script{replies: []model.Response{
		reply("", call("a", "adapter_propose", `{"name":"x"}`), call("b", "adapter_propose", `[1]`)),
		reply("", call("c", "adapter_propose", `{"name":"y"}`)),
		reply("done"),
	}}
	h := &hostTools{out: `{"state":"pending_run"}`}
	s := &sink{}
	spec := &Spec{Model: m, ModelID: "m", Host: h}
	before := m.before
	m.before = func(n int) {
		if n == 1 {
			h.mu.Lock()
			h.fail = protocol.Errorf("proposal_env_refused", "NAME=value sets environment")
			h.mu.Unlock()
		}
		if before != nil {
			before(n)
		}
	}
	res, e := Run(context.Background(), spec, Request{Prompt: "propose"}, nil, s)
	if e != nil || res.Text != "done" || res.ToolCalls != 3 {
		t.Fatalf("run: %v %+v", e, res)
	}
	if got := m.tools[0]; len(got) != 1 || got[0].Name != "adapter_propose" {
		t.Fatalf("offered tools %v", got)
	}
	if len(h.calls) != 2 || h.calls[0] != `adapter_propose {"name":"x"}` || h.calls[1] != `adapter_propose {"name":"y"}` {
		t.Fatalf("host tool calls %v", h.calls)
	}
	outs := s.recorded[2:4]
	if outs[0].Content != `{"state":"pending_run"}` || !strings.Contains(outs[1].Content, "adapter_request_invalid") {
		t.Fatalf("outputs %q", outs)
	}
	if last := s.recorded[5].Content; !strings.Contains(last, "proposal_env_refused") || !strings.Contains(last, `"hint":"`) {
		t.Fatalf("a refusal shown to the model: %q", last)
	}
	for i, ev := range s.events {
		if ev == protocol.EventToolEnd {
			if end := s.data[i].(toolEnd); end.Operation != "adapter_propose" {
				t.Fatalf("toolEnd %+v", end)
			}
		}
	}
}

// TestUnansweredToolCallsAreAnswered: a daemon killed during a tool call leaves a transcript
// whose assistant message asks for calls nothing answered. The restored session sent that
// conversation as it was, and a provider that checks it (OpenAI does) refused every later
// turn, model_request_rejected, for good: the transcript cannot change. Each unanswered call
// gets a result the model can read, right after the answered ones, at every turn.
func TestUnansweredToolCallsAreAnswered(t *testing.T) {
	call := func(ids ...string) model.Message {
		m := model.Message{Role: model.RoleAssistant}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, model.ToolCall{ID: id, Name: "fs_write", Arguments: `{}`})
		}
		return m
	}
	user := func(s string) model.Message { return model.Message{Role: model.RoleUser, Content: s} }
	result := func(id string) model.Message {
		return model.Message{Role: model.RoleTool, ToolCallID: id, Content: "ok"}
	}
	history := []model.Message{
		user("one"), call("a", "b"), result("a"), // b was running when the daemon died
		user("two"), call("c"), result("c"), {Role: model.RoleAssistant, Content: "done"},
		user("three"), call("d"), // d too, at the very end
	}
	m := &script{replies: []model.Response{{Message: model.Message{Content: "fine"}}}}
	if _, e := Run(context.Background(), &Spec{Model: m}, Request{Prompt: "four", History: history}, nil, &sink{}); e != nil {
		t.Fatal(e)
	}
	var got []string
	for _, msg := range m.sent[0] {
		switch {
		case msg.Role == model.RoleTool && strings.Contains(msg.Content, `"code":"request_indeterminate"`):
			got = append(got, "unknown:"+msg.ToolCallID)
		case msg.Role == model.RoleTool:
			got = append(got, "result:"+msg.ToolCallID)
		case len(msg.ToolCalls) > 0:
			got = append(got, "call")
		default:
			got = append(got, string(msg.Role)+":"+msg.Content)
		}
	}
	want := []string{"user:one", "call", "result:a", "unknown:b", "user:two", "call", "result:c", "assistant:done",
		"user:three", "call", "unknown:d", "user:four"}
	if !slices.Equal(got, want) {
		t.Fatalf("sent\n%q\nwant\n%q", got, want)
	}
	if !slices.Equal(history[len(history)-1].ToolCalls, call("d").ToolCalls) || len(history) != 9 {
		t.Fatal("the caller's history was modified")
	}
}
