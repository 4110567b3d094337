package capadapter

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/airlockhq/airlock/internal/ndjson"
)

func TestEncodeRequestKeySets(t *testing.T) {
	cases := []struct {
		name string
		req  Request
		want string
	}{
		{"list", Request{Method: MethodList}, `{"protocolVersion":1,"id":"7","method":"list"}`},
		{"describe", Request{Method: MethodDescribe, CapabilityID: "living_room_light"}, `{"protocolVersion":1,"id":"7","method":"describe","capabilityId":"living_room_light"}`},
		{"observe", Request{Method: MethodObserve, CapabilityID: "x"}, `{"protocolVersion":1,"id":"7","method":"observe","capabilityId":"x"}`},
		{"invoke", Request{Method: MethodInvoke, CapabilityID: "x", Action: "set_led", Args: json.RawMessage(`{ "color" : "#123456" }`)},
			`{"protocolVersion":1,"id":"7","method":"invoke","capabilityId":"x","action":"set_led","args":{"color":"#123456"}}`},
		{"invoke empty args", Request{Method: MethodInvoke, CapabilityID: "x", Action: "a"}, `{"protocolVersion":1,"id":"7","method":"invoke","capabilityId":"x","action":"a","args":{}}`},
		{"list ignores args", Request{Method: MethodList, Args: json.RawMessage(`{}`), Action: "a"}, `{"protocolVersion":1,"id":"7","method":"list"}`},
		{"probe version", Request{ProtocolVersion: 2, Method: MethodList}, `{"protocolVersion":2,"id":"7","method":"list"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EncodeRequest(tc.req, "7")
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want+"\n" {
				t.Fatalf("frame = %s, want %s", got, tc.want)
			}
		})
	}
	_, err := EncodeRequest(Request{Method: MethodInvoke, Args: json.RawMessage(`{`)}, "1")
	wantCode(t, err, CodeInvalidArgs)
	_, err = EncodeRequest(Request{Method: MethodObserve, CapabilityID: strings.Repeat("a", MaxFrameBytes)}, "1")
	wantCode(t, err, CodeTooLarge)
}

func TestDecodeResponse(t *testing.T) {
	ok := []struct {
		name, frame string
		want        Response
	}{
		{"result", `{"protocolVersion":1,"id":"7","result":{"a":1}}`, Response{ID: "7", Result: json.RawMessage(`{"a":1}`)}},
		{"null result", `{"protocolVersion":1,"id":"7","result":null}`, Response{ID: "7", Result: json.RawMessage(`null`)}},
		{"error", `{"protocolVersion":1,"id":"7","error":{"code":"unsupported_action"}}`, Response{ID: "7", ErrorCode: "unsupported_action"}},
		{"order and space", ` { "result" : [] , "id":"7", "protocolVersion" : 1 } ` + "\r", Response{ID: "7", Result: json.RawMessage(`[]`)}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeResponse([]byte(tc.frame), "7")
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tc.want.ID || string(got.Result) != string(tc.want.Result) || got.ErrorCode != tc.want.ErrorCode {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	bad := []struct{ name, frame string }{
		{"not json", `not-json`},
		{"array", `[]`},
		{"trailing", `{"protocolVersion":1,"id":"7","result":1} {}`},
		{"wrong version", `{"protocolVersion":2,"id":"7","result":1}`},
		{"version 1.0", `{"protocolVersion":1.0,"id":"7","result":1}`},
		{"version string", `{"protocolVersion":"1","id":"7","result":1}`},
		{"no version", `{"id":"7","result":1}`},
		{"wrong id", `{"protocolVersion":1,"id":"8","result":1}`},
		{"numeric id", `{"protocolVersion":1,"id":7,"result":1}`},
		{"no id", `{"protocolVersion":1,"result":1}`},
		{"both", `{"protocolVersion":1,"id":"7","result":1,"error":{"code":"internal"}}`},
		{"neither", `{"protocolVersion":1,"id":"7"}`},
		{"unknown key", `{"protocolVersion":1,"id":"7","result":1,"extra":true}`},
		{"duplicate key", `{"protocolVersion":1,"id":"7","id":"7","result":1}`},
		{"case variant", `{"protocolVersion":1,"ID":"7","result":1}`},
		{"duplicate in result", `{"protocolVersion":1,"id":"7","result":{"a":1,"a":2}}`},
		// Client.answer relies on these two: it screens a result without checking its JSON again.
		{"duplicate deep in result", `{"protocolVersion":1,"id":"7","result":{"a":[{"b":{"c":1,"\u0063":2}}]}}`},
		{"syntax deep in result", `{"protocolVersion":1,"id":"7","result":{"a":[{"b":[1,]}]}}`},
		{"unknown code", `{"protocolVersion":1,"id":"7","error":{"code":"nope"}}`},
		{"empty code", `{"protocolVersion":1,"id":"7","error":{"code":""}}`},
		{"error extra key", `{"protocolVersion":1,"id":"7","error":{"code":"internal","message":"x"}}`},
		{"error not object", `{"protocolVersion":1,"id":"7","error":"internal"}`},
		{"error null", `{"protocolVersion":1,"id":"7","error":null}`},
		{"invalid utf8", "{\"protocolVersion\":1,\"id\":\"7\",\"result\":\"\xff\"}"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeResponse([]byte(tc.frame), "7")
			wantCode(t, err, CodeMalformedResponse)
		})
	}
}

// TestDecodeResponseSaysWhy: a response that is not a strict envelope is refused saying what
// is wrong with it, so that an author who printed a banner to stdout, or added a key, can
// tell.
func TestDecodeResponseSaysWhy(t *testing.T) {
	for _, tc := range []struct{ frame, want string }{
		{`adapter starting`, "print logs to stderr"},
		{`{"protocolVersion":1,"id":"7","result":{"a":[1,]}}`, "not one well-formed JSON object"},
		{`[]`, "not a protocol envelope object"},
		{`{"protocolVersion":1,"id":"7","id":"7","result":1}`, "duplicated key"},
		{`{"protocolVersion":1,"id":"7","result":{"a":1,"a":2}}`, "duplicated key"},
		{`{"protocolVersion":1,"ID":"7","result":1}`, "differs only in case"},
		{`{"protocolVersion":1,"id":"7","result":1,"message":"x"}`, "a key other than protocolVersion, id, result and error"},
	} {
		_, err := DecodeResponse([]byte(tc.frame), "7")
		wantCode(t, err, CodeMalformedResponse)
		if e, ok := err.(*Error); !ok || !strings.Contains(e.Detail, tc.want) || strings.Contains(e.Detail, "message") {
			t.Errorf("%s: %v, want a detail saying %q (and quoting nothing)", tc.frame, err, tc.want)
		}
	}
}

func TestFrameReaderBounds(t *testing.T) {
	exact := strings.Repeat(" ", MaxFrameBytes-3) + "{}\n" // 65,536 bytes with the LF
	over := strings.Repeat(" ", MaxFrameBytes-2) + "{}\n"
	cases := []struct {
		name, input string
		want        []string // frames, then the final error code ("eof" for a clean end)
	}{
		{"two frames", "{\"a\":1}\n[]\n", []string{`{"a":1}`, `[]`, "eof"}},
		{"exact bound", exact, []string{exact[:len(exact)-1], "eof"}},
		{"over bound", over, []string{CodeTooLarge}},
		{"blank line", "\n{}\n", []string{CodeMalformedResponse}},
		{"unterminated", "{}", []string{CodeUnavailable}},
		{"empty", "", []string{"eof"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.input), iotest.OneByteReader(strings.NewReader(tc.input))} {
				fr := NewFrameReader(r)
				for i, want := range tc.want {
					line, err := fr.Next()
					last := i == len(tc.want)-1
					switch {
					case !last:
						if err != nil || string(line) != want {
							t.Fatalf("frame %d = %.40q, %v", i, line, err)
						}
					case want == "eof":
						if err != io.EOF {
							t.Fatalf("end = %v, want EOF", err)
						}
					default:
						wantCode(t, err, want)
					}
				}
			}
		})
	}
}

func TestWireCode(t *testing.T) {
	cases := map[string]string{
		CodeTimeout: CodeUnavailable, CodeMalformedResponse: CodeUnavailable, CodeInvalidDescriptor: CodeUnavailable,
		CodeInvalidRegistration: CodeInvalidRequest, CodeCapabilityConflict: CodeInvalidRequest,
		CodeInvalidArgs: CodeInvalidArgs, CodeTooLarge: CodeTooLarge,
		// The call ran: a caller told unavailable would retry an invoke that took effect.
		CodeResultWithheld: CodeResultWithheld,
	}
	for code, want := range cases {
		if got := WireCode(newError(code, "")); got != want {
			t.Errorf("WireCode(%s) = %s, want %s", code, got, want)
		}
	}
	if WireCode(nil) != "" || WireCode(io.EOF) != CodeInternal {
		t.Error("WireCode of nil or a foreign error")
	}
}

// The hand-appended request frame is byte for byte what ndjson.Marshal writes.
func TestEncodeRequestMatchesMarshal(t *testing.T) {
	reqs := []Request{
		{Method: MethodList},
		{Method: MethodDescribe, CapabilityID: "a.b:c-d_e"},
		{Method: MethodInvoke, CapabilityID: "x", Action: "set", Args: json.RawMessage(" {\"a\" : [1, 2.5e3, \"<&>\", \"\\u2028\"], \"b\":{}}\n")},
		{Method: MethodInvoke, CapabilityID: "x"},
		{ProtocolVersion: -3, Method: "bogus method", CapabilityID: "~ !#"},
	}
	for _, r := range reqs {
		got, err := EncodeRequest(r, "18446744073709551615")
		if err != nil {
			t.Fatal(err)
		}
		w := request{ProtocolVersion: r.ProtocolVersion, ID: "18446744073709551615", Method: r.Method, CapabilityID: r.CapabilityID}
		if w.ProtocolVersion == 0 {
			w.ProtocolVersion = 1
		}
		if r.Method == MethodInvoke {
			w.Action, w.Args = r.Action, r.Args
			if len(w.Args) == 0 {
				w.Args = json.RawMessage(`{}`)
			}
		}
		want, _ := ndjson.Marshal(&w)
		if string(got) != string(want) {
			t.Errorf("frame %s, ndjson.Marshal %s", got, want)
		}
	}
	// Strings that need escaping take the encoding/json path.
	got, err := EncodeRequest(Request{Method: MethodDescribe, CapabilityID: "q\"\\\u2028é"}, "1")
	if err != nil || string(got) != `{"protocolVersion":1,"id":"1","method":"describe","capabilityId":"q\"\\\u2028é"}`+"\n" {
		t.Fatalf("escaped frame = %s, %v", got, err)
	}
}

// wantCode fails the test unless err is an *Error with code, found by errors.Is as well.
func wantCode(t testing.TB, err error, code string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error, want %s", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("code = %s (%v), want %s", e.Code, err, code)
	}
	if !errors.Is(err, &Error{Code: code}) {
		t.Fatalf("errors.Is by code failed for %v", err)
	}
	return e
}
