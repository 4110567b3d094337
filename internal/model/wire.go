package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The wire shapes of the Chat Completions API. Decoding is lenient on purpose, unlike the
// daemon protocol's strict decoding: providers add fields all the time, and the fields we
// read are few.

type wireRequest struct {
	Model               string             `json:"model"`
	Messages            []wireMessage      `json:"messages"`
	Tools               []wireTool         `json:"tools,omitempty"`
	Stream              bool               `json:"stream"`
	StreamOptions       *wireStreamOptions `json:"stream_options,omitempty"`
	ReasoningEffort     string             `json:"reasoning_effort,omitempty"`
	MaxTokens           int                `json:"max_tokens,omitempty"`
	MaxCompletionTokens int                `json:"max_completion_tokens,omitempty"`
}

type wireStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// wireMessage always sends content as a string, "" for an assistant message that only
// calls tools. OpenAI documents null there, but Ollama answers 400 "invalid message
// content type: <nil>" (ollama/ollama#14181, pydantic/pydantic-ai#5206), some llama.cpp
// builds answer "Expected 'content' to be a string or an array" (ggml-org/llama.cpp#13471)
// and LM Studio rejected it too (lmstudio-bug-tracker#261); all of them, and OpenAI, accept "".
type wireMessage struct {
	Role       string         `json:"role"`
	Content    string         `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	// Index appears only in stream deltas; a pointer tells "absent" from 0.
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name string `json:"name,omitempty"`
	// Arguments is a JSON string on the wire; some servers send an object instead, which
	// argumentsText accepts.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

type wireTool struct {
	Type     string          `json:"type"`
	Function wireToolFuncDef `json:"function"`
}

type wireToolFuncDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// emptyParameters is sent for a tool without a schema; several servers require one.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// wireCompletion is a whole response or one stream chunk.
type wireCompletion struct {
	Choices []wireChoice `json:"choices"`
	Usage   *wireUsage   `json:"usage"`
	// Error is set by servers that report a failure inside a 200 response or stream.
	Error json.RawMessage `json:"error"`
}

type wireChoice struct {
	Index        int          `json:"index"`
	Message      *wireContent `json:"message"`
	Delta        *wireContent `json:"delta"`
	FinishReason *string      `json:"finish_reason"`
}

// wireContent is a message or a delta. Content may be null; reasoning_content and other
// reasoning fields are not read.
type wireContent struct {
	Content   *string        `json:"content"`
	ToolCalls []wireToolCall `json:"tool_calls"`
}

type wireUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (u *wireUsage) usage() Usage {
	return Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
}

// encodeRequest builds the request body, checking what the provider would otherwise reject
// with a less helpful message.
func encodeRequest(req Request, maxCompletionTokens bool) ([]byte, error) {
	if req.Model == "" {
		return nil, fmt.Errorf("empty model name")
	}
	if len(req.Messages) == 0 {
		return nil, fmt.Errorf("no messages")
	}
	w := wireRequest{Model: req.Model, Stream: req.Stream, Messages: make([]wireMessage, 0, len(req.Messages))}
	if req.Stream {
		w.StreamOptions = &wireStreamOptions{IncludeUsage: true}
	}
	if req.ReasoningEffort != "off" {
		w.ReasoningEffort = req.ReasoningEffort
	}
	if req.MaxTokens < 0 {
		return nil, fmt.Errorf("negative max tokens")
	}
	if maxCompletionTokens {
		w.MaxCompletionTokens = req.MaxTokens
	} else {
		w.MaxTokens = req.MaxTokens
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
		if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
			return nil, fmt.Errorf("message %d: tool calls on a %s message", i, m.Role)
		}
		wm := wireMessage{Role: string(m.Role), Content: m.Content, ToolCallID: m.ToolCallID}
		for j, tc := range m.ToolCalls {
			if tc.Name == "" {
				return nil, fmt.Errorf("message %d: tool call %d has no name", i, j)
			}
			args := tc.Arguments
			if args == "" {
				args = "{}"
			}
			raw, _ := json.Marshal(args) // a string always encodes
			wm.ToolCalls = append(wm.ToolCalls, wireToolCall{
				ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: raw},
			})
		}
		w.Messages = append(w.Messages, wm)
	}
	for i, t := range req.Tools {
		if t.Name == "" {
			return nil, fmt.Errorf("tool %d has no name", i)
		}
		params := t.Parameters
		if len(bytes.TrimSpace(params)) == 0 {
			params = emptyParameters
		} else if !isJSONObject(params) {
			return nil, fmt.Errorf("tool %q: parameters are not a JSON object", t.Name)
		}
		w.Tools = append(w.Tools, wireTool{Type: "function", Function: wireToolFuncDef{
			Name: t.Name, Description: t.Description, Parameters: params,
		}})
	}
	return json.Marshal(w)
}

// isJSONObject reports whether b is one valid JSON object.
func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

// argumentsText returns the text of a wire arguments value: the string's content, or the
// raw text of an object for servers that send one. Absent or null is "".
func argumentsText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '{' {
		return string(raw), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("arguments are neither a string nor an object")
	}
	return s, nil
}

// finishToolCall checks one complete tool call, in place. index is the provider's index.
func finishToolCall(tc *ToolCall, index int) error {
	if tc.Name == "" {
		return fmt.Errorf("tool call %d has no function name", index)
	}
	if tc.ID == "" {
		tc.ID = generatedID(index)
	}
	if len(bytes.TrimSpace([]byte(tc.Arguments))) == 0 {
		tc.Arguments = "{}"
	}
	if !isJSONObject([]byte(tc.Arguments)) {
		return fmt.Errorf("tool call %d (%q): arguments are not a JSON object", index, tc.Name)
	}
	// Arguments sent as a raw object bypass the JSON string decoder, which would have
	// replaced invalid UTF-8; tools downstream require valid UTF-8.
	if !utf8.ValidString(tc.Arguments) {
		return fmt.Errorf("tool call %d (%q): arguments are not valid UTF-8", index, tc.Name)
	}
	return nil
}

// providerErrorText extracts the message of an error member: {"message": "..."}, or a
// plain string as Ollama's native API sends. It returns "" when there is none.
func providerErrorText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Message != nil {
		if json.Unmarshal(obj.Message, &s) == nil {
			return s
		}
	}
	return ""
}

// providerErrorStatus returns the HTTP-like status an in-body error carries in its "code"
// (vLLM and llama.cpp send one), or 0.
func providerErrorStatus(raw json.RawMessage) int {
	var obj struct {
		Code json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Code == nil {
		return 0
	}
	var n int
	if json.Unmarshal(obj.Code, &n) != nil {
		var s string
		if json.Unmarshal(obj.Code, &s) != nil {
			return 0
		}
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			return 0
		}
	}
	if n < 400 || n > 599 {
		return 0
	}
	return n
}

// hasError reports whether an error member is present and not null.
func hasError(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && string(raw) != "null"
}

// generatedID is the id of a tool call the provider sent without one; see ToolCall.ID.
func generatedID(index int) string { return "call_" + strconv.Itoa(index) }
