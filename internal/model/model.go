// Package model is a client for the OpenAI-compatible Chat Completions API
// (POST {BASE_URL}/chat/completions) with tool calling and streaming, as served by OpenAI,
// Ollama, the llama.cpp server, vLLM and LM Studio.
//
// Guarantee: every read from the provider is bounded (SSE line, whole body, number of tool
// calls, bytes of one call's arguments), every failure is an *Error with a stable Code, and
// the provider's API key never appears in an error, a log value or a printed Provider.
//
// Not guaranteed: that two providers produce the same stream shape. The decoder is lenient
// where servers are known to differ (unknown fields, reasoning deltas, a missing tool call id,
// tool call arguments sent as an object) and strict where the agent loop depends on the
// result (tool call arguments must end up a JSON object).
//
// Concurrency: a Client is safe for concurrent use; each Complete call is independent and
// runs its onDelta callback on the calling goroutine.
package model

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
)

// Role is the author of a message.
type Role string

// Roles of the Chat Completions API.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the conversation.
type Message struct {
	Role    Role
	Content string
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []ToolCall
	// ToolCallID links a tool message to the call it answers.
	ToolCallID string
}

// ToolCall is one function call requested by the model.
type ToolCall struct {
	// ID identifies the call; a tool message answers it by ToolCallID. When the provider
	// sends none, the client assigns "call_<index>", where index is the provider's index of
	// the call in the response (so it is unique within one response, not across responses).
	ID   string
	Name string
	// Arguments is the raw JSON text as the provider sent it. In a Response it is always a
	// JSON object; an empty argument string from the provider becomes "{}".
	Arguments string
}

// Tool describes a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is a JSON Schema object; empty means a function without parameters.
	Parameters json.RawMessage
}

// Request is one chat completion request.
type Request struct {
	Model    string
	Messages []Message
	Tools    []Tool
	// Stream asks for server-sent events; onDelta then sees text as it arrives.
	Stream bool
	// ReasoningEffort is sent as "reasoning_effort"; "" and "off" omit it.
	ReasoningEffort string
	// MaxTokens bounds the completion; 0 omits it. See WithMaxCompletionTokens for the
	// field name it is sent under.
	MaxTokens int
}

// Response is a finished completion.
type Response struct {
	// Message has role assistant, the text content and the tool calls, in the provider's
	// index order.
	Message Message
	// FinishReason is the provider's reason ("stop", "tool_calls", "length", …), "" if
	// it sent none.
	FinishReason string
	Usage        Usage
}

// Usage counts tokens as the provider reports them; all zero when it reports none.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	TotalTokens      int
}

// Delta is a streamed increment, given to the onDelta callback of Complete. Exactly one of
// Text and ToolCallName is non-empty: Text is a piece of the assistant's content, and a
// ToolCallName marks the start of a tool call whose ID and name are now known.
// ToolCallIndex is the provider's index of that call (the order of Response tool calls).
type Delta struct {
	Text          string
	ToolCallIndex int
	ToolCallID    string
	ToolCallName  string
}

// redacted replaces a secret wherever one would otherwise be shown.
const redacted = "[redacted]"

// Provider is one configured backend. Key is the API key; it may be empty, since local
// servers expect none, and then no Authorization header is sent.
//
// Provider's String, GoString, Format, MarshalJSON and LogValue never show Key: a set key
// prints as "[redacted]". Code that copies Key into another value takes over that duty.
type Provider struct {
	Name    string
	BaseURL string
	Key     string
}

func (p Provider) keyText() string {
	if p.Key == "" {
		return ""
	}
	return redacted
}

// String returns the name, base URL and whether a key is set, never the key.
func (p Provider) String() string {
	return fmt.Sprintf("provider %q (%s, key %q)", p.Name, p.BaseURL, p.keyText())
}

// GoString is like String, in Go syntax.
func (p Provider) GoString() string {
	return fmt.Sprintf("model.Provider{Name:%q, BaseURL:%q, Key:%q}", p.Name, p.BaseURL, p.keyText())
}

// Format implements fmt.Formatter so that every verb and flag, including %+v and %#v, goes
// through String or GoString.
func (p Provider) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		fmt.Fprint(f, p.GoString())
	case verb == 'q':
		fmt.Fprint(f, strconv.Quote(p.String()))
	default:
		fmt.Fprint(f, p.String())
	}
}

// MarshalJSON encodes the name and base URL, and the key as "[redacted]" when set.
func (p Provider) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name    string `json:"name"`
		BaseURL string `json:"base_url"`
		Key     string `json:"key,omitempty"`
	}{p.Name, p.BaseURL, p.keyText()})
}

// LogValue implements slog.LogValuer with the same fields as MarshalJSON.
func (p Provider) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("name", p.Name), slog.String("base_url", p.BaseURL)}
	if p.Key != "" {
		attrs = append(attrs, slog.String("key", redacted))
	}
	return slog.GroupValue(attrs...)
}
