package schemas_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/internal/tooladapter/toolclient"
)

// toolDefs are the definitions of tool-adapter.schema.json that tests address one by one.
var toolDefs = []string{
	"descriptor", "policySummary", "frame", "bindFrame", "boundFrame", "invokeFrame", "resultFrame", "abortFrame",
	"abortedFrame", "revokeFrame", "revokedFrame", "relativePath", "listPayload", "statPayload", "readPayload",
	"searchPayload", "writePayload", "editPayload", "listResult", "statResult", "readResult", "searchResult",
	"writeResult", "editResult",
}

// opDefs names the payload and result definitions of each operation.
var opDefs = map[string][2]string{
	"fs.list":   {"listPayload", "listResult"},
	"fs.stat":   {"statPayload", "statResult"},
	"fs.read":   {"readPayload", "readResult"},
	"fs.search": {"searchPayload", "searchResult"},
	"fs.write":  {"writePayload", "writeResult"},
	"fs.edit":   {"editPayload", "editResult"},
}

var frameKinds = []string{"bind", "bound", "invoke", "result", "abort", "aborted", "revoke", "revoked"}

const (
	testHostID = "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f"
	testHandle = "q1Zx7vN0b9Yc-_3kLmP4sRtUwE8hJ2aG5dF6iO1pQ0c" // 43 characters of base64url
)

// baseDescriptor is a valid descriptor bound to session "s", generation 1, the identity that
// openLine puts on the envelope.
func baseDescriptor() map[string]any {
	return map[string]any{
		"protocolVersion": "1.0",
		"adapterId":       "airlock-fs",
		"adapterVersion":  "0.1.0",
		"endpoint":        map[string]any{"transport": "unix", "path": "/run/airlock-fs/fs.sock"},
		"binding":         map[string]any{"hostInstanceId": testHostID, "sessionId": "s", "generation": 1, "capabilityHandle": testHandle},
		"operations":      []any{"fs.read", "fs.list", "fs.stat"},
		"limits": map[string]any{"maxRequestBytes": 1048576, "maxResponseBytes": 1048576, "maxConcurrentRequests": 4,
			"maxQueuedRequests": 16, "requestTimeoutMs": 30000, "maxIdempotencyKeys": 256, "idempotencyTtlMs": 3600000},
	}
}

// toolDescriptor returns baseDescriptor as JSON with members replaced: each key of over is a
// dotted member path and its value the member's JSON text, or "" to remove the member.
func toolDescriptor(over map[string]string) string {
	d := baseDescriptor()
	for path, raw := range over {
		keys := strings.Split(path, ".")
		m := d
		for _, k := range keys[:len(keys)-1] {
			m = m[k].(map[string]any)
		}
		last := keys[len(keys)-1]
		if raw == "" {
			delete(m, last)
		} else {
			m[last] = json.RawMessage(raw)
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// toolsLine is an open of session "s", generation 1, whose resources.tools is tools.
func toolsLine(version, tools string) string {
	return openLine(version, openPayload(`"resources":`+resources(`"tools":`+tools), "resources"))
}

// toolLine is an invokeTool command.
func toolLine(version, identity, payload string) string {
	return line(version, "invokeTool", identity, payload)
}

// compact returns data without insignificant space: a fixture as one frame line.
func compact(t testing.TB, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	return b.Bytes()
}

// incarnation reads the binding a descriptor names, so that a fixture or a table case can be
// parsed as bound to itself: the host and envelope it must match are runtime facts.
func incarnation(raw string) tooladapter.Binding {
	var probe struct {
		Binding struct {
			HostInstanceID string `json:"hostInstanceId"`
			SessionID      string `json:"sessionId"`
			Generation     int64  `json:"generation"`
		} `json:"binding"`
	}
	_ = json.Unmarshal([]byte(raw), &probe)
	return tooladapter.Binding{HostInstanceID: probe.Binding.HostInstanceID, SessionID: probe.Binding.SessionID, Generation: probe.Binding.Generation}
}

// TestToolAdapterFixtures validates the tool-adapter fixtures against the schema and runs them
// through the Go code that checks the same thing: descriptor-* through ParseDescriptor (bound to
// itself), frame-* through DecodeFrame, payload-OP-* through ValidatePayload and result-OP-*
// through ValidateResult. Both must accept every fixture and refuse every one under invalid/.
func TestToolAdapterFixtures(t *testing.T) {
	v := newValidator(t)
	dir := filepath.Join("testdata", "fixtures", "tooladapter")
	covered := map[string]bool{}
	for _, invalid := range []bool{false, true} {
		d := dir
		if invalid {
			d = filepath.Join(dir, "invalid")
		}
		paths, _ := filepath.Glob(filepath.Join(d, "*.json"))
		for _, path := range paths {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			line := compact(t, data)
			inst := parseInstance(t, line)
			name := strings.TrimSuffix(filepath.Base(path), ".json")
			group, rest, _ := strings.Cut(name, "-")
			var def, key string
			var goErr *protocol.Error
			switch group {
			case "descriptor":
				def, key = "descriptor", "descriptor"
				_, goErr = tooladapter.ParseDescriptor(line, incarnation(string(line)))
			case "frame":
				kind, _ := inst.(map[string]any)["kind"].(string)
				def, key = "frame", "frame "+kind
				_, goErr = tooladapter.DecodeFrame(line)
			case "payload", "result":
				op := rest[:strings.LastIndex(rest, "-")]
				defs, ok := opDefs[op]
				if !ok {
					t.Fatalf("%s: unknown operation %q", path, op)
				}
				key = group + " " + op
				if group == "payload" {
					def, goErr = defs[0], tooladapter.ValidatePayload(op, line)
				} else {
					def, goErr = defs[1], tooladapter.ValidateResult(op, line)
				}
			default:
				t.Fatalf("%s: name does not say what it is", path)
			}
			schemaErr := v.toolDef(t, def).Validate(inst)
			if group == "descriptor" || group == "frame" {
				if rootErr := v.tool.Validate(inst); (rootErr == nil) != (schemaErr == nil) {
					t.Errorf("%s: the root schema and %s disagree: %v / %v", path, def, rootErr, schemaErr)
				}
			}
			switch {
			case !invalid && schemaErr != nil:
				t.Errorf("%s: schema refuses it: %v", path, schemaErr)
			case !invalid && goErr != nil:
				t.Errorf("%s: the code refuses it: %s %s %v", path, goErr.Code, goErr.Message, goErr.Details)
			case invalid && schemaErr == nil:
				t.Errorf("%s validates, but it should not", path)
			case invalid && goErr == nil:
				t.Errorf("%s: the code accepts it, but it should not", path)
			}
			covered[fmt.Sprintf("%v %s", invalid, key)] = true
		}
	}
	want := []string{"descriptor"}
	for _, k := range frameKinds {
		want = append(want, "frame "+k)
	}
	for op := range opDefs {
		want = append(want, "payload "+op, "result "+op)
	}
	for _, w := range want {
		for _, invalid := range []bool{false, true} {
			if !covered[fmt.Sprintf("%v %s", invalid, w)] {
				t.Errorf("no fixture for %s (invalid=%v)", w, invalid)
			}
		}
	}
}

// descriptorCase is one descriptor, the code ParseDescriptor answers ("" when it accepts) and
// whether the schema accepts it.
type descriptorCase struct {
	name   string
	over   map[string]string // changes to baseDescriptor; see toolDescriptor
	raw    string            // the whole descriptor text, instead of over
	want   *tooladapter.Binding
	code   string
	schema bool
}

// descriptorCases compare ParseDescriptor with the descriptor definition. They agree on every
// case but those whose code is a rule a schema cannot express; those cases have schema:true and
// a code, and are exactly:
//
//   - the binding (tool_adapter_binding_mismatch): the descriptor must name this host's
//     instance id and the open envelope's session and generation;
//   - self-containment (invalid_tool_adapter_limit): the serialized normalized bind frame must
//     fit maxRequestBytes and the bound frame maxResponseBytes, LF included;
//   - byte bounds: the endpoint path is bounded in UTF-8 bytes, the schema counts code points.
//
// Duplicate keys, the lexical form of numbers and the 64 KiB bound on the raw text are also
// invisible to a schema; JSON parsing hides the first two, so they are not in this table.
var descriptorCases = []descriptorCase{
	{name: "base", code: "", schema: true},
	{name: "all six operations in reverse order", over: map[string]string{"operations": `["fs.edit","fs.write","fs.search","fs.read","fs.stat","fs.list"]`}, schema: true},
	{name: "not an object", raw: `["airlock-fs"]`, code: "invalid_tool_adapter_descriptor"},
	{name: "protocolVersion 1.1", over: map[string]string{"protocolVersion": `"1.1"`}, code: "unsupported_tool_adapter_version"},
	{name: "protocolVersion number", over: map[string]string{"protocolVersion": `1.0`}, code: "unsupported_tool_adapter_version"},
	{name: "protocolVersion missing", over: map[string]string{"protocolVersion": ""}, code: "unsupported_tool_adapter_version"},
	{name: "adapterId 128", over: map[string]string{"adapterId": `"a` + rep("-", 127) + `"`}, schema: true},
	{name: "adapterId 129", over: map[string]string{"adapterId": `"a` + rep("-", 128) + `"`}, code: "invalid_tool_adapter_identity"},
	{name: "adapterId leading dot", over: map[string]string{"adapterId": `".fs"`}, code: "invalid_tool_adapter_identity"},
	{name: "adapterId colon", over: map[string]string{"adapterId": `"fs:1"`}, code: "invalid_tool_adapter_identity"},
	{name: "adapterId null", over: map[string]string{"adapterId": `null`}, code: "invalid_tool_adapter_identity"},
	{name: "adapterVersion prerelease and build", over: map[string]string{"adapterVersion": `"1.2.3-rc.1+build.5"`}, schema: true},
	{name: "adapterVersion 64", over: map[string]string{"adapterVersion": `"1.0.0-` + rep("a", 58) + `"`}, schema: true},
	{name: "adapterVersion 65", over: map[string]string{"adapterVersion": `"1.0.0-` + rep("a", 59) + `"`}, code: "invalid_tool_adapter_identity"},
	{name: "adapterVersion two parts", over: map[string]string{"adapterVersion": `"1.0"`}, code: "invalid_tool_adapter_identity"},
	{name: "adapterVersion leading zero", over: map[string]string{"adapterVersion": `"01.0.0"`}, code: "invalid_tool_adapter_identity"},
	{name: "adapterVersion empty prerelease", over: map[string]string{"adapterVersion": `"1.0.0-"`}, code: "invalid_tool_adapter_identity"},
	{name: "transport tcp", over: map[string]string{"endpoint.transport": `"tcp"`}, code: "invalid_tool_adapter_endpoint"},
	{name: "endpoint missing", over: map[string]string{"endpoint": ""}, code: "invalid_tool_adapter_endpoint"},
	{name: "endpoint path relative", over: map[string]string{"endpoint.path": `"run/fs.sock"`}, code: "invalid_tool_adapter_endpoint"},
	{name: "endpoint path root", over: map[string]string{"endpoint.path": `"/"`}, code: "invalid_tool_adapter_endpoint"},
	{name: "endpoint path double slash", over: map[string]string{"endpoint.path": `"/run//fs.sock"`}, code: "invalid_tool_adapter_endpoint"},
	{name: "endpoint path dot segment", over: map[string]string{"endpoint.path": `"/run/./fs.sock"`}, code: "invalid_tool_adapter_endpoint"},
	{name: "endpoint path dot dot segment", over: map[string]string{"endpoint.path": `"/run/../fs.sock"`}, code: "invalid_tool_adapter_endpoint"},
	{name: "endpoint path trailing slash", over: map[string]string{"endpoint.path": `"/run/fs/"`}, code: "invalid_tool_adapter_endpoint"},
	{name: "endpoint path dotted names", over: map[string]string{"endpoint.path": `"/run/..fs/.s/...sock"`}, schema: true},
	{name: "endpoint path control", over: map[string]string{"endpoint.path": `"/run/fs\u0085.sock"`}, code: "invalid_tool_adapter_endpoint"},
	{name: "endpoint path 100 bytes", over: map[string]string{"endpoint.path": `"/` + rep("s", 99) + `"`}, schema: true},
	{name: "endpoint path 101 bytes", over: map[string]string{"endpoint.path": `"/` + rep("s", 100) + `"`}, code: "invalid_tool_adapter_endpoint"},
	{name: "endpoint path 99 code points of 199 bytes", over: map[string]string{"endpoint.path": `"/` + rep("ü", 98) + `"`}, code: "invalid_tool_adapter_endpoint", schema: true},
	{name: "hostInstanceId 128 runes", over: map[string]string{"binding.hostInstanceId": `"` + rep("ж", 128) + `"`}, schema: true},
	{name: "hostInstanceId 129", over: map[string]string{"binding.hostInstanceId": `"` + rep("h", 129) + `"`}, code: "invalid_tool_adapter_binding"},
	{name: "sessionId 256 astral runes", over: map[string]string{"binding.sessionId": `"` + rep("😀", 256) + `"`}, schema: true},
	{name: "sessionId 257", over: map[string]string{"binding.sessionId": `"` + rep("s", 257) + `"`}, code: "invalid_tool_adapter_binding"},
	{name: "sessionId tab", over: map[string]string{"binding.sessionId": `"a\tb"`}, code: "invalid_tool_adapter_binding"},
	{name: "generation 2^53-1", over: map[string]string{"binding.generation": `9007199254740991`}, schema: true},
	{name: "generation 2^53", over: map[string]string{"binding.generation": `9007199254740992`}, code: "invalid_tool_adapter_binding"},
	{name: "generation negative", over: map[string]string{"binding.generation": `-1`}, code: "invalid_tool_adapter_binding"},
	{name: "generation fraction", over: map[string]string{"binding.generation": `1.5`}, code: "invalid_tool_adapter_binding"},
	{name: "binding missing", over: map[string]string{"binding": ""}, code: "invalid_tool_adapter_binding"},
	{name: "handle 32", over: map[string]string{"binding.capabilityHandle": `"` + rep("A", 32) + `"`}, schema: true},
	{name: "handle 31", over: map[string]string{"binding.capabilityHandle": `"` + rep("A", 31) + `"`}, code: "invalid_tool_adapter_capability"},
	{name: "handle 512", over: map[string]string{"binding.capabilityHandle": `"` + rep("_-", 256) + `"`}, schema: true},
	{name: "handle 513", over: map[string]string{"binding.capabilityHandle": `"` + rep("_-", 256) + `A"`}, code: "invalid_tool_adapter_capability"},
	{name: "handle padded", over: map[string]string{"binding.capabilityHandle": `"` + testHandle + `="`}, code: "invalid_tool_adapter_capability"},
	{name: "handle standard alphabet", over: map[string]string{"binding.capabilityHandle": `"` + rep("a+/b", 10) + `"`}, code: "invalid_tool_adapter_capability"},
	{name: "handle missing", over: map[string]string{"binding.capabilityHandle": ""}, code: "invalid_tool_adapter_capability"},
	{name: "operations empty", over: map[string]string{"operations": `[]`}, code: "unsupported_tool_operation"},
	{name: "operations duplicate", over: map[string]string{"operations": `["fs.read","fs.stat","fs.read"]`}, code: "unsupported_tool_operation"},
	{name: "operation unknown", over: map[string]string{"operations": `["fs.exec"]`}, code: "unsupported_tool_operation"},
	{name: "operation lifecycle kind", over: map[string]string{"operations": `["bind"]`}, code: "unsupported_tool_operation"},
	{name: "operations seven", over: map[string]string{"operations": `["fs.list","fs.stat","fs.read","fs.search","fs.write","fs.edit","fs.list"]`}, code: "unsupported_tool_operation"},
	{name: "operations string", over: map[string]string{"operations": `"fs.read"`}, code: "unsupported_tool_operation"},
	{name: "limits missing", over: map[string]string{"limits": ""}, code: "invalid_tool_adapter_limit"},
	{name: "limit missing", over: map[string]string{"limits.idempotencyTtlMs": ""}, code: "invalid_tool_adapter_limit"},
	{name: "limit string", over: map[string]string{"limits.requestTimeoutMs": `"30000"`}, code: "invalid_tool_adapter_limit"},
	{name: "maxRequestBytes 2047", over: map[string]string{"limits.maxRequestBytes": `2047`}, code: "invalid_tool_adapter_limit"},
	{name: "maxRequestBytes 4194305", over: map[string]string{"limits.maxRequestBytes": `4194305`}, code: "invalid_tool_adapter_limit"},
	{name: "maxResponseBytes 1023", over: map[string]string{"limits.maxResponseBytes": `1023`}, code: "invalid_tool_adapter_limit"},
	{name: "maxConcurrentRequests 0", over: map[string]string{"limits.maxConcurrentRequests": `0`}, code: "invalid_tool_adapter_limit"},
	{name: "maxConcurrentRequests 65", over: map[string]string{"limits.maxConcurrentRequests": `65`}, code: "invalid_tool_adapter_limit"},
	{name: "maxQueuedRequests 0", over: map[string]string{"limits.maxQueuedRequests": `0`}, schema: true},
	{name: "maxQueuedRequests 257", over: map[string]string{"limits.maxQueuedRequests": `257`}, code: "invalid_tool_adapter_limit"},
	{name: "requestTimeoutMs 99", over: map[string]string{"limits.requestTimeoutMs": `99`}, code: "invalid_tool_adapter_limit"},
	{name: "requestTimeoutMs 120001", over: map[string]string{"limits.requestTimeoutMs": `120001`}, code: "invalid_tool_adapter_limit"},
	{name: "maxIdempotencyKeys 4097", over: map[string]string{"limits.maxIdempotencyKeys": `4097`}, code: "invalid_tool_adapter_limit"},
	{name: "idempotencyTtlMs 999", over: map[string]string{"limits.idempotencyTtlMs": `999`}, code: "invalid_tool_adapter_limit"},
	{name: "idempotencyTtlMs 86400001", over: map[string]string{"limits.idempotencyTtlMs": `86400001`}, code: "invalid_tool_adapter_limit"},
	{name: "minimum limits", over: map[string]string{"limits": `{"maxRequestBytes":2048,"maxResponseBytes":1024,"maxConcurrentRequests":1,"maxQueuedRequests":0,"requestTimeoutMs":100,"maxIdempotencyKeys":1,"idempotencyTtlMs":1000}`}, schema: true},
	{name: "unknown member", over: map[string]string{"root": `"/"`}, code: "invalid_tool_adapter_field"},
	{name: "unknown endpoint member", over: map[string]string{"endpoint.mode": `"0600"`}, code: "invalid_tool_adapter_field"},
	{name: "unknown binding member", over: map[string]string{"binding.bearer": `"x"`}, code: "invalid_tool_adapter_field"},
	{name: "unknown limit", over: map[string]string{"limits.maxFileBytes": `1`}, code: "invalid_tool_adapter_field"},
	{name: "case variant member", over: map[string]string{"adapterID": `"fs"`}, code: "invalid_tool_adapter_field"},

	// Runtime rules the schema cannot express.
	{name: "maximum-length ids and handle in the minimum limits", over: maxIdentity(`{"maxRequestBytes":2048,"maxResponseBytes":1024,"maxConcurrentRequests":1,"maxQueuedRequests":0,"requestTimeoutMs":100,"maxIdempotencyKeys":1,"idempotencyTtlMs":1000}`),
		code: "invalid_tool_adapter_limit", schema: true},
	{name: "maximum-length ids: bound frame over maxResponseBytes", over: maxIdentity(`{"maxRequestBytes":8192,"maxResponseBytes":1024,"maxConcurrentRequests":1,"maxQueuedRequests":0,"requestTimeoutMs":100,"maxIdempotencyKeys":1,"idempotencyTtlMs":1000}`),
		code: "invalid_tool_adapter_limit", schema: true},
	{name: "maximum-length ids and handle in room enough", over: maxIdentity(`{"maxRequestBytes":8192,"maxResponseBytes":8192,"maxConcurrentRequests":64,"maxQueuedRequests":256,"requestTimeoutMs":120000,"maxIdempotencyKeys":4096,"idempotencyTtlMs":86400000}`),
		schema: true},
	{name: "bound to another host", want: &tooladapter.Binding{HostInstanceID: "another-host", SessionID: "s", Generation: 1}, code: "tool_adapter_binding_mismatch", schema: true},
	{name: "bound to another session", want: &tooladapter.Binding{HostInstanceID: testHostID, SessionID: "t", Generation: 1}, code: "tool_adapter_binding_mismatch", schema: true},
	{name: "bound to another generation", want: &tooladapter.Binding{HostInstanceID: testHostID, SessionID: "s", Generation: 2}, code: "tool_adapter_binding_mismatch", schema: true},
}

// maxIdentity sets every identifier and the handle to its maximum length, in the widest
// characters each allows, with the given limits and all six operations.
func maxIdentity(limits string) map[string]string {
	return map[string]string{
		"adapterId":                "\"a" + rep("-", 127) + "\"",
		"adapterVersion":           "\"1.0.0-" + rep("a", 58) + "\"",
		"binding.hostInstanceId":   "\"" + rep("😀", 128) + "\"",
		"binding.sessionId":        "\"" + rep("😀", 256) + "\"",
		"binding.capabilityHandle": "\"" + rep("_-", 256) + "\"",
		"operations":               `["fs.list","fs.stat","fs.read","fs.search","fs.write","fs.edit"]`,
		"limits":                   limits,
	}
}

// TestDescriptorAgreement runs every descriptor case through ParseDescriptor and the schema.
func TestDescriptorAgreement(t *testing.T) {
	if len(descriptorCases) < 25 {
		t.Fatalf("only %d descriptor cases", len(descriptorCases))
	}
	v := newValidator(t)
	sch := v.toolDef(t, "descriptor")
	seen := map[string]bool{}
	for _, tc := range descriptorCases {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.raw
			if raw == "" {
				raw = toolDescriptor(tc.over)
			}
			want := incarnation(raw)
			if tc.want != nil {
				want = *tc.want
			}
			d, e := tooladapter.ParseDescriptor(json.RawMessage(raw), want)
			code := ""
			if e != nil {
				code = e.Code
				if strings.Contains(e.Message, testHandle) || strings.Contains(fmt.Sprint(e.Details), testHandle) {
					t.Errorf("the error quotes the handle: %v", e)
				}
			}
			if code != tc.code {
				t.Errorf("ParseDescriptor: %q, want %q (%v)", code, tc.code, e)
			}
			schemaErr := sch.Validate(parseInstance(t, []byte(raw)))
			if (schemaErr == nil) != tc.schema {
				t.Errorf("schema accepts=%v, table says %v: %v", schemaErr == nil, tc.schema, schemaErr)
			}
			if tc.schema != (tc.code == "") && !(tc.schema && tc.code != "") {
				t.Errorf("the table disagrees with itself")
			}
			if d != nil {
				// The summary a policy keeps validates too, and holds neither handle nor endpoint.
				sum := d.Summary().Canonical()
				if err := v.toolDef(t, "policySummary").Validate(parseInstance(t, sum)); err != nil {
					t.Errorf("summary: %v", err)
				}
				if bytes.Contains(sum, []byte(testHandle)) || bytes.Contains(sum, []byte("fs.sock")) {
					t.Errorf("summary leaks: %s", sum)
				}
			}
		})
	}
}

// TestRelativePathAgreement compares ValidateRelativePath with the relativePath definition.
// Only the byte bound differs: 4096 bytes of UTF-8, which a schema can only count as code
// points; byteBound lists the paths that only the code refuses for it.
func TestRelativePathAgreement(t *testing.T) {
	v := newValidator(t)
	sch := v.toolDef(t, "relativePath")
	paths := []string{
		".", "a", "a/b", "a/b/c.txt", "...", ".a", "..a", "a..", "a/..b/.c/...", "-", "~", " ", "a b/c", "a:b", "ü/ж/😀",
		"a\u00a0b", "a\u2028b", rep("a", 4096), rep("a/", 2047) + "aa", rep("a", 4097), rep("ü", 2048), rep("ü", 2049) + "x",
		"", "/", "/a", "a/", "a//b", "./a", "a/./b", "a/.", "..", "../a", "a/..", "a/../b", "./", ".//", "a\\b", "\\",
		"a\tb", "a\nb", "a\x00b", "a\x7fb", "a\u0085b", "a\u009fb",
	}
	byteBound := map[string]bool{rep("ü", 2049) + "x": true}
	for _, p := range paths {
		code := tooladapter.ValidateRelativePath(p) == nil
		schema := sch.Validate(p) == nil
		if byteBound[p] {
			if code || !schema {
				t.Errorf("%d bytes: ValidateRelativePath accepts=%v, schema accepts=%v; want false, true", len(p), code, schema)
			}
			continue
		}
		if code != schema {
			t.Errorf("%q: ValidateRelativePath accepts=%v, schema accepts=%v", p, code, schema)
		}
	}
}

// --- A real daemon and a scripted adapter ---

// adapterFrame is one frame the scripted adapter received or sent.
type adapterFrame struct {
	session string
	gen     int64
	out     bool // sent by the adapter
	raw     string
	m       map[string]any
}

// scriptedToolAdapter is a host tool adapter written for this test. It validates every line the
// daemon sends and every line it answers against the tool-adapter schema and DecodeFrame, and
// records them all. It behaves by session id: t-silent never answers bind, t-echo answers bound
// with the operations reversed, t-reflect answers with the handle in it; any other session is
// served. An invoke of the path "slow" is left unanswered until the daemon aborts it, then it
// gets an aborted acknowledgement and a late result.
type scriptedToolAdapter struct {
	t      *testing.T
	v      *validator
	socket string
	ln     net.Listener
	wg     sync.WaitGroup
	slow   chan string // the request id of each slow invoke received

	mu     sync.Mutex
	conns  []net.Conn
	frames []adapterFrame
}

func startToolAdapter(t *testing.T, v *validator) *scriptedToolAdapter {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "al-ta-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	a := &scriptedToolAdapter{t: t, v: v, socket: filepath.Join(dir, "fs.sock"), slow: make(chan string, 4)}
	ln, err := net.Listen("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.socket, 0o600); err != nil {
		t.Fatal(err)
	}
	a.ln = ln
	a.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.mu.Lock()
			a.conns = append(a.conns, c)
			a.mu.Unlock()
			a.wg.Go(func() { a.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		a.mu.Lock()
		for _, c := range a.conns {
			c.Close()
		}
		a.mu.Unlock()
		a.wg.Wait()
	})
	return a
}

// check validates one frame line (without its LF) and records it.
func (a *scriptedToolAdapter) check(line []byte, out bool) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		a.t.Errorf("frame is not JSON: %v: %s", err, line)
		return nil
	}
	if err := a.v.tool.Validate(parseInstance(a.t, line)); err != nil {
		a.t.Errorf("frame (from adapter: %v) does not validate: %v\n%s", out, err, line)
	}
	if _, e := tooladapter.DecodeFrame(line); e != nil {
		a.t.Errorf("DecodeFrame refuses a frame (from adapter: %v): %v\n%s", out, e, line)
	}
	sid, _ := m["sessionId"].(string)
	a.mu.Lock()
	a.frames = append(a.frames, adapterFrame{session: sid, gen: num(m["generation"]), out: out, raw: string(line), m: m})
	a.mu.Unlock()
	return m
}

func (a *scriptedToolAdapter) serve(c net.Conn) {
	defer c.Close()
	rd := bufio.NewReaderSize(c, 64<<10)
	var session string
	var identity map[string]any
	var slow map[string]any // the unanswered slow invoke
	write := func(f map[string]any) bool {
		b, err := json.Marshal(f)
		if err != nil {
			a.t.Error(err)
			return false
		}
		a.check(b, true)
		_, err = c.Write(append(b, '\n'))
		return err == nil
	}
	reply := func(kind string, members map[string]any) map[string]any {
		f := map[string]any{"kind": kind}
		for k, v := range identity {
			f[k] = v
		}
		for k, v := range members {
			f[k] = v
		}
		return f
	}
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			return
		}
		m := a.check(bytes.TrimSuffix(line, []byte("\n")), false)
		if m == nil {
			return
		}
		if identity == nil {
			session, _ = m["sessionId"].(string)
			identity = map[string]any{}
			for _, k := range []string{"protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"} {
				identity[k] = m[k]
			}
		}
		var ok bool
		switch m["kind"] {
		case "bind":
			ops := m["operations"].([]any)
			switch session {
			case "t-silent":
				continue
			case "t-echo":
				ops = slices.Clone(ops)
				slices.Reverse(ops)
			}
			f := reply("bound", map[string]any{"operations": ops, "limits": m["limits"]})
			if session == "t-reflect" {
				f["sessionId"] = m["capabilityHandle"]
			}
			ok = write(f)
		case "invoke":
			payload := m["payload"].(map[string]any)
			if payload["path"] == "slow" {
				slow = m
				a.slow <- m["requestId"].(string)
				continue
			}
			ok = write(reply("result", answer(m)))
		case "abort":
			ok = write(reply("aborted", map[string]any{"requestId": m["requestId"], "targetRequestId": m["targetRequestId"], "aborted": true}))
			if ok && slow != nil && slow["requestId"] == m["targetRequestId"] {
				ok = write(reply("result", answer(slow))) // late: the daemon drops it
				slow = nil
			}
		case "revoke":
			ok = write(reply("revoked", nil))
		default:
			a.t.Errorf("the daemon sent a %v frame", m["kind"])
		}
		if !ok {
			return
		}
	}
}

// answer returns the result members for an invoke: typed data, or for fs.edit a failure whose
// message the daemon must not pass on.
func answer(inv map[string]any) map[string]any {
	r := map[string]any{"requestId": inv["requestId"], "idempotencyKey": inv["idempotencyKey"], "operation": inv["operation"], "ok": true}
	p := inv["payload"].(map[string]any)
	switch inv["operation"] {
	case "fs.list":
		r["data"] = map[string]any{"entries": []any{map[string]any{"name": "a.txt", "type": "file", "size": 5, "modifiedAt": "2026-03-14T09:26:53.5Z"},
			map[string]any{"name": "sub", "type": "directory"}}, "truncated": false}
	case "fs.stat":
		r["data"] = map[string]any{"type": "file", "size": 5}
	case "fs.read":
		r["data"] = map[string]any{"content": "hello", "bytesRead": 5, "eof": true}
	case "fs.search":
		r["data"] = map[string]any{"matches": []any{map[string]any{"path": "a.txt", "line": 1, "column": 1, "text": "hello"}}, "truncated": false}
	case "fs.write":
		content, _ := p["content"].(string)
		sum := sha256.Sum256([]byte(content))
		r["data"] = map[string]any{"created": true, "bytesWritten": len(content), "digest": hex.EncodeToString(sum[:])}
	case "fs.edit":
		delete(r, "data")
		r["ok"] = false
		r["error"] = map[string]any{"code": "edit_ambiguous", "message": "oldText matches twice in /home/secret/a.txt", "retryable": false}
	}
	return r
}

// sent returns the frames of a session generation, in order, optionally only those the daemon sent.
func (a *scriptedToolAdapter) sent(session string, gen int64, daemonOnly bool) []adapterFrame {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []adapterFrame
	for _, f := range a.frames {
		if f.session == session && f.gen == gen && !(daemonOnly && f.out) {
			out = append(out, f)
		}
	}
	return out
}

func kindsOf(fs []adapterFrame) string {
	var k []string
	for _, f := range fs {
		k = append(k, f.m["kind"].(string))
	}
	return strings.Join(k, ",")
}

// waitKinds waits until the daemon has sent the given frame kinds to a session generation.
func (a *scriptedToolAdapter) waitKinds(session string, gen int64, want string) {
	a.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := kindsOf(a.sent(session, gen, true))
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%s/%d: the daemon sent %s, want %s", session, gen, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// toolDesc is a descriptor for the scripted adapter as a Go value.
func toolDesc(socket, host, session string, gen int64, handle string, timeoutMs int, ops ...string) map[string]any {
	return map[string]any{
		"protocolVersion": "1.0", "adapterId": "scripted-fs", "adapterVersion": "1.0.0",
		"endpoint":   map[string]any{"transport": "unix", "path": socket},
		"binding":    map[string]any{"hostInstanceId": host, "sessionId": session, "generation": gen, "capabilityHandle": handle},
		"operations": ops,
		"limits": map[string]any{"maxRequestBytes": 65536, "maxResponseBytes": 65536, "maxConcurrentRequests": 1,
			"maxQueuedRequests": 0, "requestTimeoutMs": timeoutMs, "maxIdempotencyKeys": 16, "idempotencyTtlMs": 60000},
	}
}

// checkRawDigest recomputes the policyDigest of the catalog record in a describeSession
// response line from the policy's own text: policy.toolAdapter is kept as the canonical JSON of
// the summary, and only its original member order hashes to the digest.
func checkRawDigest(t *testing.T, line string) {
	t.Helper()
	var resp struct {
		Data struct {
			Record struct {
				PolicyDigest string          `json:"policyDigest"`
				Policy       json.RawMessage `json:"policy"`
			} `json:"record"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(line), &resp); err != nil {
		t.Fatal(err)
	}
	var pol protocol.Policy
	if err := json.Unmarshal(resp.Data.Record.Policy, &pol); err != nil {
		t.Fatal(err)
	}
	if got := pol.Digest(); got != resp.Data.Record.PolicyDigest {
		t.Errorf("policyDigest %s, recomputed %s", resp.Data.Record.PolicyDigest, got)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestToolAdapterServerOutput drives host tool adapters through a real daemon and a scripted
// adapter on a real socket. Every line the daemon sends to its clients is validated against the
// protocol schemas, and every frame on the adapter socket, both ways, against the tool-adapter
// schema.
func TestToolAdapterServerOutput(t *testing.T) {
	v := newValidator(t)
	d, socket, cwd, llm := startDaemon(t, daemon.DefaultLimits)
	adapter := startToolAdapter(t, v)
	for name, content := range map[string]string{"a.txt": "hello", "slow": "zzz"} {
		if err := os.WriteFile(filepath.Join(cwd, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(cwd, "link")); err != nil {
		t.Fatal(err)
	}
	checked := 0
	var lines []string
	a := v.dial(t, socket, "a", "1.0", &checked)
	b := v.dial(t, socket, "b", "2.0", &checked)
	x := v.dial(t, socket, "x", "2.0", &checked)
	a.lines, b.lines, x.lines = &lines, &lines, &lines
	waitReady(t, b)
	hs := b.call("handshake", "", `{}`)
	host, _ := hs["hostInstanceId"].(string)
	if caps := b.ok(hs, "handshake")["capabilities"].(map[string]any); caps["hostToolAdapter"] != true {
		t.Errorf("2.x handshake: %v", caps)
	}
	all := []string{"fs.list", "fs.stat", "fs.read", "fs.search", "fs.write", "fs.edit"}
	handle1, handle2, handle3 := rep("h1", 20), rep("h2", 20), rep("h3", 20)
	openTools := func(p *peer, session string, gen int64, desc map[string]any) map[string]any {
		t.Helper()
		payload := openPayload(`"cwd":`+jsonString(cwd)+`,"resources":`+resources(`"tools":{"mode":"host-adapter","descriptor":`+mustJSON(desc)+`}`), "cwd", "resources")
		return p.call("open", fmt.Sprintf(`"sessionId":%s,"generation":%d`, jsonString(session), gen), payload)
	}
	invoke := func(p *peer, session string, gen int64, callID, op, args string) map[string]any {
		t.Helper()
		return p.call("invokeTool", fmt.Sprintf(`"sessionId":%s,"generation":%d`, jsonString(session), gen),
			`{"toolCallId":`+jsonString(callID)+`,"operation":"`+op+`","arguments":`+args+`}`)
	}

	// Refused opens: nothing is bound, nothing persisted.
	b.fail(openTools(b, "t-main", 1, toolDesc(adapter.socket, "another-host", "t-main", 1, handle1, 1000, all...)), "tool_adapter_binding_mismatch")
	b.fail(openTools(b, "t-main", 1, toolDesc(adapter.socket, host, "t-other", 1, handle1, 1000, all...)), "tool_adapter_binding_mismatch")
	bad := toolDesc(adapter.socket, host, "t-main", 1, handle1, 1000, all...)
	bad["binding"].(map[string]any)["bearer"] = "x"
	b.fail(openTools(b, "t-main", 1, bad), "invalid_tool_adapter_field")
	b.fail(openTools(b, "t-main", 1, toolDesc(adapter.socket, host, "t-main", 1, "short", 1000, all...)), "invalid_tool_adapter_capability")
	b.fail(openTools(b, "t-main", 1, toolDesc(adapter.socket, host, "t-main", 1, handle1, 1000, "fs.read", "fs.read")), "unsupported_tool_operation")
	b.fail(openTools(b, "t-main", 1, toolDesc(filepath.Join(filepath.Dir(adapter.socket), "none.sock"), host, "t-main", 1, handle1, 1000, all...)), "adapter_endpoint_insecure")
	longID := rep("𝔰", 256)
	tight := toolDesc(adapter.socket, host, longID, 1, rep("_-", 256), 100, all...)
	tight["adapterId"] = "a" + rep(".", 127)
	tight["limits"].(map[string]any)["maxRequestBytes"] = 2048
	b.fail(openTools(b, longID, 1, tight), "invalid_tool_adapter_limit")
	a.fail(a.send(strings.Replace(toolsLine("1.0", `{"mode":"host-adapter","descriptor":`+toolDescriptor(nil)+`}`), `"requestId":"r-1"`, `"requestId":"a-v1"`, 1)), "invalid_field") // a 1.x tools member must be a string
	b.fail(openTools(b, "t-echo", 1, toolDesc(adapter.socket, host, "t-echo", 1, handle1, 1000, all...)), "tool_adapter_contract_mismatch")
	b.fail(openTools(b, "t-reflect", 1, toolDesc(adapter.socket, host, "t-reflect", 1, handle1, 1000, all...)), "adapter_secret_reflected")
	b.fail(openTools(b, "t-silent", 1, toolDesc(adapter.socket, host, "t-silent", 1, handle1, 100, all...)), "adapter_bind_timeout")
	b.fail(b.call("describeSession", `"sessionId":"t-main"`, `{}`), "session_not_found")

	// The open binds before it answers: the adapter has the bind, with the handle, and the
	// snapshot has fresh telemetry; the catalog keeps the secret-free summary.
	r := b.ok(openTools(b, "t-main", 1, toolDesc(adapter.socket, host, "t-main", 1, handle1, 1000, all...)), "openResult")
	if q, _ := r["session"].(map[string]any)["hostToolAdapterQueue"].(map[string]any); q == nil || len(q["operations"].([]any)) != 6 {
		t.Errorf("open snapshot queue: %v", r["session"])
	}
	if got := kindsOf(adapter.sent("t-main", 1, true)); got != "bind" {
		t.Fatalf("frames after open: %s", got)
	}
	if bind := adapter.sent("t-main", 1, true)[0].m; bind["capabilityHandle"] != handle1 || fmt.Sprint(bind["operations"]) != fmt.Sprint(all) {
		t.Errorf("bind: %v", bind)
	}
	desc := b.ok(b.call("describeSession", `"sessionId":"t-main"`, `{}`), "sessionDescription")
	if pol := desc["record"].(map[string]any)["policy"].(map[string]any); pol["tools"] != "host-adapter" || pol["toolAdapter"] == nil {
		t.Errorf("policy: %v", pol)
	}
	checkRawDigest(t, lines[len(lines)-1])
	r = b.ok(openTools(b, "t-main", 1, toolDesc(adapter.socket, host, "t-main", 1, handle1, 1000, all...)), "openResult")
	if r["created"] != false || kindsOf(adapter.sent("t-main", 1, true)) != "bind" {
		t.Errorf("a repeated open binds again: %v", r)
	}

	// Every operation: typed data, or the adapter's sanitized failure.
	for _, c := range []struct{ op, args string }{
		{"fs.list", `{"path":"."}`}, {"fs.stat", `{"path":"a.txt"}`}, {"fs.read", `{"path":"a.txt","maxBytes":5}`},
		{"fs.search", `{"path":".","query":"hello","maxResults":10}`}, {"fs.write", `{"path":"new.txt","content":"hi","create":true}`},
	} {
		res := b.ok(invoke(b, "t-main", 1, "call-"+c.op, c.op, c.args), "toolResult")
		if res["operation"] != c.op || res["toolCallId"] != "call-"+c.op {
			t.Errorf("%s: %v", c.op, res)
		}
	}
	e := b.fail(invoke(b, "t-main", 1, "call-edit", "fs.edit", `{"path":"a.txt","edits":[{"oldText":"l","newText":"L"}]}`), "edit_ambiguous")
	if det := e["details"].(map[string]any); det["origin"] != "adapter" || det["indeterminate"] != false || strings.Contains(fmt.Sprint(e), "secret") {
		t.Errorf("adapter failure: %v", e)
	}

	// Refusals before dispatch: none of them reaches the adapter.
	before := len(adapter.sent("t-main", 1, true))
	for _, c := range []struct{ op, args, code string }{
		{"fs.read", `{"path":"../outside"}`, "invalid_tool_adapter_path"},
		{"fs.read", `{"path":"/etc/passwd"}`, "invalid_tool_adapter_path"},
		{"fs.read", `{"path":"a//b"}`, "invalid_tool_adapter_path"},
		{"fs.read", `{"path":"link"}`, "adapter_path_symlink"},
		{"fs.read", `{"path":"missing/file"}`, "adapter_path_unavailable"},
		{"fs.write", `{"path":"missing/file","content":""}`, "adapter_path_unavailable"},
		{"fs.read", `{"path":"a.txt","follow":true}`, "adapter_request_invalid"},
		{"fs.read", `{"path":"a.txt","maxBytes":0}`, "adapter_request_invalid"},
		{"fs.exec", `{"path":"a.txt"}`, "adapter_operation_denied"},
	} {
		b.fail(invoke(b, "t-main", 1, "call-x", c.op, c.args), c.code)
	}
	b.fail(invoke(b, "t-main", 1, "", "fs.read", `{"path":"a.txt"}`), "invalid_field")
	b.fail(invoke(b, "t-main", 2, "call-x", "fs.read", `{"path":"a.txt"}`), "session_not_found")
	b.fail(invoke(b, "t-none", 1, "call-x", "fs.read", `{"path":"a.txt"}`), "session_not_found")
	a.fail(a.call("invokeTool", `"sessionId":"t-main","generation":1`, `{"toolCallId":"c","operation":"fs.read","arguments":{}}`), "unknown_operation")
	if n := len(adapter.sent("t-main", 1, true)); n != before {
		t.Errorf("refused requests reached the adapter: %d frames, was %d", n, before)
	}

	// Capacity: one active slot, no queue. A slow request holds the slot; another call is
	// refused before anything is written, retryably, with retryAfterMs = 1000/20. The slow
	// request times out after 1000 ms, indeterminate, and its abort is the one frame sent
	// after it; the adapter's late result is dropped and the connection lives on, so the retry
	// with the same toolCallId (so the same key) succeeds.
	xLine := `{"protocolVersion":"2.0","requestId":"x-slow","operation":"invokeTool","sessionId":"t-main","generation":1,` +
		`"payload":{"toolCallId":"call-slow","operation":"fs.read","arguments":{"path":"slow"}}}`
	if err := x.c.WriteLine([]byte(xLine + "\n")); err != nil {
		t.Fatal(err)
	}
	var slowID string
	select {
	case slowID = <-adapter.slow:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow invoke never reached the adapter")
	}
	e = b.fail(invoke(b, "t-main", 1, "call-retry", "fs.stat", `{"path":"a.txt"}`), "adapter_queue_capacity")
	if det := e["details"].(map[string]any); e["retryable"] != true || num(det["retryAfterMs"]) != 50 || det["indeterminate"] != false {
		t.Errorf("capacity refusal: %v", e)
	}
	timedOut := x.next()
	e = x.fail(timedOut, "adapter_request_timeout")
	if det := e["details"].(map[string]any); e["retryable"] != true || det["indeterminate"] != true {
		t.Errorf("active timeout: %v", e)
	}
	b.ok(invoke(b, "t-main", 1, "call-retry", "fs.stat", `{"path":"a.txt"}`), "toolResult")
	var aborts, keys []string
	for _, f := range adapter.sent("t-main", 1, true) {
		switch f.m["kind"] {
		case "abort":
			aborts = append(aborts, f.m["targetRequestId"].(string))
		case "invoke":
			if f.m["operation"] == "fs.stat" {
				keys = append(keys, f.m["idempotencyKey"].(string))
			}
		}
	}
	if len(aborts) != 1 || aborts[0] != slowID {
		t.Errorf("abort frames %v, want exactly one for %s", aborts, slowID)
	}
	if k := toolclient.IdempotencyKey("fs.stat", "call-retry"); len(keys) != 2 || keys[1] != k {
		t.Errorf("fs.stat keys %v, want the retry's %s", keys, k)
	}

	// Telemetry, in session and host status, to both majors.
	snap := b.ok(b.call("status", `"sessionId":"t-main","generation":1`, `{}`), "sessionSnapshot")
	q := snap["hostToolAdapterQueue"].(map[string]any)
	if num(q["rejectedRequests"]) != 1 || num(q["timedOutRequests"]) != 1 || num(q["failedRequests"]) != 1 ||
		num(q["completedRequests"]) != 6 || q["lastRejectionReason"] != "adapter_queue_capacity" {
		t.Errorf("queue telemetry: %v", q)
	}
	a.ok(a.call("status", "", `{}`), "hostSnapshot")
	a.ok(a.call("status", `"sessionId":"t-main"`, `{}`), "sessionSnapshot")

	// A session without tools has no tool to call.
	b.ok(b.call("open", `"sessionId":"t-plain","generation":1`, openPayload(`"cwd":`+jsonString(cwd), "cwd")), "openResult")
	b.fail(invoke(b, "t-plain", 1, "c", "fs.stat", `{"path":"."}`), "adapter_operation_denied")

	// A turn on a session with tools and a model: the model's calls of granted operations go
	// to the adapter (an adapter failure and refusals before dispatch become the tool's output,
	// not the turn's failure), and b, attached, sees each as toolStart and toolEnd.
	turnDesc := toolDesc(adapter.socket, host, "t-turn", 1, rep("h4", 20), 1000, all...)
	turnOpen := openPayload(`"cwd":`+jsonString(cwd)+`,"model":{"provider":"ollama","id":"qwen3"},"resources":`+
		resources(`"tools":{"mode":"host-adapter","descriptor":`+mustJSON(turnDesc)+`}`), "cwd", "resources")
	const turnSession = `"sessionId":"t-turn","generation":1`
	b.ok(b.call("open", turnSession, turnOpen), "openResult")
	b.ok(b.call("attach", turnSession, `{}`), "attachResult")
	llm.Push(modeltest.Reply{Text: "Looking.", ToolCalls: []model.ToolCall{
		{ID: "call_0", Name: "fs_read", Arguments: `{"path":"a.txt"}`},
		{ID: "call_1", Name: "fs_edit", Arguments: `{"path":"a.txt","edits":[{"oldText":"l","newText":"L"}]}`},
		{ID: "call_2", Name: "shell", Arguments: `{"cmd":"ls"}`},
		{ID: "call_3", Name: "fs_read", Arguments: `{"path":"a.txt","follow":true}`},
	}}, modeltest.Reply{Text: "Read it; the edit failed."})
	resp := b.call("wake", turnSession+`,"idempotencyKey":"k1"`, `{"prompt":"read and edit a.txt"}`)
	if res := b.ok(resp, "wakeResult")["result"].(map[string]any); num(res["toolCalls"]) != 4 || num(res["modelCalls"]) != 2 {
		t.Errorf("turn with tools: %v", res)
	}
	wantTools := map[string]string{"call_0": "fs.read ok", "call_1": "fs.edit edit_ambiguous", "call_2": " unknown_tool", "call_3": "fs.read adapter_request_invalid"}
	for _, ev := range untilIdle(t, b, resp["requestId"].(string)) {
		if ev["event"] != "toolEnd" {
			continue
		}
		data := ev["data"].(map[string]any)
		got, _ := data["operation"].(string)
		if e, _ := data["error"].(map[string]any); e != nil {
			got += " " + e["code"].(string)
		} else {
			got += " ok"
		}
		if id := data["toolCallId"].(string); got != wantTools[id] {
			t.Errorf("toolEnd of %s: %s, want %s", id, got, wantTools[id])
		}
		delete(wantTools, data["toolCallId"].(string))
	}
	if len(wantTools) > 0 {
		t.Errorf("no toolEnd for %v", wantTools)
	}

	// Replacement revokes generation 1; close revokes generation 2.
	gen1 := kindsOf(adapter.sent("t-main", 1, true))
	b.ok(openTools(b, "t-main", 2, toolDesc(adapter.socket, host, "t-main", 2, handle2, 1000, "fs.stat")), "openResult")
	adapter.waitKinds("t-main", 1, gen1+",revoke")
	b.fail(invoke(b, "t-main", 1, "c", "fs.stat", `{"path":"."}`), "stale_generation")
	b.ok(invoke(b, "t-main", 2, "c", "fs.stat", `{"path":"."}`), "toolResult")
	b.fail(invoke(b, "t-main", 2, "c", "fs.read", `{"path":"a.txt"}`), "adapter_operation_denied")
	b.ok(b.call("close", `"sessionId":"t-main","generation":2`, `{}`), "closeResult")
	adapter.waitKinds("t-main", 2, "bind,invoke,revoke")
	b.fail(invoke(b, "t-main", 2, "c", "fs.stat", `{"path":"."}`), "session_not_found")

	// Drain revokes the adapters of the sessions that stay resident; their calls then fail
	// adapter_session_closed.
	b.ok(openTools(b, "t-drain", 1, toolDesc(adapter.socket, host, "t-drain", 1, handle3, 1000, "fs.stat")), "openResult")
	b.ok(b.call("drain", "", `{"timeoutMs":0}`), "drainResult")
	adapter.waitKinds("t-drain", 1, "bind,revoke")
	b.fail(invoke(b, "t-drain", 1, "c", "fs.stat", `{"path":"."}`), "adapter_session_closed")
	b.ok(b.call("status", `"sessionId":"t-drain"`, `{}`), "sessionSnapshot")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// The handle travels in bind frames only; no client line holds a handle or the socket path.
	adapter.mu.Lock()
	defer adapter.mu.Unlock()
	kinds := map[string]int{}
	for _, f := range adapter.frames {
		kinds[f.m["kind"].(string)]++
		if f.out && f.session == handle1 {
			continue // t-reflect's bound, which the daemon refused
		}
		for _, h := range []string{handle1, handle2, handle3} {
			if strings.Contains(f.raw, h) && (f.out || f.m["kind"] != "bind") {
				t.Errorf("the handle travels outside bind: %s", f.raw)
			}
		}
	}
	for _, k := range frameKinds {
		if kinds[k] == 0 {
			t.Errorf("no %s frame seen", k)
		}
	}
	for _, l := range lines {
		if strings.Contains(l, handle1) || strings.Contains(l, handle2) || strings.Contains(l, handle3) || strings.Contains(l, adapter.socket) {
			t.Errorf("a client line leaks the handle or the socket path: %s", l)
		}
	}
	t.Logf("%d client lines and %d adapter frames validated", checked, len(adapter.frames))
}
