package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

// Seeds live in testdata/fuzz/<FuzzName>; `go test` runs them, `go test -fuzz` grows them.

// fuzzLimits are small, so that the fuzzer reaches every limit with short inputs.
var fuzzLimits = limits{maxResponseBytes: 1 << 16, maxLineBytes: 512, maxToolCalls: 4, maxArgumentBytes: 128}

var knownCodes = []string{
	CodeUnavailable, CodeAuthFailed, CodeRateLimited, CodeNotFound,
	CodeRequestRejected, CodeResponseInvalid, CodeTimeout, CodeCanceled,
}

// checkResult asserts what holds for any decoded body: a typed error with a known code, or
// a response within the limits whose deltas tell the same story.
func checkResult(t *testing.T, data []byte, resp Response, deltas []Delta, err error) {
	t.Helper()
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("untyped error %T: %v", err, err)
		}
		if !slices.Contains(knownCodes, e.Code) {
			t.Fatalf("unknown code %q", e.Code)
		}
		if e.Code == CodeTimeout || e.Code == CodeCanceled || e.Status != 0 {
			t.Fatalf("impossible error for a body: %+v", e)
		}
		return
	}
	m := resp.Message
	if m.Role != RoleAssistant || m.ToolCallID != "" {
		t.Fatalf("message %+v", m)
	}
	if !utf8.ValidString(m.Content) {
		t.Fatalf("content is not valid UTF-8: %q", m.Content)
	}
	// Decoding replaces each invalid UTF-8 byte with U+FFFD, 3 bytes: the only growth.
	if len(m.Content) > 3*len(data) {
		t.Fatalf("content of %d bytes from %d", len(m.Content), len(data))
	}
	if len(m.ToolCalls) > fuzzLimits.maxToolCalls {
		t.Fatalf("%d tool calls over the limit", len(m.ToolCalls))
	}
	ids := map[string]bool{}
	for _, tc := range m.ToolCalls {
		switch {
		case tc.ID == "" || tc.Name == "":
			t.Fatalf("tool call without id or name: %+v", tc)
		case len(tc.Arguments) > fuzzLimits.maxArgumentBytes:
			t.Fatalf("arguments of %d bytes over the limit", len(tc.Arguments))
		case !utf8.ValidString(tc.ID + tc.Name + tc.Arguments):
			t.Fatalf("tool call not valid UTF-8: %+v", tc)
		case !isJSONObject([]byte(tc.Arguments)):
			t.Fatalf("arguments not a JSON object: %q", tc.Arguments)
		}
		ids[tc.ID] = true
	}
	var text []byte
	var starts []Delta
	for _, d := range deltas {
		if (d.Text == "") == (d.ToolCallName == "") {
			t.Fatalf("delta is neither text nor a tool call start: %+v", d)
		}
		text = append(text, d.Text...)
		if d.ToolCallName != "" {
			starts = append(starts, d)
		}
	}
	if string(text) != m.Content {
		t.Fatalf("deltas %q, content %q", text, m.Content)
	}
	slices.SortStableFunc(starts, func(a, b Delta) int { return a.ToolCallIndex - b.ToolCallIndex })
	if len(starts) != len(m.ToolCalls) {
		t.Fatalf("%d starts for %d tool calls", len(starts), len(m.ToolCalls))
	}
	for i, s := range starts {
		if i > 0 && s.ToolCallIndex == starts[i-1].ToolCallIndex {
			t.Fatalf("two starts for index %d", s.ToolCallIndex)
		}
		if tc := m.ToolCalls[i]; tc.ID != s.ToolCallID || tc.Name != s.ToolCallName {
			t.Fatalf("start %+v, tool call %+v", s, tc)
		}
	}
}

func FuzzSSE(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var deltas []Delta
		resp, err := decodeStream(bytes.NewReader(data), fuzzLimits, scrubber{}, func(d Delta) { deltas = append(deltas, d) })
		checkResult(t, data, resp, deltas, err)

		// The result does not depend on how the bytes arrive.
		var deltas1 []Delta
		resp1, err1 := decodeStream(iotest.OneByteReader(bytes.NewReader(data)), fuzzLimits, scrubber{}, func(d Delta) { deltas1 = append(deltas1, d) })
		if !reflect.DeepEqual(resp, resp1) || !reflect.DeepEqual(deltas, deltas1) || !sameErr(err, err1) {
			t.Fatalf("whole and byte-wise reads differ:\n%+v %v\n%+v %v", resp, err, resp1, err1)
		}
	})
}

func FuzzDecodeCompletion(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := decodeCompletion(data, fuzzLimits, scrubber{})
		var deltas []Delta
		if err == nil {
			emitResponse(resp, func(d Delta) { deltas = append(deltas, d) })
		}
		checkResult(t, data, resp, deltas, err)

		// A success re-encodes to a body that decodes to the same response.
		if err == nil {
			again, err := decodeCompletion(reencode(t, resp), fuzzLimits, scrubber{})
			if err != nil || !reflect.DeepEqual(again, resp) {
				t.Fatalf("re-encoded response decodes to %+v, %v; want %+v", again, err, resp)
			}
		}
	})
}

// reencode writes resp as a provider would.
func reencode(t *testing.T, resp Response) []byte {
	t.Helper()
	msg := wireContent{Content: &resp.Message.Content}
	for _, tc := range resp.Message.ToolCalls {
		args, _ := json.Marshal(tc.Arguments)
		msg.ToolCalls = append(msg.ToolCalls, wireToolCall{ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: args}})
	}
	finish := resp.FinishReason
	w := wireCompletion{
		Choices: []wireChoice{{Message: &msg, FinishReason: &finish}},
		Usage:   &wireUsage{resp.Usage.PromptTokens, resp.Usage.CompletionTokens, resp.Usage.TotalTokens},
	}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
