package modeltest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newClient(t *testing.T, s *Server) *model.Client {
	t.Helper()
	c := model.NewClient(model.Provider{Name: "t", BaseURL: s.URL(), Key: "k"})
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func ask(text string, stream bool) model.Request {
	return model.Request{Model: "m", Messages: []model.Message{{Role: model.RoleUser, Content: text}}, Stream: stream}
}

func TestScriptInOrder(t *testing.T) {
	s := New()
	defer s.Close()
	c := newClient(t, s)
	if !strings.HasSuffix(s.URL(), "/v1") {
		t.Fatalf("URL %q", s.URL())
	}
	select {
	case <-s.Arrived(1):
		t.Fatal("Arrived(1) closed before any request")
	default:
	}
	s.Push(Reply{Text: "one"}, Reply{Text: "two", Chunk: 1})
	if s.Pending() != 2 {
		t.Fatalf("pending %d", s.Pending())
	}
	for i, want := range []string{"one", "two"} {
		resp, err := c.Complete(context.Background(), ask("q"+want, i == 1), nil)
		if err != nil || resp.Message.Content != want {
			t.Fatalf("reply %d: %+v, %v", i, resp, err)
		}
	}
	<-s.Arrived(2) // already arrived: closed at once
	if s.Count() != 2 || s.Pending() != 0 {
		t.Fatalf("count %d, pending %d", s.Count(), s.Pending())
	}
	got := s.Requests()
	if got[0].LastUserText() != "qone" || got[1].LastUserText() != "qtwo" || got[0].Authorization != "Bearer k" || !got[1].Request.Stream || got[0].Request.Stream {
		t.Fatalf("requests %+v", got)
	}

	// The queue is empty: the default reply fails loudly.
	_, err := c.Complete(context.Background(), ask("more", false), nil)
	var e *model.Error
	if !errors.As(err, &e) || e.Status != 500 || !strings.Contains(e.Message, "no scripted reply") {
		t.Fatalf("unscripted call: %v", err)
	}
	s.SetDefault(Reply{Text: "fallback"})
	if resp, err := c.Complete(context.Background(), ask("x", true), nil); err != nil || resp.Message.Content != "fallback" {
		t.Fatalf("default: %+v, %v", resp, err)
	}
}

func TestToolCallsBothModes(t *testing.T) {
	s := New()
	defer s.Close()
	c := newClient(t, s)
	calls := []model.ToolCall{{ID: "a", Name: "f", Arguments: `{"x":"ü€"}`}, {Name: "g"}}
	for _, stream := range []bool{false, true} {
		s.Push(Reply{ToolCalls: calls, Chunk: 2, Usage: model.Usage{PromptTokens: 4, CompletionTokens: 2, TotalTokens: 6}})
		resp, err := c.Complete(context.Background(), ask("go", stream), nil)
		if err != nil {
			t.Fatal(err)
		}
		want := model.Response{
			Message:      model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{calls[0], {ID: "call_1", Name: "g", Arguments: "{}"}}},
			FinishReason: "tool_calls",
			Usage:        model.Usage{PromptTokens: 4, CompletionTokens: 2, TotalTokens: 6},
		}
		if !reflect.DeepEqual(resp, want) {
			t.Fatalf("stream=%v: %+v", stream, resp)
		}
	}
}

func TestStreamWireFormat(t *testing.T) {
	s := New()
	defer s.Close()
	s.Push(Reply{Text: "abc", Chunk: 2, FinishReason: "length"})
	hc := s.Client()
	defer hc.CloseIdleConnections()
	res, err := hc.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	b := string(body)
	for _, want := range []string{`"delta":{"content":"ab"}`, `"delta":{"content":"c"}`, `"finish_reason":"length"`, "data: [DONE]\n\n"} {
		if !strings.Contains(b, want) {
			t.Fatalf("stream lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(b, `"usage"`) {
		t.Fatalf("usage sent without include_usage:\n%s", b)
	}
}

func TestRouting(t *testing.T) {
	s := New()
	defer s.Close()
	hc := s.Client()
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/v1/chat/completions", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/completions", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tc.method, s.srv.URL+tc.path, strings.NewReader("{}"))
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Fatalf("%s %s: %d", tc.method, tc.path, res.StatusCode)
		}
	}
	if s.Count() != 0 {
		t.Fatalf("misrouted requests were recorded")
	}
}

func TestHoldAndRelease(t *testing.T) {
	s := New()
	defer s.Close()
	c := newClient(t, s)
	hold := make(chan struct{})
	s.Push(Reply{Text: "held", Hold: hold})
	done := make(chan error, 1)
	go func() {
		resp, err := c.Complete(context.Background(), ask("x", true), nil)
		if err == nil && resp.Message.Content != "held" {
			err = errors.New("wrong content " + resp.Message.Content)
		}
		done <- err
	}()
	<-s.Arrived(1)
	select {
	case err := <-done:
		t.Fatalf("held call returned: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCloseReleasesHeld checks that Close does not wait for a held reply, and that the
// client then sees the provider as gone.
func TestCloseReleasesHeld(t *testing.T) {
	s := New()
	c := newClient(t, s)
	s.Push(Reply{Text: "never", Hold: make(chan struct{})}, Reply{Delay: time.Hour})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Complete(context.Background(), ask("x", true), nil)
			errs <- err
		}()
	}
	<-s.Arrived(2)
	s.Close()
	s.Close() // idempotent
	for range 2 {
		var e *model.Error
		if err := <-errs; !errors.As(err, &e) || e.Code != model.CodeUnavailable {
			t.Fatalf("after Close: %v", err)
		}
	}
}

func TestConcurrentRequests(t *testing.T) {
	s := New()
	defer s.Close()
	c := newClient(t, s)
	const n = 16
	s.SetDefault(Reply{Text: "same", Chunk: 1})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := c.Complete(context.Background(), ask("x", i%2 == 0), nil); err != nil {
				t.Error(err)
			}
			_ = s.Requests()
		})
	}
	<-s.Arrived(n)
	wg.Wait()
	if s.Count() != n {
		t.Fatalf("count %d", s.Count())
	}
}

func TestSplit(t *testing.T) {
	cases := []struct {
		s    string
		n    int
		want []string
	}{
		{"", 3, nil},
		{"abc", 0, []string{"abc"}},
		{"abcdef", 4, []string{"abcd", "ef"}},
		{"aé", 2, []string{"a", "é"}},
		{"€€", 1, []string{"€", "€"}},
		{"a€b", 2, []string{"a", "€", "b"}},
	}
	for _, tc := range cases {
		if got := split(tc.s, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("split(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
