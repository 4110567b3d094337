package protocol

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// awkward strings exercise every escaping rule of encoding/json.
var awkward = []string{
	"", "plain", "quote\"back\\slash", "ctl\x00\x01\x1f\b\f\n\r\t", "del\x7f", "<html>&amp;",
	"é ☃ 𝔰", "line\u2028para\u2029", "bad\xffutf8\xc3", "sess-🙂-01",
}

func randString(r *rand.Rand) string { return awkward[r.IntN(len(awkward))] }

func encodingJSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestAppendLineFallsBack: only a tool result has a hand-written encoding; status, sessions and
// everything else go through encoding/json.
func TestAppendLineFallsBack(t *testing.T) {
	for _, resp := range []*Response{
		{Error: &Error{Code: "x"}},
		{Error: &Error{Code: "x"}, Data: &ToolResult{}},
		{OK: true, Data: OpenResult{}},
		{OK: true, Data: HostSnapshot{}},
		{OK: true, Data: &SessionSnapshot{}},
		{OK: true, Data: (*ToolResult)(nil)},
		{OK: true, Data: (*CompactToolResult)(nil)},
		{OK: true, Data: nil},
	} {
		if _, ok := resp.AppendLine(nil); ok {
			t.Errorf("fast path taken for %+v", resp)
		}
	}
}

// randJSON returns a random JSON text: nested values, awkward strings (as a peer could escape
// them), numbers, duplicate keys, and sometimes whitespace between tokens.
func randJSON(r *rand.Rand, depth int) string {
	sp := func() string {
		if r.IntN(6) == 0 {
			return []string{" ", "\n", "\t ", "\r\n  "}[r.IntN(4)]
		}
		return ""
	}
	str := func() string {
		s, _ := json.Marshal(randString(r))
		if r.IntN(4) == 0 {
			return `"esc\u0041\n\"\/\ud83d\ude00"`
		}
		return string(s)
	}
	k := r.IntN(8)
	if depth > 3 {
		k = r.IntN(4)
	}
	switch k {
	case 0:
		return str()
	case 1:
		return []string{"0", "-1.5e+7", "12345678901234567890", "3.25E-2"}[r.IntN(4)]
	case 2:
		return []string{"true", "false", "null"}[r.IntN(3)]
	case 3:
		return "[]"
	case 4, 5:
		var sb strings.Builder
		sb.WriteString("{" + sp())
		for i := range r.IntN(4) {
			if i > 0 {
				sb.WriteString("," + sp())
			}
			key := str()
			if r.IntN(5) == 0 {
				key = `"dup"`
			}
			sb.WriteString(key + sp() + ":" + sp() + randJSON(r, depth+1) + sp())
		}
		sb.WriteString("}")
		return sb.String()
	default:
		var sb strings.Builder
		sb.WriteString("[" + sp())
		for i := range r.IntN(4) {
			if i > 0 {
				sb.WriteString("," + sp())
			}
			sb.WriteString(randJSON(r, depth+1) + sp())
		}
		sb.WriteString("]")
		return sb.String()
	}
}

func TestAppendToolResultMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		resp := &Response{ProtocolVersion: randString(r), Kind: KindResponse, RequestID: randString(r),
			HostInstanceID: randString(r), OK: true}
		if r.IntN(2) == 0 {
			resp.SessionID = randString(r)
		}
		tr := &ToolResult{ToolCallID: randString(r), Operation: randString(r)}
		switch r.IntN(10) {
		case 0: // nil data is null
		case 1:
			tr.Data = json.RawMessage(" " + randJSON(r, 0) + "\n")
		default:
			tr.Data = json.RawMessage(randJSON(r, 0))
		}
		if tr.Data != nil && r.IntN(2) == 0 {
			// What the tool-adapter connection returns: compact, and vouched for.
			var c bytes.Buffer
			if json.Compact(&c, tr.Data) != nil {
				t.Fatal("generated data is not JSON")
			}
			tr.Data = c.Bytes()
			resp.Data = &CompactToolResult{*tr}
		} else {
			resp.Data = tr
		}
		got, ok := resp.AppendLine(nil)
		if !ok {
			t.Fatalf("case %d: no fast path for %s", i, tr.Data)
		}
		if want := encodingJSON(t, resp); !bytes.Equal(got, want) {
			t.Fatalf("case %d differs:\nfast %s\njson %s", i, got, want)
		}
	}
}

// TestAppendToolResultFallsBack: data that is not one JSON value leaves the answer to
// encoding/json, which refuses it, and the buffer as it was.
func TestAppendToolResultFallsBack(t *testing.T) {
	for _, data := range []string{"", "{", `{"a":1}x`, `{"a":01}`, "nul", `["\x01"]`, `"\q"`} {
		resp := &Response{Kind: KindResponse, OK: true, Data: &ToolResult{ToolCallID: "c", Operation: "fs.read", Data: json.RawMessage(data)}}
		b, ok := resp.AppendLine([]byte("keep"))
		if ok || string(b) != "keep" {
			t.Errorf("data %q: fast path %v, buffer %q", data, ok, b)
		}
		var buf bytes.Buffer
		if json.NewEncoder(&buf).Encode(resp) == nil {
			t.Errorf("data %q: encoding/json accepts it", data)
		}
	}
}
