package tooladapter

import (
	"bytes"
	"encoding/json"
	"path"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// FuzzDecodeFrame: whatever the adapter sends, DecodeFrame either refuses it with
// adapter_protocol_invalid or returns a frame whose encoding is a fixed point of
// decode∘encode and carries the handle only in bind.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range sampleFrames() {
		b, _ := marshalFrame(fr)
		f.Add(bytes.TrimSuffix(b, []byte("\n")))
	}
	f.Add([]byte(`{"protocolVersion":"1.0","kind":"revoke"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		fr, e := DecodeFrame(line)
		if e != nil {
			if fr != nil || e.Code != CodeProtocolInvalid {
				t.Fatalf("refusal = %v, frame %v", e, fr)
			}
			return
		}
		enc, e := EncodeFrame(fr, 0)
		if e != nil {
			t.Fatalf("decoded frame does not encode: %v", e)
		}
		fr2, e := DecodeFrame(bytes.TrimSuffix(enc, []byte("\n")))
		if e != nil {
			t.Fatalf("encoding does not decode: %v\n%s", e, enc)
		}
		enc2, _ := EncodeFrame(fr2, 0)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("not a fixed point:\n%s\n%s", enc, enc2)
		}
		if fr2.Kind != fr.Kind || fr2.Identity != fr.Identity || fr2.RequestID != fr.RequestID || fr2.OK != fr.OK || fr2.Aborted != fr.Aborted {
			t.Fatalf("members changed: %+v vs %+v", fr, fr2)
		}
		if hasHandle := bytes.Contains(enc, []byte(`"capabilityHandle"`)); hasHandle != (fr.Kind == KindBind) {
			t.Fatalf("%s frame: capabilityHandle present = %v", fr.Kind, hasHandle)
		}
		if bytes.Count(enc, []byte("\n")) != 1 {
			t.Fatal("encoding is not one line")
		}
	})
}

var descriptorCodes = map[string]bool{
	CodeInvalidDescriptor: true, CodeUnsupportedVersion: true, CodeInvalidIdentity: true,
	CodeInvalidEndpoint: true, CodeInvalidBinding: true, CodeInvalidCapability: true,
	CodeUnsupportedOp: true, CodeInvalidLimit: true, CodeInvalidField: true, CodeBindingMismatch: true,
}

var handleLike = regexp.MustCompile(`^[A-Za-z0-9_-]{32,}$`)

// FuzzParseDescriptor: a refusal has a descriptor code and never quotes the handle or the
// endpoint; an accepted descriptor is bound to the wanted incarnation, re-parses from its own
// members to the same policy, and can complete its handshake within its limits.
func FuzzParseDescriptor(f *testing.F) {
	f.Add([]byte(mustJSON(f, descriptorMap(testSock))), "host-019f", "agent-a", int64(2))
	m := descriptorMap("/" + strings.Repeat("p", 99))
	binding(m)["capabilityHandle"] = strings.Repeat("c", 512)
	limits(m)["maxRequestBytes"], limits(m)["maxResponseBytes"] = 2048, 1024
	f.Add([]byte(mustJSON(f, m)), "host-019f", "agent-a", int64(2))
	f.Fuzz(func(t *testing.T, raw []byte, host, session string, gen int64) {
		want := Binding{host, session, gen}
		d, e := ParseDescriptor(raw, want)
		if e != nil {
			if d != nil || !descriptorCodes[e.Code] {
				t.Fatalf("refusal = %v", e)
			}
			var probe struct {
				Endpoint struct {
					Path any `json:"path"`
				} `json:"endpoint"`
				Binding struct {
					CapabilityHandle any `json:"capabilityHandle"`
				} `json:"binding"`
			}
			if json.Unmarshal(raw, &probe) == nil {
				text := errorTexts(e)
				if h, ok := probe.Binding.CapabilityHandle.(string); ok && handleLike.MatchString(h) && strings.Contains(text, h) {
					t.Fatalf("error quotes the handle: %v", e)
				}
				if p, ok := probe.Endpoint.Path.(string); ok && len(p) >= 8 && strings.Count(p, "/") >= 2 && strings.Contains(text, p) {
					t.Fatalf("error quotes the endpoint: %v", e)
				}
			}
			return
		}
		if d.Incarnation() != want {
			t.Fatalf("accepted for %+v, bound to %+v", want, d.Incarnation())
		}
		bind, _ := marshalFrame(d.BindFrame())
		bound, _ := marshalFrame(d.BoundFrame())
		if int64(len(bind)) > d.Limits.MaxRequestBytes || int64(len(bound)) > d.Limits.MaxResponseBytes {
			t.Fatal("accepted limits cannot hold the handshake")
		}
		if _, e := DecodeFrame(bind[:len(bind)-1]); e != nil {
			t.Fatalf("bind frame does not decode: %v", e)
		}
		again := map[string]any{
			"protocolVersion": d.ProtocolVersion, "adapterId": d.AdapterID, "adapterVersion": d.AdapterVersion,
			"endpoint": d.Endpoint,
			"binding": map[string]any{"hostInstanceId": d.Binding.HostInstanceID, "sessionId": d.Binding.SessionID,
				"generation": d.Binding.Generation, "capabilityHandle": d.Binding.CapabilityHandle.v},
			"operations": d.Operations, "limits": d.Limits,
		}
		d2, e := ParseDescriptor(mustJSON(t, again), want)
		if e != nil {
			t.Fatalf("re-parse: %v", e)
		}
		if !d2.Summary().Equal(d.Summary()) || d2.Endpoint != d.Endpoint || !d2.Binding.CapabilityHandle.Equal(d.Binding.CapabilityHandle) {
			t.Fatal("re-parse changed the descriptor")
		}
		if strings.Contains(string(d.Summary().Canonical()), d.Binding.CapabilityHandle.v) {
			t.Fatal("summary holds the handle")
		}
	})
}

// schemaBadPath is the schema's "not" pattern for relativePath.
var schemaBadPath = regexp.MustCompile(`(^/|(^|/)\.\.(/|$)|\\|[\x00-\x1f\x7f])`)

// referenceValid is an independent statement of the relative-path rules: the schema pattern,
// the byte bound, and canonical form, with every Unicode control character refused.
func referenceValid(p string) bool {
	return p != "" && len(p) <= MaxRelativePathBytes && utf8.ValidString(p) &&
		!schemaBadPath.MatchString(p) && !strings.ContainsFunc(p, unicode.IsControl) &&
		path.Clean(p) == p
}

// FuzzValidateRelativePath: the validator agrees with the reference; an accepted path stays
// beneath its root lexically, has no empty, "." (but the root itself) or ".." segment; a refused
// one has a reason and a message that does not quote it.
func FuzzValidateRelativePath(f *testing.F) {
	for _, s := range []string{".", "a", "src/protocol.ts", "", "/etc/passwd", "../secret", "src/../secret", "src//file", "src\\file", "x\x00y", "./a", "a/", "a/.", "é/ü", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		e := ValidateRelativePath(p)
		if (e == nil) != referenceValid(p) {
			t.Fatalf("ValidateRelativePath(%q) = %v, reference says valid=%v", p, e, referenceValid(p))
		}
		if e != nil {
			reason, _ := e.Details[DetailReason].(string)
			if e.Code != CodeInvalidPath || reason == "" || e.Message != pathError(reason).Message {
				t.Fatalf("refusal = %v %v", e, e.Details)
			}
			return
		}
		if escapes(p) {
			t.Fatalf("%q escapes its root", p)
		}
		if p == "." {
			return
		}
		for _, seg := range strings.Split(p, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("%q has segment %q", p, seg)
			}
		}
		if j := path.Join("/root", p); !strings.HasPrefix(j, "/root/") {
			t.Fatalf("%q joins to %q", p, j)
		}
	})
}

// FuzzDecodeFlat: the one-pass decoding of flat payload and result shapes agrees with
// decodeShape, the reference, on every input: the same refusal, or the same values.
func FuzzDecodeFlat(f *testing.F) {
	for _, s := range []string{
		`{"type":"directory","size":0}`, `{"type":"file","size":12,"modifiedAt":"2026-01-02T03:04:05Z"}`,
		`{"content":"x\n\u00e9","bytesRead":1,"eof":false}`, `{"created":true,"bytesWritten":3,"digest":"ab"}`,
		`{"replacements":2,"digest":"x"}`, `{"size":-0}`, `{"size":1.0}`, `{"size":1e2}`, `{"size":9223372036854775808}`,
		`{"size":null}`, `{"type":5}`, `{"type":"a","type":"b"}`, `{"Type":"file"}`, `{"bogus":1}`, `{"eof":"true"}`,
		`{"size":"x","bogus":1}`, `[]`, `null`, ``, `{"content":"\ud800"}`, " { \"size\" : 7 } ",
		`{"path":"."}`, `{"path":"a/b","maxEntries":10}`, `{"path":"a","offset":0,"maxBytes":4096}`,
		`{"path":"a","query":"x","maxResults":5}`, `{"path":"a","content":"","create":true,"overwrite":false,"expectedDigest":"d"}`,
		`{"path":null}`, `{"path":"a","Path":"b"}`, `{"content":"\ud83d\ude00\u0000","bytesRead":4,"eof":true}`,
		`{"content":"a","bytesRead":4194305,"eof":true}`, `{"content":"a","bytesRead":-1,"eof":null}`,
		` { "eof" : false , "content" : "q\\\"\\" , "bytesRead" : 0 } `, `{"content":"a","bytesRead":1,"eof":true,"x":1}`,
		`{"content":"a","bytesRead":1}`, `{"con\u0074ent":"a","bytesRead":1,"eof":true}`, `{"type":"file","size":0,"modifiedAt":"2026-01-02T03:04:05.5Z"}`,
		`{"type":"dir","size":1}`, `{"type":"file","size":-1}`, `{"type":"directory","size":9007199254740992}`,
		`{"type":"file","size":1,"modifiedAt":"2026-01-02T03:04:05\u005a"}`, ` {"size" : 3 , "type" : "file" } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		// The compacted data of a walked value is what encoding/json writes for it.
		if json.Valid(raw) {
			var want bytes.Buffer
			if json.Compact(&want, raw) != nil || !bytes.Equal(compactWalked(raw), want.Bytes()) {
				t.Fatalf("compactWalked(%q) = %q, json.Compact %q", raw, compactWalked(raw), want.Bytes())
			}
		}
		for _, pair := range [][2]any{{&statResult{}, &statResult{}}, {&readResult{}, &readResult{}},
			{&writeResult{}, &writeResult{}}, {&editResult{}, &editResult{}}, {&listPayload{}, &listPayload{}},
			{&statPayload{}, &statPayload{}}, {&readPayload{}, &readPayload{}}, {&searchPayload{}, &searchPayload{}},
			{&writePayload{}, &writePayload{}}} {
			got, want := pair[0], pair[1]
			ge := decodeFlat(CodeProtocolInvalid, "data", raw, got)
			we := decodeShape(CodeProtocolInvalid, "data", raw, want)
			if !reflect.DeepEqual(ge, we) || (we == nil && !reflect.DeepEqual(got, want)) {
				t.Fatalf("%T of %q: got %v %+v, want %v %+v", got, raw, ge, got, we, want)
			}
		}
		// The read result checks that skip decoding the content accept only valid results.
		if ndjson.Valid(raw) == nil && validResultWalked(OpStat, raw) {
			if e := ValidateResult(OpStat, raw); e != nil {
				t.Fatalf("validResultWalked accepts the stat result %q, ValidateResult refuses it (%v)", raw, e)
			}
		}
		if validReadResult(raw) || (ndjson.Valid(raw) == nil && validResultWalked(OpRead, raw)) {
			var v readResult
			if e := decodeShape(CodeProtocolInvalid, "data", raw, &v); e != nil || v.Content == nil ||
				len(*v.Content) > MaxContentBytes || v.BytesRead == nil || *v.BytesRead < 0 ||
				*v.BytesRead > MaxContentBytes || v.EOF == nil {
				t.Fatalf("validReadResult accepts %q, the full check refuses it (%v)", raw, e)
			}
		}
	})
}
