package model

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

var testLimits = limits{
	maxResponseBytes: DefaultMaxResponseBytes,
	maxLineBytes:     DefaultMaxLineBytes,
	maxToolCalls:     DefaultMaxToolCalls,
	maxArgumentBytes: DefaultMaxArgumentBytes,
}

// decodeAll decodes a stream given whole and one byte at a time, checks that both agree,
// and returns the result with the deltas seen.
func decodeAll(t *testing.T, body string, lim limits) (Response, []Delta, error) {
	t.Helper()
	var deltas []Delta
	resp, err := decodeStream(strings.NewReader(body), lim, scrubber{}, func(d Delta) { deltas = append(deltas, d) })
	var deltas1 []Delta
	resp1, err1 := decodeStream(iotest.OneByteReader(strings.NewReader(body)), lim, scrubber{}, func(d Delta) { deltas1 = append(deltas1, d) })
	if !reflect.DeepEqual(resp, resp1) || !reflect.DeepEqual(deltas, deltas1) || !sameErr(err, err1) {
		t.Fatalf("whole and byte-wise reads differ:\n%+v %v\n%+v %v", resp, err, resp1, err1)
	}
	return resp, deltas, err
}

func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

func codeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func sse(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	return b.String()
}

func TestStreamText(t *testing.T) {
	body := sse(
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":"lo, wörld"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
		`[DONE]`,
	)
	resp, deltas, err := decodeAll(t, body, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	want := Response{
		Message:      Message{Role: RoleAssistant, Content: "Hello, wörld"},
		FinishReason: "stop",
		Usage:        Usage{3, 2, 5},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("got %+v\nwant %+v", resp, want)
	}
	if !reflect.DeepEqual(deltas, []Delta{{Text: "Hel"}, {Text: "lo, wörld"}}) {
		t.Fatalf("deltas %+v", deltas)
	}
}

func TestStreamToolCalls(t *testing.T) {
	body := sse(
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"write","arguments":"{\"x\""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"a\"}"}},{"index":1,"function":{"arguments":":1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"type":"function","function":{"name":"noargs"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`[DONE]`,
	)
	resp, deltas, err := decodeAll(t, body, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	want := []ToolCall{
		{ID: "call_a", Name: "read", Arguments: `{"path":"a"}`},
		{ID: "call_b", Name: "write", Arguments: `{"x":1}`},
		{ID: "call_2", Name: "noargs", Arguments: `{}`},
	}
	if !reflect.DeepEqual(resp.Message.ToolCalls, want) || resp.FinishReason != "tool_calls" {
		t.Fatalf("got %+v", resp)
	}
	wantDeltas := []Delta{
		{ToolCallIndex: 0, ToolCallID: "call_a", ToolCallName: "read"},
		{ToolCallIndex: 1, ToolCallID: "call_b", ToolCallName: "write"},
		{ToolCallIndex: 2, ToolCallID: "call_2", ToolCallName: "noargs"},
	}
	if !reflect.DeepEqual(deltas, wantDeltas) {
		t.Fatalf("deltas %+v", deltas)
	}
}

func TestStreamToolCallsWithoutIndex(t *testing.T) {
	body := sse(
		`{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"k\":"}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"1}"}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":{"o":true}}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g"}}]}}],"finish_reason":"tool_calls"}`,
		`[DONE]`,
	)
	resp, _, err := decodeAll(t, body, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	want := []ToolCall{{ID: "a", Name: "f", Arguments: `{"k":1}`}, {ID: "b", Name: "g", Arguments: `{"o":true}`}}
	if !reflect.DeepEqual(resp.Message.ToolCalls, want) {
		t.Fatalf("got %+v", resp.Message.ToolCalls)
	}
}

func TestStreamFraming(t *testing.T) {
	const text = `{"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}`
	cases := []struct{ name, body string }{
		{"LF", "data: " + text + "\n\ndata: [DONE]\n\n"},
		{"CRLF", "data: " + text + "\r\n\r\ndata: [DONE]\r\n\r\n"},
		{"CR", "data: " + text + "\r\rdata: [DONE]\r\r"},
		{"no space after colon", "data:" + text + "\n\ndata:[DONE]\n\n"},
		{"BOM", "\xef\xbb\xbfdata: " + text + "\n\ndata: [DONE]\n\n"},
		{"comments and other fields", ": keep-alive\nid: 7\nretry: 100\nevent: message\nfoo\ndata: " + text + "\n\n: ping\n\ndata: [DONE]\n\n"},
		{"multi-line data", "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"hi\"},\r\ndata: \"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"},
		{"DONE without blank line", "data: " + text + "\n\ndata: [DONE]"},
		{"EOF after finish", "data: " + text + "\n\n"},
		{"blank events", "\n\n\r\n" + "data: " + text + "\n\n\n\ndata: [DONE]\n\n"},
		{"data after DONE ignored", "data: " + text + "\n\ndata: [DONE]\n\ndata: {not json\n\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, _, err := decodeAll(t, tc.body, testLimits)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Content != "hi" || resp.FinishReason != "stop" {
				t.Fatalf("got %+v", resp)
			}
		})
	}
}

func TestStreamErrors(t *testing.T) {
	small := testLimits
	small.maxLineBytes = 64
	small.maxToolCalls = 2
	small.maxArgumentBytes = 8
	call := func(i int, args string) string {
		return `{"choices":[{"delta":{"tool_calls":[{"index":` + string(rune('0'+i)) + `,"function":{"name":"f","arguments":"` + args + `"}}]}}]}`
	}
	cases := []struct {
		name, body, code string
		lim              limits
	}{
		{"empty", "", CodeUnavailable, testLimits},
		{"truncated", sse(`{"choices":[{"delta":{"content":"a"}}]}`), CodeUnavailable, testLimits},
		{"partial event at EOF", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}", CodeUnavailable, testLimits},
		{"not JSON", sse(`{nope`), CodeResponseInvalid, testLimits},
		{"JSON not an object", sse(`[1]`), CodeResponseInvalid, testLimits},
		{"no choices", sse(`{"choices":[]}`, `[DONE]`), CodeResponseInvalid, testLimits},
		{"only other choice", sse(`{"choices":[{"index":1,"delta":{"content":"a"}}]}`, `[DONE]`), CodeResponseInvalid, testLimits},
		{"in-stream error", sse(`{"error":{"message":"overloaded"}}`), CodeUnavailable, testLimits},
		{"in-stream error with code", sse(`{"error":{"message":"bad","code":400}}`), CodeRequestRejected, testLimits},
		{"in-stream error string code", sse(`{"error":{"message":"slow","code":"429"}}`), CodeRateLimited, testLimits},
		{"error event", "event: error\ndata: {\"message\":\"boom\"}\n\n", CodeUnavailable, testLimits},
		{"error event not JSON", "event: error\ndata: boom\n\n", CodeUnavailable, testLimits},
		{"line too long", "data: " + strings.Repeat("x", 64) + "\n\n", CodeResponseInvalid, small},
		{"event too long", strings.Repeat("data: xxxxxxxxxx\n", 8) + "\n", CodeResponseInvalid, small},
		{"comment too long", ":" + strings.Repeat("x", 100) + "\n", CodeResponseInvalid, small},
		{"too many tool calls", sse(call(0, ""), call(1, ""), call(2, "")), CodeResponseInvalid, small},
		{"huge index", sse(`{"choices":[{"delta":{"tool_calls":[{"index":1000000000,"function":{"name":"f"}}]}}]}`), CodeResponseInvalid, testLimits},
		{"negative index", sse(`{"choices":[{"delta":{"tool_calls":[{"index":-1,"function":{"name":"f"}}]}}]}`), CodeResponseInvalid, testLimits},
		{"arguments too long", sse(call(0, "{}"), call(0, "1234567")), CodeResponseInvalid, small},
		{"arguments not an object", sse(call(0, "[1]"), `{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`, `[DONE]`), CodeResponseInvalid, testLimits},
		{"arguments not JSON", sse(call(0, "{"), `[DONE]`), CodeResponseInvalid, testLimits},
		{"arguments a number", sse(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":5}}]}}]}`), CodeResponseInvalid, testLimits},
		{"tool call without name", sse(`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"x","function":{"arguments":"{}"}}]}}]}`, `[DONE]`), CodeResponseInvalid, testLimits},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeAll(t, tc.body, tc.lim)
			if got := codeOf(err); got != tc.code {
				t.Fatalf("error %v (code %q), want %s", err, got, tc.code)
			}
		})
	}
}

// TestStreamReadError checks that a failed read is returned as is, for Complete to classify.
func TestStreamReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: {\"choices\":[]}\n\n"), iotest.ErrReader(boom))
	_, err := decodeStream(r, testLimits, scrubber{}, nil)
	if err != boom {
		t.Fatalf("got %v, want the read error", err)
	}
}
