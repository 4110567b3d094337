package tooladapter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const testSock = "/run/user/1000/pi-tools.sock"

func binding(m map[string]any) map[string]any { return m["binding"].(map[string]any) }
func limits(m map[string]any) map[string]any  { return m["limits"].(map[string]any) }
func endpoint(m map[string]any) map[string]any {
	return m["endpoint"].(map[string]any)
}

func TestParseDescriptorValid(t *testing.T) {
	d, e := ParseDescriptor(mustJSON(t, descriptorMap(testSock)), testBinding)
	if e != nil {
		t.Fatal(e)
	}
	if d.AdapterID != "owner-filesystem" || d.Endpoint.Path != testSock || d.Binding.Generation != 2 || len(d.Operations) != 6 ||
		d.Limits != (Limits{1048576, 1048576, 4, 16, 30000, 256, 3600000}) {
		t.Fatalf("descriptor = %+v", d)
	}
	if !d.Grants(OpEdit) || d.Grants("fs.delete") {
		t.Fatal("Grants")
	}
	if d.Incarnation() != testBinding {
		t.Fatal("Incarnation")
	}
}

// TestDescriptorDrift is the table of admission rules: one case per rule, each with its code
// and the member it names.
func TestDescriptorDrift(t *testing.T) {
	type tc struct {
		name  string
		raw   string // used instead of the mutated map when set
		mut   func(m map[string]any)
		want  Binding
		code  string
		field string
	}
	s := strings.Repeat
	tests := []tc{
		{name: "not JSON", raw: `{"protocolVersion":`, code: CodeInvalidDescriptor},
		{name: "array", raw: `[]`, code: CodeInvalidDescriptor},
		{name: "null", raw: `null`, code: CodeInvalidDescriptor},
		{name: "string", raw: `"descriptor"`, code: CodeInvalidDescriptor},
		{name: "trailing data", raw: `{} {}`, code: CodeInvalidDescriptor},
		{name: "top-level bearer", mut: func(m map[string]any) { m["bearer"] = "token" }, code: CodeInvalidField, field: "bearer"},
		{name: "endpoint.token", mut: func(m map[string]any) { endpoint(m)["token"] = "t" }, code: CodeInvalidField, field: "endpoint.token"},
		{name: "binding.env", mut: func(m map[string]any) { binding(m)["env"] = map[string]any{"A": "b"} }, code: CodeInvalidField, field: "binding.env"},
		{name: "limits.unbounded", mut: func(m map[string]any) { limits(m)["unbounded"] = true }, code: CodeInvalidField, field: "limits.unbounded"},
		{name: "a handle as a key", mut: func(m map[string]any) { binding(m)[testHandle] = "x" }, code: CodeInvalidField, field: fmt.Sprintf("binding.(a key of %d bytes)", len(testHandle))},
		{name: "a handle as a top-level key", mut: func(m map[string]any) { m[testHandle] = 1 }, code: CodeInvalidField, field: fmt.Sprintf("(a key of %d bytes)", len(testHandle))},
		{name: "case variant key", raw: strings.Replace(string(mustJSON(t, descriptorMap(testSock))), `"adapterId"`, `"AdapterId"`, 1), code: CodeInvalidField, field: "AdapterId"},
		{name: "duplicate key", raw: strings.Replace(string(mustJSON(t, descriptorMap(testSock))), `"adapterId":"owner-filesystem"`, `"adapterId":"owner-filesystem","adapterId":"x"`, 1), code: CodeInvalidField, field: "adapterId"},

		{name: "version 9.0", mut: func(m map[string]any) { m["protocolVersion"] = "9.0" }, code: CodeUnsupportedVersion, field: "protocolVersion"},
		{name: "version 2.0", mut: func(m map[string]any) { m["protocolVersion"] = "2.0" }, code: CodeUnsupportedVersion, field: "protocolVersion"},
		{name: "version number", mut: func(m map[string]any) { m["protocolVersion"] = 1.0 }, code: CodeUnsupportedVersion, field: "protocolVersion"},
		{name: "version missing", mut: func(m map[string]any) { delete(m, "protocolVersion") }, code: CodeUnsupportedVersion, field: "protocolVersion"},

		{name: "adapterId empty", mut: func(m map[string]any) { m["adapterId"] = "" }, code: CodeInvalidIdentity, field: "adapterId"},
		{name: "adapterId leading dot", mut: func(m map[string]any) { m["adapterId"] = ".fs" }, code: CodeInvalidIdentity, field: "adapterId"},
		{name: "adapterId space", mut: func(m map[string]any) { m["adapterId"] = "my fs" }, code: CodeInvalidIdentity, field: "adapterId"},
		{name: "adapterId 129", mut: func(m map[string]any) { m["adapterId"] = s("a", 129) }, code: CodeInvalidIdentity, field: "adapterId"},
		{name: "adapterId missing", mut: func(m map[string]any) { delete(m, "adapterId") }, code: CodeInvalidIdentity, field: "adapterId"},
		{name: "adapterVersion not semver", mut: func(m map[string]any) { m["adapterVersion"] = "1.2" }, code: CodeInvalidIdentity, field: "adapterVersion"},
		{name: "adapterVersion leading zero", mut: func(m map[string]any) { m["adapterVersion"] = "01.2.3" }, code: CodeInvalidIdentity, field: "adapterVersion"},
		{name: "adapterVersion 65", mut: func(m map[string]any) { m["adapterVersion"] = "1.2.3-" + s("a", 59) }, code: CodeInvalidIdentity, field: "adapterVersion"},

		{name: "transport tcp", mut: func(m map[string]any) { endpoint(m)["transport"] = "tcp" }, code: CodeInvalidEndpoint, field: "endpoint.transport"},
		{name: "endpoint missing", mut: func(m map[string]any) { delete(m, "endpoint") }, code: CodeInvalidEndpoint, field: "endpoint"},
		{name: "endpoint path missing", mut: func(m map[string]any) { delete(endpoint(m), "path") }, code: CodeInvalidEndpoint, field: "endpoint.path"},
		{name: "endpoint relative", mut: func(m map[string]any) { endpoint(m)["path"] = "run/pi.sock" }, code: CodeInvalidEndpoint, field: "endpoint.path"},
		{name: "endpoint root", mut: func(m map[string]any) { endpoint(m)["path"] = "/" }, code: CodeInvalidEndpoint, field: "endpoint.path"},
		{name: "endpoint double slash", mut: func(m map[string]any) { endpoint(m)["path"] = "/run//pi.sock" }, code: CodeInvalidEndpoint, field: "endpoint.path"},
		{name: "endpoint dot dot", mut: func(m map[string]any) { endpoint(m)["path"] = "/run/../pi.sock" }, code: CodeInvalidEndpoint, field: "endpoint.path"},
		{name: "endpoint trailing slash", mut: func(m map[string]any) { endpoint(m)["path"] = "/run/pi.sock/" }, code: CodeInvalidEndpoint, field: "endpoint.path"},
		{name: "endpoint NUL", mut: func(m map[string]any) { endpoint(m)["path"] = "/run/pi\x00.sock" }, code: CodeInvalidEndpoint, field: "endpoint.path"},
		{name: "endpoint 101 bytes", mut: func(m map[string]any) { endpoint(m)["path"] = "/" + s("p", 100) }, code: CodeInvalidEndpoint, field: "endpoint.path"},
		{name: "endpoint 100 bytes of multibyte", mut: func(m map[string]any) { endpoint(m)["path"] = "/" + s("é", 50) }, code: CodeInvalidEndpoint, field: "endpoint.path"},

		{name: "host empty", mut: func(m map[string]any) { binding(m)["hostInstanceId"] = "" }, code: CodeInvalidBinding, field: "binding.hostInstanceId"},
		{name: "host 129", mut: func(m map[string]any) { binding(m)["hostInstanceId"] = s("h", 129) }, code: CodeInvalidBinding, field: "binding.hostInstanceId"},
		{name: "host control", mut: func(m map[string]any) { binding(m)["hostInstanceId"] = "host\n1" }, code: CodeInvalidBinding, field: "binding.hostInstanceId"},
		{name: "session 257", mut: func(m map[string]any) { binding(m)["sessionId"] = s("s", 257) }, code: CodeInvalidBinding, field: "binding.sessionId"},
		{name: "session DEL", mut: func(m map[string]any) { binding(m)["sessionId"] = "a\x7f" }, code: CodeInvalidBinding, field: "binding.sessionId"},
		{name: "generation negative", mut: func(m map[string]any) { binding(m)["generation"] = -1 }, code: CodeInvalidBinding, field: "binding.generation"},
		{name: "generation unsafe", mut: func(m map[string]any) { binding(m)["generation"] = int64(1) << 53 }, code: CodeInvalidBinding, field: "binding.generation"},
		{name: "generation fraction", mut: func(m map[string]any) { binding(m)["generation"] = 2.5 }, code: CodeInvalidBinding, field: "binding.generation"},
		{name: "generation string", mut: func(m map[string]any) { binding(m)["generation"] = "2" }, code: CodeInvalidBinding, field: "binding.generation"},
		{name: "binding missing", mut: func(m map[string]any) { delete(m, "binding") }, code: CodeInvalidBinding, field: "binding"},

		{name: "handle short", mut: func(m map[string]any) { binding(m)["capabilityHandle"] = s("c", 31) }, code: CodeInvalidCapability, field: "binding.capabilityHandle"},
		{name: "handle long", mut: func(m map[string]any) { binding(m)["capabilityHandle"] = s("c", 513) }, code: CodeInvalidCapability, field: "binding.capabilityHandle"},
		{name: "handle padded", mut: func(m map[string]any) { binding(m)["capabilityHandle"] = s("c", 40) + "==" }, code: CodeInvalidCapability, field: "binding.capabilityHandle"},
		{name: "handle plus", mut: func(m map[string]any) { binding(m)["capabilityHandle"] = s("c", 40) + "+" }, code: CodeInvalidCapability, field: "binding.capabilityHandle"},
		{name: "handle number", mut: func(m map[string]any) { binding(m)["capabilityHandle"] = 12 }, code: CodeInvalidCapability, field: "binding.capabilityHandle"},
		{name: "handle missing", mut: func(m map[string]any) { delete(binding(m), "capabilityHandle") }, code: CodeInvalidCapability, field: "binding.capabilityHandle"},

		{name: "no operations", mut: func(m map[string]any) { m["operations"] = []any{} }, code: CodeUnsupportedOp, field: "operations"},
		{name: "shell.exec", mut: func(m map[string]any) { m["operations"] = []any{"fs.read", "shell.exec"} }, code: CodeUnsupportedOp, field: "operations"},
		{name: "duplicate operation", mut: func(m map[string]any) { m["operations"] = []any{"fs.read", "fs.read"} }, code: CodeUnsupportedOp, field: "operations"},
		{name: "seven operations", mut: func(m map[string]any) { m["operations"] = append(m["operations"].([]any), "fs.list") }, code: CodeUnsupportedOp, field: "operations"},
		{name: "operations string", mut: func(m map[string]any) { m["operations"] = "fs.read" }, code: CodeUnsupportedOp, field: "operations"},
		{name: "operations missing", mut: func(m map[string]any) { delete(m, "operations") }, code: CodeUnsupportedOp, field: "operations"},

		{name: "limits missing", mut: func(m map[string]any) { delete(m, "limits") }, code: CodeInvalidLimit, field: "limits"},
		{name: "limit missing", mut: func(m map[string]any) { delete(limits(m), "idempotencyTtlMs") }, code: CodeInvalidLimit, field: "limits.idempotencyTtlMs"},
		{name: "limit fraction", mut: func(m map[string]any) { limits(m)["requestTimeoutMs"] = 100.5 }, code: CodeInvalidLimit, field: "limits.requestTimeoutMs"},
		{name: "limit string", mut: func(m map[string]any) { limits(m)["maxQueuedRequests"] = "16" }, code: CodeInvalidLimit, field: "limits.maxQueuedRequests"},
		{name: "limit huge", raw: strings.Replace(string(mustJSON(t, descriptorMap(testSock))), `"maxRequestBytes":1048576`, `"maxRequestBytes":1e400`, 1), code: CodeInvalidLimit, field: "limits.maxRequestBytes"},

		{name: "binding other host", want: Binding{"host-new", "agent-a", 2}, code: CodeBindingMismatch, field: "binding.hostInstanceId"},
		{name: "binding other session", want: Binding{"host-019f", "agent-b", 2}, code: CodeBindingMismatch, field: "binding.sessionId"},
		{name: "binding other generation", want: Binding{"host-019f", "agent-a", 3}, code: CodeBindingMismatch, field: "binding.generation"},
	}
	for _, b := range limitBounds {
		tests = append(tests,
			tc{name: b.name + " below", mut: func(m map[string]any) { limits(m)[b.name] = b.min - 1 }, code: CodeInvalidLimit, field: "limits." + b.name},
			tc{name: b.name + " above", mut: func(m map[string]any) { limits(m)[b.name] = b.max + 1 }, code: CodeInvalidLimit, field: "limits." + b.name},
		)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := json.RawMessage(tt.raw)
			if tt.raw == "" {
				m := descriptorMap(testSock)
				if tt.mut != nil {
					tt.mut(m)
				}
				raw = mustJSON(t, m)
			}
			want := tt.want
			if want == (Binding{}) {
				want = testBinding
			}
			d, e := ParseDescriptor(raw, want)
			if d != nil {
				t.Fatal("descriptor returned with an error")
			}
			wantCode(t, e, tt.code)
			if got, _ := e.Details[DetailField].(string); got != tt.field {
				t.Fatalf("details.field = %q, want %q", got, tt.field)
			}
			if e.Retryable {
				t.Fatal("admission errors are not retryable")
			}
			secretFree(t, "error", errorTexts(e), testSock)
			if strings.Contains(errorTexts(e), "pi-tools") {
				t.Fatalf("error quotes the endpoint: %v", e)
			}
		})
	}
}

// TestDescriptorBounds: every range is inclusive, and identifiers at their maximum pass.
func TestDescriptorBounds(t *testing.T) {
	s := strings.Repeat
	for _, b := range limitBounds {
		for _, v := range []int64{b.min, b.max} {
			m := descriptorMap(testSock)
			limits(m)[b.name] = v
			if _, e := ParseDescriptor(mustJSON(t, m), testBinding); e != nil {
				t.Errorf("%s = %d: %v", b.name, v, e)
			}
		}
	}
	m := descriptorMap("/" + s("p", 99))
	m["adapterId"] = s("a", 128)
	m["adapterVersion"] = "10.20.30-rc.1+" + s("b", 50)
	binding(m)["hostInstanceId"] = s("h", 128)
	binding(m)["sessionId"] = s("s", 256)
	binding(m)["generation"] = int64(1)<<53 - 1
	binding(m)["capabilityHandle"] = s("c", 512)
	m["operations"] = []any{"fs.edit", "fs.list"}
	want := Binding{s("h", 128), s("s", 256), 1<<53 - 1}
	d, e := ParseDescriptor(mustJSON(t, m), want)
	if e != nil {
		t.Fatal(e)
	}
	if got := strings.Join(d.Operations, ","); got != "fs.edit,fs.list" {
		t.Fatalf("operation order lost: %s", got)
	}
	binding(m)["capabilityHandle"] = s("c", 32)
	if _, e := ParseDescriptor(mustJSON(t, m), want); e != nil {
		t.Fatal(e)
	}
}

// TestSelfContainment: the limits must hold the normalized bind and bound frames, with the ids
// and the handle at their longest. U+2028 is legal in an id and costs six bytes on the wire.
func TestSelfContainment(t *testing.T) {
	s := strings.Repeat
	build := func(session string, handle string, req, resp int64) (map[string]any, Binding) {
		m := descriptorMap(testSock)
		binding(m)["hostInstanceId"] = s("h", 128)
		binding(m)["sessionId"] = session
		binding(m)["capabilityHandle"] = handle
		limits(m)["maxRequestBytes"], limits(m)["maxResponseBytes"] = req, resp
		return m, Binding{s("h", 128), session, 2}
	}
	// Maximum ASCII ids and handle fit the minimum limits.
	m, want := build(s("s", 256), s("c", 512), 2048, 1024)
	d, e := ParseDescriptor(mustJSON(t, m), want)
	if e != nil {
		t.Fatalf("maximum ASCII ids: %v", e)
	}
	bind, _ := marshalFrame(d.BindFrame())
	bound, _ := marshalFrame(d.BoundFrame())
	t.Logf("bind %d bytes, bound %d bytes", len(bind), len(bound))

	// Find the session id for which bind fits with the shortest handle but not the longest:
	// the handle alone decides.
	var decided bool
	for k := 1; k <= 256 && !decided; k++ {
		session := s("\u2028", k)
		mShort, want := build(session, s("c", 32), 2048, 1<<22)
		mLong, _ := build(session, s("c", 512), 2048, 1<<22)
		_, eShort := ParseDescriptor(mustJSON(t, mShort), want)
		_, eLong := ParseDescriptor(mustJSON(t, mLong), want)
		if eShort == nil && eLong != nil {
			decided = true
			wantCode(t, eLong, CodeInvalidLimit)
			if eLong.Details[DetailField] != "limits.maxRequestBytes" {
				t.Fatalf("field = %v", eLong.Details[DetailField])
			}
			secretFree(t, "error", errorTexts(eLong), testSock)
			// The rule is exact: bind plus LF is what counts.
			dShort, _ := ParseDescriptor(mustJSON(t, mShort), want)
			b, _ := marshalFrame(dShort.BindFrame())
			if len(b) > 2048 || len(b)+480 <= 2048 {
				t.Fatalf("bind with the short handle is %d bytes", len(b))
			}
		}
	}
	if !decided {
		t.Fatal("no session id length lets the handle decide self-containment")
	}
	// The bound frame has its own limit.
	m, want = build(s("\u2028", 120), s("c", 32), 1<<22, 1024)
	_, e = ParseDescriptor(mustJSON(t, m), want)
	wantCode(t, e, CodeInvalidLimit)
	if e.Details[DetailField] != "limits.maxResponseBytes" {
		t.Fatalf("field = %v", e.Details[DetailField])
	}
}

func TestHandleRedaction(t *testing.T) {
	h, e := NewHandle(testHandle)
	if e != nil {
		t.Fatal(e)
	}
	d := mustDescriptor(t, descriptorMap(testSock))
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %v"} {
		outs = append(outs, fmt.Sprintf(verb, h), fmt.Sprintf(verb, d), fmt.Sprintf(verb, *d), fmt.Sprintf(verb, d.Binding), fmt.Sprintf(verb, []Handle{h}))
	}
	outs = append(outs, h.String(), h.GoString(), fmt.Sprint(h), fmt.Sprintln(d))
	for _, v := range []any{h, d, d.Binding, map[string]Handle{"h": h}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, string(b))
	}
	var buf bytes.Buffer
	for _, hd := range []slog.Handler{slog.NewTextHandler(&buf, nil), slog.NewJSONHandler(&buf, nil)} {
		l := slog.New(hd)
		l.Info("x", "handle", h, "descriptor", d, "binding", d.Binding, slog.Any("any", h))
	}
	outs = append(outs, buf.String())
	for _, o := range outs {
		if strings.Contains(o, testHandle) || strings.Contains(o, testHandle[:16]) {
			t.Fatalf("handle leaked: %s", o)
		}
	}
	if !strings.Contains(buf.String(), redacted) {
		t.Fatal("no redaction marker in the log")
	}
	// The encoder, and only it, reads the value.
	b, _ := marshalFrame(d.BindFrame())
	if !strings.Contains(string(b), `"capabilityHandle":"`+testHandle+`"`) {
		t.Fatalf("bind frame lacks the handle: %s", b)
	}
	for _, k := range []Kind{KindBound, KindInvoke, KindResult, KindAbort, KindAborted, KindRevoke, KindRevoked} {
		f := d.BindFrame()
		f.Kind = k
		b, _ := marshalFrame(f)
		if strings.Contains(string(b), testHandle) {
			t.Fatalf("%s frame carries the handle", k)
		}
	}
	other, _ := NewHandle(strings.Repeat("z", 40))
	if !h.Equal(d.Binding.CapabilityHandle) || h.Equal(other) || h.IsZero() || !(Handle{}).IsZero() {
		t.Fatal("Equal/IsZero")
	}
	if _, e := NewHandle("short"); e == nil || strings.Contains(errorTexts(e), "short") {
		t.Fatalf("NewHandle(short) = %v", e)
	}
}

func TestSummary(t *testing.T) {
	d := mustDescriptor(t, descriptorMap(testSock))
	s := d.Summary()
	b := s.Canonical()
	want := `{"protocolVersion":"1.0","adapterId":"owner-filesystem","adapterVersion":"1.2.0","operations":["fs.list","fs.stat","fs.read","fs.search","fs.write","fs.edit"],"limits":{"maxRequestBytes":1048576,"maxResponseBytes":1048576,"maxConcurrentRequests":4,"maxQueuedRequests":16,"requestTimeoutMs":30000,"maxIdempotencyKeys":256,"idempotencyTtlMs":3600000}}`
	if string(b) != want {
		t.Fatalf("canonical summary =\n%s\nwant\n%s", b, want)
	}
	// A new handle, endpoint or binding is the same policy; another operation order is not.
	m := descriptorMap("/run/other.sock")
	binding(m)["capabilityHandle"] = strings.Repeat("n", 64)
	binding(m)["generation"] = 7
	if !mustDescriptor(t, m).Summary().Equal(s) {
		t.Fatal("summary depends on secret or binding members")
	}
	m = descriptorMap(testSock)
	m["operations"] = []any{"fs.stat", "fs.list", "fs.read", "fs.search", "fs.write", "fs.edit"}
	if mustDescriptor(t, m).Summary().Equal(s) {
		t.Fatal("summary ignores operation order")
	}
	m = descriptorMap(testSock)
	limits(m)["maxQueuedRequests"] = 15
	if mustDescriptor(t, m).Summary().Equal(s) {
		t.Fatal("summary ignores limits")
	}
	s.Operations[0] = "mutated"
	if d.Operations[0] != OpList {
		t.Fatal("Summary shares the descriptor's operations")
	}
}
