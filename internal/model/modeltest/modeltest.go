// Package modeltest provides a scripted OpenAI-compatible Chat Completions server for tests,
// in the manner of net/http/httptest. Product binaries do not import it.
//
// A test pushes replies; each request to POST /v1/chat/completions consumes the next one and
// is answered as a stream or as one JSON body, as its "stream" member asks. Every request is
// recorded for assertions, and Arrived lets a test wait for the Nth one without sleeping.
package modeltest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/model"
)

// Path is the request path the server answers.
const Path = "/v1/chat/completions"

// maxRequestBytes bounds a recorded request body.
const maxRequestBytes = 16 << 20

// Reply scripts the answer to one request.
type Reply struct {
	// Text is the assistant's content.
	Text string
	// ToolCalls are the calls the assistant makes. An empty ID is sent as absent, to test
	// the client's generated ids; empty Arguments are sent as "".
	ToolCalls []model.ToolCall
	// FinishReason defaults to "tool_calls" when there are tool calls, else "stop".
	FinishReason string
	// Usage is reported as is (zero counts included).
	Usage model.Usage

	// Status, when neither 0 nor 200, makes the reply an error with ErrorBody as its body
	// (default: an OpenAI-style error object) and Header added.
	Status    int
	ErrorBody string
	// Header is added to the response, error or not (for example Retry-After).
	Header http.Header
	// Raw, when not empty, is sent verbatim as a 200 body with RawContentType (default
	// text/event-stream for a streaming request, else application/json): for malformed
	// responses.
	Raw            string
	RawContentType string

	// Delay waits before answering.
	Delay time.Duration
	// Chunk is the largest number of bytes of text or arguments per streamed delta (whole
	// runes, so at least one); 0 sends each in one delta.
	Chunk int
	// Hold, when not nil, blocks the answer until it is closed, the request's context ends
	// or the server closes: a model call kept in flight. Headers are not sent before.
	Hold chan struct{}
}

// Received is one recorded request.
type Received struct {
	Method, Path string
	// Authorization is the header as received ("" when absent).
	Authorization string
	Header        http.Header
	// Body is the raw request body.
	Body []byte
	// Request is the body decoded into model terms; DecodeErr is set when that failed.
	Request      model.Request
	IncludeUsage bool
	// MaxCompletionTokens is set when the body used "max_completion_tokens".
	MaxCompletionTokens bool
	DecodeErr           error
}

// Server is a scripted model server. It is safe for concurrent use.
type Server struct {
	srv  *httptest.Server
	done chan struct{}

	closeOnce sync.Once

	// mu guards the fields that follow.
	mu       sync.Mutex
	queue    []Reply
	def      Reply
	received []Received
	arrivals map[int]chan struct{}
}

// New starts a server. Its default reply, used when the queue is empty, is a 500 whose
// error message says so, so that an unscripted call fails loudly.
func New() *Server {
	s := &Server{
		done:     make(chan struct{}),
		arrivals: make(map[int]chan struct{}),
		def: Reply{
			Status:    http.StatusInternalServerError,
			ErrorBody: `{"error":{"message":"modeltest: no scripted reply left","type":"server_error"}}`,
		},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL returns the base URL, ending in "/v1".
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Client returns an HTTP client for the server, for model.WithHTTPClient.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Push queues replies, consumed one per request in order.
func (s *Server) Push(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, replies...)
}

// SetDefault sets the reply given when the queue is empty.
func (s *Server) SetDefault(r Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.def = r
}

// Pending returns the number of queued replies not yet consumed.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Requests returns a copy of the requests received so far, in arrival order.
func (s *Server) Requests() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

// Count returns the number of requests received so far.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.received)
}

// Arrived returns a channel closed once the nth request (counting from 1) has arrived and
// been recorded, before its reply's Delay or Hold.
func (s *Server) Arrived(n int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.arrivals[n]
	if !ok {
		ch = make(chan struct{})
		s.arrivals[n] = ch
		if len(s.received) >= n {
			close(ch)
		}
	}
	return ch
}

// Close releases every held or delayed reply, closes client connections and shuts the
// server down, waiting for its handlers. It is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// record stores a request and takes its reply.
func (s *Server) record(rc Received) Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.received = append(s.received, rc)
	n := len(s.received)
	if ch, ok := s.arrivals[n]; ok {
		close(ch)
	} else {
		ch = make(chan struct{})
		close(ch)
		s.arrivals[n] = ch
	}
	if len(s.queue) == 0 {
		return s.def
	}
	r := s.queue[0]
	s.queue = s.queue[1:]
	return r
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		writeError(w, http.StatusNotFound, `{"error":{"message":"modeltest: no such path","type":"not_found"}}`)
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, `{"error":{"message":"modeltest: POST only"}}`)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes))
	if err != nil {
		return
	}
	rc := decodeReceived(body)
	rc.Method, rc.Path = r.Method, r.URL.Path
	rc.Authorization = r.Header.Get("Authorization")
	rc.Header = r.Header.Clone()
	reply := s.record(rc)

	if reply.Delay > 0 {
		t := time.NewTimer(reply.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
	if reply.Hold != nil {
		select {
		case <-reply.Hold:
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
	for k, vs := range reply.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	switch {
	case reply.Status != 0 && reply.Status != http.StatusOK:
		body := reply.ErrorBody
		if body == "" {
			body = fmt.Sprintf(`{"error":{"message":"modeltest: scripted HTTP %d","type":"scripted"}}`, reply.Status)
		}
		writeError(w, reply.Status, body)
	case reply.Raw != "":
		ct := reply.RawContentType
		if ct == "" {
			ct = "application/json"
			if rc.Request.Stream {
				ct = "text/event-stream"
			}
		}
		w.Header().Set("Content-Type", ct)
		_, _ = io.WriteString(w, reply.Raw)
	case rc.Request.Stream:
		s.stream(w, r, reply, rc.IncludeUsage)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(completionBody(reply))
	}
}

func writeError(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// stream writes reply as SSE chunks, flushing each, and stops early when the client goes.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, reply Reply, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	send := func(v any) bool {
		if r.Context().Err() != nil {
			return false
		}
		data, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	delta := func(d map[string]any) map[string]any {
		return chunkObject([]any{map[string]any{"index": 0, "delta": d, "finish_reason": nil}})
	}
	if !send(delta(map[string]any{"role": "assistant", "content": ""})) {
		return
	}
	for _, piece := range split(reply.Text, reply.Chunk) {
		if !send(delta(map[string]any{"content": piece})) {
			return
		}
	}
	for i, tc := range reply.ToolCalls {
		head := map[string]any{"index": i, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": ""}}
		if tc.ID != "" {
			head["id"] = tc.ID
		}
		if !send(delta(map[string]any{"tool_calls": []any{head}})) {
			return
		}
		for _, piece := range split(tc.Arguments, reply.Chunk) {
			frag := map[string]any{"index": i, "function": map[string]any{"arguments": piece}}
			if !send(delta(map[string]any{"tool_calls": []any{frag}})) {
				return
			}
		}
	}
	if !send(chunkObject([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finishReason(reply)}})) {
		return
	}
	if includeUsage {
		u := chunkObject([]any{})
		u["usage"] = usageObject(reply.Usage)
		if !send(u) {
			return
		}
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

func chunkObject(choices []any) map[string]any {
	return map[string]any{
		"id": "chatcmpl-modeltest", "object": "chat.completion.chunk", "created": 0,
		"model": "modeltest", "choices": choices,
	}
}

func usageObject(u model.Usage) map[string]any {
	return map[string]any{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.TotalTokens}
}

func finishReason(r Reply) string {
	switch {
	case r.FinishReason != "":
		return r.FinishReason
	case len(r.ToolCalls) > 0:
		return "tool_calls"
	}
	return "stop"
}

// completionBody is a whole chat.completion object.
func completionBody(r Reply) []byte {
	msg := map[string]any{"role": "assistant", "content": r.Text}
	if len(r.ToolCalls) > 0 {
		if r.Text == "" {
			msg["content"] = nil
		}
		var calls []any
		for _, tc := range r.ToolCalls {
			c := map[string]any{"type": "function", "function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}}
			if tc.ID != "" {
				c["id"] = tc.ID
			}
			calls = append(calls, c)
		}
		msg["tool_calls"] = calls
	}
	body, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-modeltest", "object": "chat.completion", "created": 0, "model": "modeltest",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finishReason(r)}},
		"usage":   usageObject(r.Usage),
	})
	return body
}

// split cuts s into pieces of at most n bytes without splitting a rune (a rune longer than
// n is one piece). n <= 0, or an empty s, gives s whole (no pieces for "").
func split(s string, n int) []string {
	if s == "" {
		return nil
	}
	if n <= 0 || len(s) <= n {
		return []string{s}
	}
	var out []string
	for len(s) > 0 {
		end := min(n, len(s))
		for end < len(s) && end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		if end == 0 {
			_, end = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

// The wire shape of a received request, decoded leniently.
type wireRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string  `json:"role"`
		Content    *string `json:"content"`
		ToolCallID string  `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ReasoningEffort     string `json:"reasoning_effort"`
	MaxTokens           int    `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
}

func decodeReceived(body []byte) Received {
	rc := Received{Body: body}
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		rc.DecodeErr = err
		return rc
	}
	req := model.Request{Model: w.Model, Stream: w.Stream, ReasoningEffort: w.ReasoningEffort, MaxTokens: w.MaxTokens}
	if w.MaxCompletionTokens != nil {
		rc.MaxCompletionTokens = true
		req.MaxTokens = *w.MaxCompletionTokens
	}
	for _, m := range w.Messages {
		msg := model.Message{Role: model.Role(m.Role), ToolCallID: m.ToolCallID}
		if m.Content != nil {
			msg.Content = *m.Content
		}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range w.Tools {
		req.Tools = append(req.Tools, model.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	rc.Request = req
	rc.IncludeUsage = w.StreamOptions != nil && w.StreamOptions.IncludeUsage
	return rc
}

// LastUserText returns the content of the last user message of the request, "" if none.
func (r Received) LastUserText() string {
	for i := len(r.Request.Messages) - 1; i >= 0; i-- {
		if r.Request.Messages[i].Role == model.RoleUser {
			return r.Request.Messages[i].Content
		}
	}
	return ""
}
