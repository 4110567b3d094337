package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/version"
)

// newServer starts a scripted server and a client for it, both closed at cleanup.
func newServer(t *testing.T, key string, opts ...model.Option) (*modeltest.Server, *model.Client) {
	t.Helper()
	s := modeltest.New()
	c := model.NewClient(model.Provider{Name: "test", BaseURL: s.URL(), Key: key}, opts...)
	t.Cleanup(func() {
		s.Close()
		c.CloseIdleConnections()
	})
	return s, c
}

func userRequest(stream bool) model.Request {
	return model.Request{
		Model:    "m1",
		Messages: []model.Message{{Role: model.RoleSystem, Content: "be brief"}, {Role: model.RoleUser, Content: "hi"}},
		Stream:   stream,
	}
}

type recorder struct{ deltas []model.Delta }

func (r *recorder) add(d model.Delta) { r.deltas = append(r.deltas, d) }

func (r *recorder) text() string {
	var b strings.Builder
	for _, d := range r.deltas {
		b.WriteString(d.Text)
	}
	return b.String()
}

func (r *recorder) starts() []model.Delta {
	var out []model.Delta
	for _, d := range r.deltas {
		if d.ToolCallName != "" {
			out = append(out, d)
		}
	}
	return out
}

func mustCode(t *testing.T, err error, code string) *model.Error {
	t.Helper()
	var e *model.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *model.Error", err, err)
	}
	if e.Code != code {
		t.Fatalf("code %s (%v), want %s", e.Code, err, code)
	}
	if !errors.Is(err, &model.Error{Code: code}) {
		t.Fatalf("errors.Is does not match by code")
	}
	return e
}

func TestStreamingText(t *testing.T) {
	s, c := newServer(t, testKey)
	s.Push(modeltest.Reply{Text: "Hello, wörld — streaming", Chunk: 3, Usage: model.Usage{PromptTokens: 7, CompletionTokens: 5, TotalTokens: 12}})
	var rec recorder
	resp, err := c.Complete(context.Background(), userRequest(true), rec.add)
	if err != nil {
		t.Fatal(err)
	}
	want := model.Response{
		Message:      model.Message{Role: model.RoleAssistant, Content: "Hello, wörld — streaming"},
		FinishReason: "stop",
		Usage:        model.Usage{PromptTokens: 7, CompletionTokens: 5, TotalTokens: 12},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("got %+v\nwant %+v", resp, want)
	}
	if len(rec.deltas) < 5 || rec.text() != want.Message.Content {
		t.Fatalf("deltas %+v", rec.deltas)
	}
	got := s.Requests()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	r := got[0]
	if r.Authorization != "Bearer "+testKey || !r.IncludeUsage || !r.Request.Stream || r.Request.Model != "m1" {
		t.Fatalf("request %+v", r)
	}
	if ua := r.Header.Get("User-Agent"); ua != "airlock/"+version.Version {
		t.Fatalf("User-Agent %q", ua)
	}
	if r.LastUserText() != "hi" || len(r.Request.Messages) != 2 {
		t.Fatalf("messages %+v", r.Request.Messages)
	}
}

func TestStreamingParallelToolCalls(t *testing.T) {
	s, c := newServer(t, "")
	calls := []model.ToolCall{
		{ID: "call_x", Name: "read_file", Arguments: `{"path":"/tmp/a.txt","limit":100}`},
		{ID: "", Name: "list", Arguments: `{"dir":"ü"}`},
		{ID: "call_z", Name: "noop", Arguments: ""},
	}
	s.Push(modeltest.Reply{Text: "let me look", ToolCalls: calls, Chunk: 4})
	var rec recorder
	resp, err := c.Complete(context.Background(), userRequest(true), rec.add)
	if err != nil {
		t.Fatal(err)
	}
	want := []model.ToolCall{calls[0], {ID: "call_1", Name: "list", Arguments: `{"dir":"ü"}`}, {ID: "call_z", Name: "noop", Arguments: "{}"}}
	if !reflect.DeepEqual(resp.Message.ToolCalls, want) || resp.FinishReason != "tool_calls" || resp.Message.Content != "let me look" {
		t.Fatalf("got %+v", resp)
	}
	wantStarts := []model.Delta{
		{ToolCallIndex: 0, ToolCallID: "call_x", ToolCallName: "read_file"},
		{ToolCallIndex: 1, ToolCallID: "call_1", ToolCallName: "list"},
		{ToolCallIndex: 2, ToolCallID: "call_z", ToolCallName: "noop"},
	}
	if !reflect.DeepEqual(rec.starts(), wantStarts) {
		t.Fatalf("starts %+v", rec.starts())
	}
	if a := s.Requests()[0].Authorization; a != "" {
		t.Fatalf("Authorization %q sent without a key", a)
	}
}

func TestNonStreaming(t *testing.T) {
	s, c := newServer(t, testKey)
	s.Push(
		modeltest.Reply{Text: "plain", Usage: model.Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}},
		modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":[1,2]}`}}},
	)
	var rec recorder
	resp, err := c.Complete(context.Background(), userRequest(false), rec.add)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "plain" || resp.FinishReason != "stop" || resp.Usage.TotalTokens != 2 || rec.text() != "plain" {
		t.Fatalf("got %+v, deltas %+v", resp, rec.deltas)
	}
	resp, err = c.Complete(context.Background(), userRequest(false), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":[1,2]}`}}}
	if !reflect.DeepEqual(resp.Message, want) {
		t.Fatalf("got %+v", resp.Message)
	}
	if r := s.Requests()[0]; r.Request.Stream || r.IncludeUsage {
		t.Fatalf("non-streaming request sent as %s", r.Body)
	}
}

// TestStreamAnsweredWithJSON covers servers that ignore "stream" and answer one JSON body.
func TestStreamAnsweredWithJSON(t *testing.T) {
	s, c := newServer(t, "")
	s.Push(modeltest.Reply{Raw: `{"choices":[{"message":{"content":"whole","tool_calls":[{"id":"i","function":{"name":"f","arguments":{"k":1}}}]},"finish_reason":"tool_calls"}]}`, RawContentType: "application/json; charset=utf-8"})
	var rec recorder
	resp, err := c.Complete(context.Background(), userRequest(true), rec.add)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "whole" || rec.text() != "whole" || len(rec.starts()) != 1 || resp.Message.ToolCalls[0].Arguments != `{"k":1}` {
		t.Fatalf("got %+v, deltas %+v", resp, rec.deltas)
	}
}

func TestRequestEncoding(t *testing.T) {
	s, c := newServer(t, "")
	s.SetDefault(modeltest.Reply{Text: "ok"})
	params := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)
	full := model.Request{
		Model: "gpt-x",
		Messages: []model.Message{
			{Role: model.RoleUser, Content: "read a"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c1", Name: "read", Arguments: `{"path":"a"}`}, {ID: "c2", Name: "noop"}}},
			{Role: model.RoleTool, ToolCallID: "c1", Content: "contents"},
		},
		Tools:           []model.Tool{{Name: "read", Description: "Read a file.", Parameters: params}, {Name: "noop"}},
		Stream:          true,
		ReasoningEffort: "high",
		MaxTokens:       256,
	}
	cases := []struct {
		name string
		req  model.Request
		opts []model.Option
		want string
	}{
		{"full", full, nil, `{"model":"gpt-x","messages":[
			{"role":"user","content":"read a"},
			{"role":"assistant","content":"","tool_calls":[
				{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a\"}"}},
				{"id":"c2","type":"function","function":{"name":"noop","arguments":"{}"}}]},
			{"role":"tool","content":"contents","tool_call_id":"c1"}],
			"tools":[
				{"type":"function","function":{"name":"read","description":"Read a file.","parameters":` + string(params) + `}},
				{"type":"function","function":{"name":"noop","parameters":{"type":"object","properties":{}}}}],
			"stream":true,"stream_options":{"include_usage":true},"reasoning_effort":"high","max_tokens":256}`},
		{"minimal", model.Request{Model: "m", Messages: []model.Message{{Role: model.RoleUser, Content: ""}}, ReasoningEffort: "off"}, nil,
			`{"model":"m","messages":[{"role":"user","content":""}],"stream":false}`},
		{"max_completion_tokens", model.Request{Model: "m", Messages: []model.Message{{Role: model.RoleUser, Content: "x"}}, MaxTokens: 9},
			[]model.Option{model.WithMaxCompletionTokens(true)},
			`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":false,"max_completion_tokens":9}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			if tc.opts != nil {
				c = model.NewClient(model.Provider{Name: "t", BaseURL: s.URL()}, tc.opts...)
				defer c.CloseIdleConnections()
			}
			n := s.Count()
			if _, err := c.Complete(context.Background(), tc.req, nil); err != nil {
				t.Fatal(err)
			}
			got := s.Requests()[n].Body
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("body\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestInvalidRequest(t *testing.T) {
	s, c := newServer(t, testKey)
	cases := map[string]model.Request{
		"no model":          {Messages: []model.Message{{Role: model.RoleUser}}},
		"no messages":       {Model: "m"},
		"bad role":          {Model: "m", Messages: []model.Message{{Role: "robot"}}},
		"tool call on user": {Model: "m", Messages: []model.Message{{Role: model.RoleUser, ToolCalls: []model.ToolCall{{Name: "f"}}}}},
		"nameless call":     {Model: "m", Messages: []model.Message{{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "x"}}}}},
		"nameless tool":     {Model: "m", Messages: []model.Message{{Role: model.RoleUser}}, Tools: []model.Tool{{}}},
		"bad parameters":    {Model: "m", Messages: []model.Message{{Role: model.RoleUser}}, Tools: []model.Tool{{Name: "f", Parameters: json.RawMessage(`[1]`)}}},
		"negative max":      {Model: "m", Messages: []model.Message{{Role: model.RoleUser}}, MaxTokens: -1},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := c.Complete(context.Background(), req, nil)
			if e := mustCode(t, err, model.CodeRequestRejected); e.Status != 0 || e.Retryable {
				t.Fatalf("error %+v", e)
			}
		})
	}
	bad := model.NewClient(model.Provider{Name: "t", BaseURL: s.URL(), Key: testKey + "\n"})
	_, err := bad.Complete(context.Background(), userRequest(false), nil)
	mustCode(t, err, model.CodeRequestRejected)
	if strings.Contains(err.Error(), testKey) {
		t.Fatalf("error reveals the key: %v", err)
	}
	badURL := model.NewClient(model.Provider{Name: "t", BaseURL: "http://[::1"})
	_, err = badURL.Complete(context.Background(), userRequest(false), nil)
	mustCode(t, err, model.CodeRequestRejected)
	if s.Count() != 0 {
		t.Fatalf("%d invalid requests were sent", s.Count())
	}
}

func TestStatusErrors(t *testing.T) {
	cases := []struct {
		name       string
		reply      modeltest.Reply
		code       string
		retryable  bool
		retryAfter time.Duration
		text       string
	}{
		{"401", modeltest.Reply{Status: 401, ErrorBody: `{"error":{"message":"Incorrect API key"}}`}, model.CodeAuthFailed, false, 0, "Incorrect API key"},
		{"403", modeltest.Reply{Status: 403}, model.CodeAuthFailed, false, 0, "HTTP 403"},
		{"404", modeltest.Reply{Status: 404, ErrorBody: `{"error":"model \"m1\" not found, try pulling it first"}`}, model.CodeNotFound, false, 0, `model "m1" not found`},
		{"429 seconds", modeltest.Reply{Status: 429, Header: http.Header{"Retry-After": {"7"}}}, model.CodeRateLimited, true, 7 * time.Second, "HTTP 429"},
		{"429 huge", modeltest.Reply{Status: 429, Header: http.Header{"Retry-After": {"99999999999999999"}}}, model.CodeRateLimited, true, 24 * time.Hour, ""},
		{"429 date in past", modeltest.Reply{Status: 429, Header: http.Header{"Retry-After": {"Wed, 21 Oct 2015 07:28:00 GMT"}}}, model.CodeRateLimited, true, 0, ""},
		{"429 garbage", modeltest.Reply{Status: 429, Header: http.Header{"Retry-After": {"soon"}}}, model.CodeRateLimited, true, 0, ""},
		{"400", modeltest.Reply{Status: 400, ErrorBody: `{"error":{"message":"Unsupported parameter: 'max_tokens'","type":"invalid_request_error"}}`}, model.CodeRequestRejected, false, 0, "Unsupported parameter"},
		{"422 top-level message", modeltest.Reply{Status: 422, ErrorBody: `{"message":"bad input"}`}, model.CodeRequestRejected, false, 0, "bad input"},
		{"413 html", modeltest.Reply{Status: 413, ErrorBody: "<html>\n<b>Too\tLarge</b></html>"}, model.CodeRequestRejected, false, 0, "<html> <b>Too Large</b></html>"},
		{"302", modeltest.Reply{Status: 302, Header: http.Header{"Location": {"http://elsewhere/v1"}}}, model.CodeRequestRejected, false, 0, "redirects are not followed"},
		{"500", modeltest.Reply{Status: 500}, model.CodeUnavailable, true, 0, "HTTP 500"},
		{"503", modeltest.Reply{Status: 503, ErrorBody: "Service Unavailable"}, model.CodeUnavailable, true, 0, "Service Unavailable"},
		{"long message truncated", modeltest.Reply{Status: 400, ErrorBody: `{"error":{"message":"` + strings.Repeat("é", 600) + `"}}`}, model.CodeRequestRejected, false, 0, strings.Repeat("é", 256) + "…"},
		{"200 with error body", modeltest.Reply{Raw: `{"error":{"message":"model crashed"}}`}, model.CodeUnavailable, true, 0, "model crashed"},
		{"200 with coded error body", modeltest.Reply{Raw: `{"error":{"message":"ctx too long","code":400}}`}, model.CodeRequestRejected, false, 0, "ctx too long"},
		{"bad JSON", modeltest.Reply{Raw: `{"choices":[`}, model.CodeResponseInvalid, false, 0, ""},
		{"no choices", modeltest.Reply{Raw: `{"choices":[]}`}, model.CodeResponseInvalid, false, 0, "no choices"},
		{"choice without message", modeltest.Reply{Raw: `{"choices":[{"index":0,"delta":{}}]}`}, model.CodeResponseInvalid, false, 0, ""},
		{"arguments not an object", modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "a", Name: "f", Arguments: `"x"`}}}, model.CodeResponseInvalid, false, 0, "not a JSON object"},
		{"arguments truncated", modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "a", Name: "f", Arguments: `{"a":`}}}, model.CodeResponseInvalid, false, 0, ""},
		{"empty body", modeltest.Reply{Raw: " "}, model.CodeResponseInvalid, false, 0, ""},
	}
	for _, stream := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				if stream && tc.reply.Raw != "" {
					tc.reply.RawContentType = "application/json"
				}
				s, c := newServer(t, testKey)
				s.Push(tc.reply)
				var rec recorder
				_, err := c.Complete(context.Background(), userRequest(stream), rec.add)
				e := mustCode(t, err, tc.code)
				if e.Retryable != tc.retryable || e.RetryAfter != tc.retryAfter {
					t.Fatalf("error %+v", e)
				}
				if tc.reply.Status != 0 && e.Status != tc.reply.Status {
					t.Fatalf("status %d, want %d", e.Status, tc.reply.Status)
				}
				if !strings.Contains(e.Message, tc.text) {
					t.Fatalf("message %q lacks %q", e.Message, tc.text)
				}
				if len(e.Message) > 700 {
					t.Fatalf("message of %d bytes", len(e.Message))
				}
			})
		}
	}
}

func TestLimits(t *testing.T) {
	big := strings.Repeat("x", 4000)
	args := `{"a":"` + strings.Repeat("y", 300) + `"}`
	many := make([]model.ToolCall, 5)
	for i := range many {
		many[i] = model.ToolCall{ID: fmt.Sprint(i), Name: "f", Arguments: "{}"}
	}
	cases := []struct {
		name  string
		reply modeltest.Reply
		opt   model.Option
	}{
		{"response bytes", modeltest.Reply{Text: big, Chunk: 100}, model.WithMaxResponseBytes(2000)},
		{"line bytes", modeltest.Reply{Text: big}, model.WithMaxLineBytes(1000)},
		{"tool calls", modeltest.Reply{ToolCalls: many}, model.WithMaxToolCalls(4)},
		{"argument bytes", modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "a", Name: "f", Arguments: args}}, Chunk: 10}, model.WithMaxArgumentBytes(200)},
	}
	for _, stream := range []bool{false, true} {
		for _, tc := range cases {
			if !stream && tc.name == "line bytes" {
				continue
			}
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				s, c := newServer(t, "", tc.opt)
				s.Push(tc.reply)
				_, err := c.Complete(context.Background(), userRequest(stream), nil)
				mustCode(t, err, model.CodeResponseInvalid)
			})
		}
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := model.NewClient(model.Provider{Name: "gone", BaseURL: "http://" + addr + "/v1"})
	_, err = c.Complete(context.Background(), userRequest(true), nil)
	if e := mustCode(t, err, model.CodeUnavailable); !e.Retryable || e.Status != 0 {
		t.Fatalf("error %+v", e)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("error %v does not unwrap to the *net.OpError", err)
	}
}

func TestUntrustedCertificate(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	defer srv.Close()
	c := model.NewClient(model.Provider{Name: "tls", BaseURL: srv.URL + "/v1"})
	defer c.CloseIdleConnections()
	_, err := c.Complete(context.Background(), userRequest(false), nil)
	if e := mustCode(t, err, model.CodeUnavailable); e.Retryable {
		t.Fatalf("a refused certificate is retryable: %+v", e)
	}
}

func TestTimeouts(t *testing.T) {
	t.Run("context deadline", func(t *testing.T) {
		s, c := newServer(t, "")
		s.Push(modeltest.Reply{Text: "late", Delay: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := c.Complete(ctx, userRequest(true), nil)
		e := mustCode(t, err, model.CodeTimeout)
		if !errors.Is(err, context.DeadlineExceeded) || !e.Retryable {
			t.Fatalf("error %+v", e)
		}
	})
	t.Run("response header timeout", func(t *testing.T) {
		s := modeltest.New()
		defer s.Close()
		tr := &http.Transport{ResponseHeaderTimeout: 50 * time.Millisecond}
		defer tr.CloseIdleConnections()
		c := model.NewClient(model.Provider{Name: "t", BaseURL: s.URL()}, model.WithHTTPClient(&http.Client{Transport: tr}))
		s.Push(modeltest.Reply{Text: "late", Delay: time.Minute})
		_, err := c.Complete(context.Background(), userRequest(false), nil)
		mustCode(t, err, model.CodeTimeout)
	})
	t.Run("already expired", func(t *testing.T) {
		s, c := newServer(t, "")
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		_, err := c.Complete(ctx, userRequest(true), nil)
		mustCode(t, err, model.CodeTimeout)
		if s.Count() != 0 {
			t.Fatal("a request was sent on an expired context")
		}
	})
}

func TestCancelInFlight(t *testing.T) {
	s, c := newServer(t, "")
	hold := make(chan struct{})
	defer close(hold)
	s.Push(modeltest.Reply{Text: "never", Hold: hold})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Complete(ctx, userRequest(true), nil)
		done <- err
	}()
	<-s.Arrived(1)
	cancel()
	err := <-done
	mustCode(t, err, model.CodeCanceled)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v does not wrap context.Canceled", err)
	}
}

// TestCancelMidStream cancels after the first delta while the server keeps the stream open;
// Complete must return at once, and goleak (TestMain) checks that nothing is left running.
func TestCancelMidStream(t *testing.T) {
	handlerDone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handlerDone)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"first\"}}]}\n\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := model.NewClient(model.Provider{Name: "t", BaseURL: srv.URL + "/v1"})
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []model.Delta
	_, err := c.Complete(ctx, userRequest(true), func(d model.Delta) {
		got = append(got, d)
		cancel()
	})
	mustCode(t, err, model.CodeCanceled)
	if len(got) != 1 || got[0].Text != "first" {
		t.Fatalf("deltas %+v", got)
	}
	select {
	case <-handlerDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never saw the request end")
	}
}

// TestKeyNeverInErrors has the server echo the key back in every place an error could carry
// it from.
func TestKeyNeverInErrors(t *testing.T) {
	replies := []modeltest.Reply{
		{Status: 401, ErrorBody: `{"error":{"message":"Incorrect API key provided: ` + testKey + `.","type":"invalid_request_error"}}`},
		{Status: 400, ErrorBody: `{"error":"bad key ` + testKey + `"}`},
		{Status: 429, ErrorBody: `{"message":"` + testKey + `"}`},
		{Status: 500, ErrorBody: "plain text " + testKey + " " + strings.Repeat("z", 490) + testKey},
		{Status: 400, ErrorBody: `{"error":{"message":"` + strings.Repeat("p", 500) + testKey + `"}}`},
		{Status: 400, ErrorBody: `{"detail":"` + testKey + `"}`},
		{Raw: `{"error":{"message":"in body ` + testKey + `"}}`},
		{Raw: `{"error":{"message":"in body ` + testKey + `","code":401}}`},
		{Raw: "data: {\"error\":{\"message\":\"stream " + testKey + "\"}}\n\n", RawContentType: "text/event-stream"},
		{Raw: "event: error\ndata: " + testKey + "\n\n", RawContentType: "text/event-stream"},
	}
	s, c := newServer(t, testKey)
	for i, r := range replies {
		s.Push(r)
		_, err := c.Complete(context.Background(), userRequest(i%2 == 0), nil)
		if err == nil {
			t.Fatalf("reply %d: no error", i)
		}
		texts := []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)}
		for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(u) {
			texts = append(texts, u.Error())
		}
		for _, txt := range texts {
			if strings.Contains(txt, testKey) || strings.Contains(txt, "SECRET") {
				t.Fatalf("reply %d: error reveals the key: %s", i, txt)
			}
		}
	}
}

// stallingBody sends one chunk and then nothing until the request's context ends, as a wedged
// provider does once its headers and first token went out; like net/http's transport, the
// context's end fails the read.
type stallingBody struct {
	ctx   context.Context
	first io.Reader
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if n, _ := b.first.Read(p); n > 0 {
		return n, nil
	}
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}

func (b *stallingBody) Close() error { return nil }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestBodyIdleTimeout: a provider that stopped sending in the middle of its answer held the
// turn until an operator aborted it, since only the headers had a deadline. The body's silence
// is bounded too, by a timer each read restarts: a stream that keeps sending is never cut,
// a silent one fails model_timeout (retryable), and the caller's own cancel keeps its code.
func TestBodyIdleTimeout(t *testing.T) {
	const idle = time.Minute
	chunk := `data: {"choices":[{"index":0,"delta":{"content":"hel"}}]}` + "\n\n"
	stalling := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: &stallingBody{ctx: r.Context(), first: strings.NewReader(chunk)}, Request: r}, nil
	})
	newClient := func(rt http.RoundTripper) *model.Client {
		return model.NewClient(model.Provider{Name: "p", BaseURL: "http://model.invalid/v1"},
			model.WithHTTPClient(&http.Client{Transport: rt}), model.WithBodyIdleTimeout(idle))
	}

	t.Run("silent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			_, err := newClient(stalling).Complete(t.Context(), userRequest(true), nil)
			var me *model.Error
			if !errors.As(err, &me) || me.Code != model.CodeTimeout || !me.Retryable {
				t.Fatalf("err = %v, want a retryable %s", err, model.CodeTimeout)
			}
			if waited := time.Since(start); waited != idle {
				t.Fatalf("failed after %v, want %v", waited, idle)
			}
		})
	})

	t.Run("slow but steady", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// A chunk every 50 s, 10 of them: longer than the idle timeout in all, never silent for it.
			steady := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				pr, pw := io.Pipe()
				go func() {
					for range 10 {
						time.Sleep(50 * time.Second)
						pw.Write([]byte(chunk))
					}
					pw.Write([]byte(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"))
					pw.Close()
				}()
				return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: pr, Request: r}, nil
			})
			resp, err := newClient(steady).Complete(t.Context(), userRequest(true), nil)
			if err != nil || resp.Message.Content != strings.Repeat("hel", 10) {
				t.Fatalf("Complete = %q, %v", resp.Message.Content, err)
			}
		})
	})

	t.Run("caller cancels", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(idle/2, cancel)
			_, err := newClient(stalling).Complete(ctx, userRequest(true), nil)
			var me *model.Error
			if !errors.As(err, &me) || me.Code != model.CodeCanceled {
				t.Fatalf("err = %v, want %s", err, model.CodeCanceled)
			}
		})
	})
}

// TestWebPageIsNotTheAPI: a 200 answer that is a web page (a server's UI or a proxy's page at
// a base URL that is not the API's) fails model_not_found, not retryable, saying to check the
// base URL; before, it read as a stream that ended early (model_unavailable, retryable).
func TestWebPageIsNotTheAPI(t *testing.T) {
	for _, stream := range []bool{true, false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, "<!doctype html><title>Welcome</title><p>It works.</p>")
		}))
		c := model.NewClient(model.Provider{Name: "t", BaseURL: srv.URL})
		_, err := c.Complete(context.Background(), userRequest(stream), nil)
		c.CloseIdleConnections()
		srv.Close()
		mustCode(t, err, model.CodeNotFound)
		var me *model.Error
		if !errors.As(err, &me) || me.Retryable || me.Status != 200 || !strings.Contains(me.Message, "base URL") {
			t.Fatalf("stream %v: %+v", stream, me)
		}
	}
}
