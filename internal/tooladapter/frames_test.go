package tooladapter

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

var testIdentity = Identity{AdapterID: "owner-filesystem", AdapterVersion: "1.2.0", HostInstanceID: "host-019f", SessionID: "agent-a", Generation: 2}

// sampleFrames returns one valid frame of every kind (and both result shapes).
func sampleFrames() map[string]*Frame {
	h, _ := NewHandle(testHandle)
	l := Limits{1048576, 1048576, 4, 16, 30000, 256, 3600000}
	ops := []string{OpRead, OpList}
	return map[string]*Frame{
		"bind":       {Kind: KindBind, Identity: testIdentity, CapabilityHandle: h, Operations: ops, Limits: &l},
		"bound":      {Kind: KindBound, Identity: testIdentity, Operations: ops, Limits: &l},
		"invoke":     {Kind: KindInvoke, Identity: testIdentity, RequestID: "r-1", IdempotencyKey: "tool-abc", Operation: OpRead, Payload: json.RawMessage(`{"path":"a.txt","offset":3}`)},
		"result ok":  {Kind: KindResult, Identity: testIdentity, RequestID: "r-1", IdempotencyKey: "tool-abc", Operation: OpRead, OK: true, Data: json.RawMessage(`{"content":"x","bytesRead":1,"eof":false}`)},
		"result err": {Kind: KindResult, Identity: testIdentity, RequestID: "r-1", IdempotencyKey: "tool-abc", Operation: OpRead, Error: &ErrorBody{Code: "not_found", Message: "no such file", Retryable: false}},
		"abort":      {Kind: KindAbort, Identity: testIdentity, RequestID: "a-1", TargetRequestID: "r-1"},
		"aborted":    {Kind: KindAborted, Identity: testIdentity, RequestID: "a-1", TargetRequestID: "r-1", Aborted: true},
		"aborted err": {Kind: KindAborted, Identity: testIdentity, RequestID: "a-1", TargetRequestID: "r-1",
			Error: &ErrorBody{Code: "too_late", Message: "completed", Retryable: false}},
		"revoke":  {Kind: KindRevoke, Identity: testIdentity},
		"revoked": {Kind: KindRevoked, Identity: testIdentity},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	wantKeys := map[Kind]string{
		KindBind:    "protocolVersion,kind,adapterId,adapterVersion,hostInstanceId,sessionId,generation,capabilityHandle,operations,limits",
		KindBound:   "protocolVersion,kind,adapterId,adapterVersion,hostInstanceId,sessionId,generation,operations,limits",
		KindInvoke:  "protocolVersion,kind,adapterId,adapterVersion,hostInstanceId,sessionId,generation,requestId,idempotencyKey,operation,payload",
		KindAbort:   "protocolVersion,kind,adapterId,adapterVersion,hostInstanceId,sessionId,generation,requestId,targetRequestId",
		KindRevoke:  "protocolVersion,kind,adapterId,adapterVersion,hostInstanceId,sessionId,generation",
		KindRevoked: "protocolVersion,kind,adapterId,adapterVersion,hostInstanceId,sessionId,generation",
	}
	for name, f := range sampleFrames() {
		t.Run(name, func(t *testing.T) {
			line, e := EncodeFrame(f, 0)
			if e != nil {
				t.Fatal(e)
			}
			if !strings.HasSuffix(string(line), "\n") || strings.Count(string(line), "\n") != 1 {
				t.Fatalf("not one line: %q", line)
			}
			g, e := DecodeFrame(line[:len(line)-1])
			if e != nil {
				t.Fatalf("%v: %s", e, line)
			}
			if !reflect.DeepEqual(g, f) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", g, f)
			}
			if want, ok := wantKeys[f.Kind]; ok {
				if got := strings.Join(keysInOrder(t, line), ","); got != want {
					t.Fatalf("keys = %s, want %s", got, want)
				}
			}
			if f.Kind != KindBind && strings.Contains(string(line), testHandle) {
				t.Fatal("handle outside bind")
			}
		})
	}
}

// keysInOrder lists the top-level keys of a JSON object in the order they appear.
func keysInOrder(t *testing.T, line []byte) []string {
	dec := json.NewDecoder(strings.NewReader(string(line)))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestDecodeFrameRejects(t *testing.T) {
	id := `"protocolVersion":"1.0","adapterId":"owner-filesystem","adapterVersion":"1.2.0","hostInstanceId":"host-019f","sessionId":"agent-a","generation":2`
	lim := `"limits":{"maxRequestBytes":1048576,"maxResponseBytes":1048576,"maxConcurrentRequests":4,"maxQueuedRequests":16,"requestTimeoutMs":30000,"maxIdempotencyKeys":256,"idempotencyTtlMs":3600000}`
	res := `,"kind":"result","requestId":"r1","idempotencyKey":"k1","operation":"fs.stat"`
	tests := []struct{ name, line, field string }{
		{"malformed", `{` + id, ""},
		{"not an object", `[]`, ""},
		{"missing version", `{"kind":"revoke","adapterId":"a","adapterVersion":"1.0.0","hostInstanceId":"h","sessionId":"s","generation":0}`, "protocolVersion"},
		{"version 2.0", strings.Replace(`{`+id+`,"kind":"revoke"}`, `"1.0"`, `"2.0"`, 1), "protocolVersion"},
		{"unknown kind", `{` + id + `,"kind":"ping"}`, "kind"},
		{"missing kind", `{` + id + `}`, "kind"},
		{"missing generation", `{"protocolVersion":"1.0","kind":"revoke","adapterId":"owner-filesystem","adapterVersion":"1.2.0","hostInstanceId":"h","sessionId":"s"}`, "generation"},
		{"unknown member", `{` + id + `,"kind":"revoke","extra":1}`, "extra"},
		{"case variant", `{` + id + `,"kind":"revoke","Kind":"revoke"}`, "Kind"},
		{"duplicate member", `{` + id + `,"kind":"revoke","kind":"revoked"}`, "kind"},
		{"null member", `{` + id + `,"kind":"revoke","sessionId":null}`, "sessionId"},
		{"handle in result", `{` + id + res + `,"ok":true,"data":{"type":"file","size":1},"capabilityHandle":"` + testHandle + `"}`, "capabilityHandle"},
		{"handle in bound", `{` + id + `,"kind":"bound","capabilityHandle":"` + testHandle + `","operations":["fs.stat"],` + lim + `}`, "capabilityHandle"},
		{"operations in revoke", `{` + id + `,"kind":"revoke","operations":["fs.stat"]}`, "operations"},
		{"bound without limits", `{` + id + `,"kind":"bound","operations":["fs.stat"]}`, "limits"},
		{"bound unknown op", `{` + id + `,"kind":"bound","operations":["shell.exec"],` + lim + `}`, "operations"},
		{"bound limit out of range", strings.Replace(`{`+id+`,"kind":"bound","operations":["fs.stat"],`+lim+`}`, `"maxQueuedRequests":16`, `"maxQueuedRequests":257`, 1), "limits.maxQueuedRequests"},
		{"bad adapter id", strings.Replace(`{`+id+`,"kind":"revoke"}`, `"owner-filesystem"`, `"-x"`, 1), "adapterId"},
		{"bad adapter version", strings.Replace(`{`+id+`,"kind":"revoke"}`, `"1.2.0"`, `"v1"`, 1), "adapterVersion"},
		{"negative generation", strings.Replace(`{`+id+`,"kind":"revoke"}`, `"generation":2`, `"generation":-2`, 1), "generation"},
		{"host too long", strings.Replace(`{`+id+`,"kind":"revoke"}`, `"host-019f"`, `"`+strings.Repeat("h", 129)+`"`, 1), "hostInstanceId"},
		{"request id 129", `{` + id + `,"kind":"abort","requestId":"` + strings.Repeat("r", 129) + `","targetRequestId":"t"}`, "requestId"},
		{"target id pattern", `{` + id + `,"kind":"abort","requestId":"r","targetRequestId":"-t"}`, "targetRequestId"},
		{"key 513", `{` + id + `,"kind":"result","requestId":"r1","idempotencyKey":"` + strings.Repeat("k", 513) + `","operation":"fs.stat","ok":true,"data":{"type":"file","size":1}}`, "idempotencyKey"},
		{"key with slash", `{` + id + `,"kind":"result","requestId":"r1","idempotencyKey":"a/b","operation":"fs.stat","ok":true,"data":{"type":"file","size":1}}`, "idempotencyKey"},
		{"unknown operation", `{` + id + `,"kind":"result","requestId":"r1","idempotencyKey":"k1","operation":"fs.rm","ok":true,"data":{}}`, "operation"},
		{"ok without data", `{` + id + res + `,"ok":true}`, "data"},
		{"ok with error", `{` + id + res + `,"ok":true,"data":{"type":"file","size":1},"error":{"code":"x","message":"m","retryable":false}}`, "data"},
		{"failure without error", `{` + id + res + `,"ok":false}`, "error"},
		{"failure with data", `{` + id + res + `,"ok":false,"data":{"type":"file","size":1},"error":{"code":"x","message":"m","retryable":false}}`, "error"},
		{"missing ok", `{` + id + res + `,"data":{"type":"file","size":1}}`, "ok"},
		{"error without retryable", `{` + id + res + `,"ok":false,"error":{"code":"x","message":"m"}}`, "error.retryable"},
		{"error extra member", `{` + id + res + `,"ok":false,"error":{"code":"x","message":"m","retryable":false,"stack":"s"}}`, "error.stack"},
		{"error empty message", `{` + id + res + `,"ok":false,"error":{"code":"x","message":"","retryable":false}}`, "error.message"},
		{"error long message", `{` + id + res + `,"ok":false,"error":{"code":"x","message":"` + strings.Repeat("m", 1025) + `","retryable":false}}`, "error.message"},
		{"error long code", `{` + id + res + `,"ok":false,"error":{"code":"` + strings.Repeat("c", 129) + `","message":"m","retryable":false}}`, "error.code"},
		{"aborted true with error", `{` + id + `,"kind":"aborted","requestId":"a","targetRequestId":"t","aborted":true,"error":{"code":"x","message":"m","retryable":false}}`, "error"},
		{"aborted missing flag", `{` + id + `,"kind":"aborted","requestId":"a","targetRequestId":"t"}`, "aborted"},
		{"abort with key", `{` + id + `,"kind":"abort","requestId":"a","targetRequestId":"t","idempotencyKey":"k"}`, "idempotencyKey"},
		{"invalid data", `{` + id + res + `,"ok":true,"data":{"type":"file","size":-1}}`, "data"},
		{"invoke bad payload", `{` + id + `,"kind":"invoke","requestId":"r","idempotencyKey":"k","operation":"fs.stat","payload":{"path":"../x"}}`, "payload"},
		{"invoke null payload", `{` + id + `,"kind":"invoke","requestId":"r","idempotencyKey":"k","operation":"fs.stat","payload":null}`, "payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, e := DecodeFrame([]byte(tt.line))
			if f != nil {
				t.Fatal("frame returned with an error")
			}
			wantCode(t, e, CodeProtocolInvalid)
			if got, _ := e.Details[DetailField].(string); got != tt.field {
				t.Fatalf("field = %q, want %q (%v)", got, tt.field, e)
			}
			secretFree(t, "error", errorTexts(e), "")
		})
	}
}

func TestEncodeFrameRefuses(t *testing.T) {
	f := sampleFrames()["invoke"]
	_, e := EncodeFrame(f, 100)
	wantCode(t, e, CodeRequestTooLarge)
	bad := *f
	bad.RequestID = ""
	_, e = EncodeFrame(&bad, 0)
	wantCode(t, e, CodeRequestInvalid)
}

func TestPayloads(t *testing.T) {
	content4M := `"` + strings.Repeat("x", MaxContentBytes) + `"`
	valid := map[string][]string{
		OpList:   {`{"path":"."}`, `{"path":"a","maxEntries":1}`, `{"path":"a","maxEntries":10000}`},
		OpStat:   {`{"path":"a/b"}`},
		OpRead:   {`{"path":"a"}`, `{"path":"a","offset":0,"maxBytes":4194304}`},
		OpSearch: {`{"path":".","query":"x"}`, `{"path":".","query":"` + strings.Repeat("q", 4096) + `","maxResults":10000}`, `{"path":".","query":".*[regex] $(not run)"}`},
		OpWrite:  {`{"path":"a","content":""}`, `{"path":"a","content":` + content4M + `}`, `{"path":"a","content":"x","create":true,"overwrite":false,"expectedDigest":"` + strings.Repeat("0f", 32) + `"}`},
		OpEdit:   {`{"path":"a","edits":[{"oldText":"a","newText":""}]}`, `{"path":"a","edits":[` + strings.Repeat(`{"oldText":"a","newText":"b"},`, 255) + `{"oldText":"a","newText":"b"}],"expectedDigest":"` + strings.Repeat("a", 64) + `"}`},
	}
	for op, list := range valid {
		for _, p := range list {
			if e := ValidatePayload(op, json.RawMessage(p)); e != nil {
				t.Errorf("%s %.60s: %v", op, p, e)
			}
		}
	}
	invalid := []struct{ op, payload, code, field string }{
		{OpList, `{"path":"a","maxEntries":0}`, CodeRequestInvalid, "maxEntries"},
		{OpList, `{"path":"a","maxEntries":10001}`, CodeRequestInvalid, "maxEntries"},
		{OpList, `{"maxEntries":1}`, CodeRequestInvalid, "path"},
		{OpStat, `{"path":"a","extra":1}`, CodeRequestInvalid, "extra"},
		{OpStat, `{"path":"/a"}`, CodeInvalidPath, "path"},
		{OpStat, `{"path":7}`, CodeRequestInvalid, "path"},
		{OpStat, `[]`, CodeRequestInvalid, "payload"},
		{OpStat, ``, CodeRequestInvalid, "payload"},
		{OpRead, `{"path":"a","offset":-1}`, CodeRequestInvalid, "offset"},
		{OpRead, `{"path":"a","maxBytes":0}`, CodeRequestInvalid, "maxBytes"},
		{OpRead, `{"path":"a","maxBytes":4194305}`, CodeRequestInvalid, "maxBytes"},
		{OpSearch, `{"path":"a"}`, CodeRequestInvalid, "query"},
		{OpSearch, `{"path":"a","query":""}`, CodeRequestInvalid, "query"},
		{OpSearch, `{"path":"a","query":"` + strings.Repeat("q", 4097) + `"}`, CodeRequestInvalid, "query"},
		{OpSearch, `{"path":"a","query":"q","maxResults":0}`, CodeRequestInvalid, "maxResults"},
		{OpWrite, `{"path":"a"}`, CodeRequestInvalid, "content"},
		{OpWrite, `{"path":"a","content":"` + strings.Repeat("x", MaxContentBytes+1) + `"}`, CodeRequestInvalid, "content"},
		{OpWrite, `{"path":"a","content":"","expectedDigest":"ABC"}`, CodeRequestInvalid, "expectedDigest"},
		{OpWrite, `{"path":"a","content":"","create":"yes"}`, CodeRequestInvalid, "create"},
		{OpWrite, `{"path":"a/","content":""}`, CodeInvalidPath, "path"},
		{OpEdit, `{"path":"a","edits":[]}`, CodeRequestInvalid, "edits"},
		{OpEdit, `{"path":"a","edits":[{"oldText":"","newText":"b"}]}`, CodeRequestInvalid, "edits.oldText"},
		{OpEdit, `{"path":"a","edits":[{"oldText":"a"}]}`, CodeRequestInvalid, "edits.newText"},
		{OpEdit, `{"path":"a","edits":[{"oldText":"a","newText":"b","regex":true}]}`, CodeRequestInvalid, "edits[0].regex"},
		{OpEdit, `{"path":"a","edits":[` + strings.Repeat(`{"oldText":"a","newText":"b"},`, 256) + `{"oldText":"a","newText":"b"}]}`, CodeRequestInvalid, "edits"},
		{"fs.delete", `{"path":"a"}`, CodeOperationDenied, ""},
	}
	for _, tt := range invalid {
		e := ValidatePayload(tt.op, json.RawMessage(tt.payload))
		if e == nil {
			t.Errorf("%s %.60s accepted", tt.op, tt.payload)
			continue
		}
		if got, _ := e.Details[DetailField].(string); e.Code != tt.code || got != tt.field {
			t.Errorf("%s %.60s: %v field %q, want %s %q", tt.op, tt.payload, e, got, tt.code, tt.field)
		}
	}
}

func TestResults(t *testing.T) {
	d := strings.Repeat("0", 64)
	for _, op := range Operations {
		if e := ValidateResult(op, resultData(op, 1)); e != nil {
			t.Errorf("%s: %v", op, e)
		}
	}
	valid := []struct{ op, data string }{
		{OpList, `{"entries":[],"truncated":true}`},
		{OpList, `{"entries":[{"name":".git","type":"directory"},{"name":"` + strings.Repeat("n", 255) + `","type":"file","size":0,"modifiedAt":"2026-12-02T13:00:00.123456789Z"}],"truncated":false}`},
		{OpStat, `{"type":"directory","size":0}`},
		{OpRead, `{"content":"","bytesRead":0,"eof":true}`},
		{OpSearch, `{"matches":[],"truncated":false}`},
		{OpWrite, `{"created":false,"bytesWritten":0,"digest":"` + d + `"}`},
		{OpEdit, `{"replacements":0,"digest":"` + d + `"}`},
	}
	for _, tt := range valid {
		if e := ValidateResult(tt.op, json.RawMessage(tt.data)); e != nil {
			t.Errorf("%s %.60s: %v", tt.op, tt.data, e)
		}
	}
	invalid := []struct{ op, data, field string }{
		{OpList, `{"entries":[{"name":"..","type":"file"}],"truncated":false}`, "entries.name"},
		{OpList, `{"entries":[{"name":"a/b","type":"file"}],"truncated":false}`, "entries.name"},
		{OpList, `{"entries":[{"name":"a\u0000","type":"file"}],"truncated":false}`, "entries.name"},
		{OpList, `{"entries":[{"name":"` + strings.Repeat("n", 256) + `","type":"file"}],"truncated":false}`, "entries.name"},
		{OpList, `{"entries":[{"name":"a","type":"symlink"}],"truncated":false}`, "entries.type"},
		{OpList, `{"entries":[{"name":"a","type":"file","modifiedAt":"yesterday"}],"truncated":false}`, "entries.modifiedAt"},
		{OpList, `{"entries":[{"name":"a","type":"file","size":-1}],"truncated":false}`, "entries.size"},
		{OpList, `{"entries":[{"name":"a","type":"file","target":"/etc"}],"truncated":false}`, "entries[0].target"},
		{OpList, `{"entries":[]}`, "truncated"},
		{OpStat, `{"type":"file"}`, "size"},
		{OpStat, `{"type":"device","size":0}`, "type"},
		{OpRead, `{"content":"x","bytesRead":4194305,"eof":true}`, "bytesRead"},
		{OpRead, `{"content":"x","bytesRead":1}`, "eof"},
		{OpSearch, `{"matches":[{"path":"/etc/passwd","line":1,"column":1,"text":""}],"truncated":false}`, "matches.path"},
		{OpSearch, `{"matches":[{"path":"a","line":0,"column":1,"text":""}],"truncated":false}`, "matches.line"},
		{OpSearch, `{"matches":[{"path":"a","line":1,"column":0,"text":""}],"truncated":false}`, "matches.column"},
		{OpSearch, `{"matches":[{"path":"a","line":1,"column":1,"text":"` + strings.Repeat("t", 4097) + `"}],"truncated":false}`, "matches.text"},
		{OpSearch, `{"matches":[{"path":"a","line":1,"column":1,"text":"a line\nand the next"}],"truncated":false}`, "matches.text"},
		{OpWrite, `{"created":true,"bytesWritten":1,"digest":"` + strings.Repeat("A", 64) + `"}`, "digest"},
		{OpEdit, `{"replacements":257,"digest":"` + d + `"}`, "replacements"},
		{OpEdit, `null`, "data"},
	}
	for _, tt := range invalid {
		e := ValidateResult(tt.op, json.RawMessage(tt.data))
		if e == nil {
			t.Errorf("%s %.60s accepted", tt.op, tt.data)
			continue
		}
		if got, _ := e.Details[DetailField].(string); e.Code != CodeProtocolInvalid || got != tt.field {
			t.Errorf("%s %.60s: %v field %q, want %q", tt.op, tt.data, e, got, tt.field)
		}
	}
}

// TestInvokeEncoder: the per-binding invoke encoder writes exactly what marshalFrame writes,
// whether it takes its hand-written path or falls back.
func TestInvokeEncoder(t *testing.T) {
	identities := []Identity{testIdentity,
		{AdapterID: "a", AdapterVersion: "0.0.1-rc.1+b", HostInstanceID: `host "quoted" <&> é`, SessionID: "s\u2028\\", Generation: 9007199254740991}}
	payloads := []string{`{"path":"."}`, "{ \"path\" : \"a b\",\n\t\"offset\": 3 }", `{"path":"<&>","query":"\u00e9 \" \\"}`, `{}`}
	for _, id := range identities {
		enc := NewInvokeEncoder(id)
		if enc.prefix == nil {
			t.Fatalf("%+v: no prefix", id)
		}
		for _, p := range payloads {
			for _, rid := range []string{"8c4b0e5e-1d1a-4a53-9a36-0c6d3f1d2b7a", `r"1`} {
				want, werr := marshalFrame(&Frame{Kind: KindInvoke, Identity: id, RequestID: rid, IdempotencyKey: "tool-abc", Operation: OpStat, Payload: json.RawMessage(p)})
				got, gerr := enc.Encode(rid, "tool-abc", OpStat, json.RawMessage(p))
				if string(got) != string(want) || (gerr == nil) != (werr == nil) {
					t.Errorf("encode(%q, %q):\n got %s (%v)\nwant %s (%v)", rid, p, got, gerr, want, werr)
				}
			}
		}
		if _, err := enc.Encode("r", "k", OpStat, json.RawMessage(`{"path":`)); err == nil {
			t.Error("malformed payload encoded")
		}
	}
}
