package schemas_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/session"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/schemas"
)

// TestMain fails the package when a test leaves goroutines behind: the server tests start
// daemons and clients, and must stop them all.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// validator holds the compiled schemas. Only the embedded files are loaded: a $ref that left
// them would fail to compile, because the compiler has no loader for https. protocol-v2's
// relative references into tool-adapter.schema.json resolve against its $id to the embedded file.
type validator struct {
	c    *jsonschema.Compiler
	root map[int]*jsonschema.Schema // by protocol major
	tool *jsonschema.Schema         // tool-adapter.schema.json: a descriptor or a frame
}

func newValidator(t testing.TB) *validator {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	v := &validator{c: c, root: map[int]*jsonschema.Schema{}}
	for _, name := range schemas.Names {
		f, err := schemas.FS().Open(name)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if id, _ := doc.(map[string]any)["$id"].(string); id != schemas.ID(name) {
			t.Fatalf("%s: $id is %q, want %q", name, id, schemas.ID(name))
		}
		if err := c.AddResource(schemas.ID(name), doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, major := range []int{1, 2} {
		sch, err := c.Compile(schemas.ID(schemas.Protocol(major)))
		if err != nil {
			t.Fatalf("compile %s: %v", schemas.Protocol(major), err)
		}
		v.root[major] = sch
	}
	sch, err := c.Compile(schemas.ID(schemas.ToolAdapter))
	if err != nil {
		t.Fatalf("compile %s: %v", schemas.ToolAdapter, err)
	}
	v.tool = sch
	return v
}

// toolDef compiles one definition of the tool-adapter schema.
func (v *validator) toolDef(t testing.TB, name string) *jsonschema.Schema {
	t.Helper()
	sch, err := v.c.Compile(schemas.ID(schemas.ToolAdapter) + "#/$defs/" + name)
	if err != nil {
		t.Fatalf("compile tool-adapter %s: %v", name, err)
	}
	return sch
}

// def compiles one definition of the schema of a major version.
func (v *validator) def(t testing.TB, major int, name string) *jsonschema.Schema {
	t.Helper()
	sch, err := v.c.Compile(schemas.ID(schemas.Protocol(major)) + "#/$defs/" + name)
	if err != nil {
		t.Fatalf("compile v%d %s: %v", major, name, err)
	}
	return sch
}

func parseInstance(t testing.TB, data []byte) any {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not JSON: %v\n%s", err, data)
	}
	return inst
}

func TestSchemasCompile(t *testing.T) {
	v := newValidator(t)
	defs := []string{
		"command", "response", "error", "event", "handshake", "openResult", "sessionSnapshot",
		"hostSnapshot", "recoveryHealth", "limits", "attachResult", "detachResult", "closeResult",
		"drainResult", "sessionClosedData", "eventDroppedData", "openPayload",
		"ticketId", "wakePayload", "messagePayload", "usage", "turnResult", "wakeResult", "ticketResource",
		"ticketResult", "queuedResult", "abortResult", "promptAcceptedData", "messageStartData",
		"messageUpdateData", "messageEndData", "toolStartData", "toolEndData", "toolCallError", "turnEndData",
		"requestFailedData",
	}
	for _, major := range []int{1, 2} {
		for _, d := range defs {
			v.def(t, major, d)
		}
	}
	for _, d := range []string{"catalogRecord", "policy", "sessionPage", "sessionDescription", "listSessionsPayload",
		"registerAdapterPayload", "adapterNamePayload", "capabilityPayload", "invokeCapabilityPayload",
		"capabilityDescriptor", "adapterStatus", "capabilitySummary", "registerResult", "removeResult", "adapterList",
		"adapterLogsResult", "capabilityList", "capabilityDescription", "capabilityResult",
		"invokeToolPayload", "toolsResource", "toolResult", "hostToolAdapterQueue", "adapterError", "daemonError",
		"ticketPayload", "reconcilePayload", "conversationRef",
		"roomPayload", "createRoomPayload", "inviteRoomPayload", "joinRoomPayload", "publishCapabilityPayload",
		"roomCapabilityPayload", "roomObservePayload", "roomInvokePayload", "decideApprovalPayload",
		"roomSummary", "roomMember", "roomAction", "roomCapability", "roomStatusResult", "fabricStatusResult", "busHostAdmitted", "busHostList", "busHostRemoved", "admitBusHostPayload", "busHostPayload", "roomResult", "roomList",
		"roomDetail", "roomClosed", "inviteResult", "publishResult", "unpublishResult", "roomCapabilityList",
		"roomCallResult", "approval", "approvalList", "approvalDecision", "approvalActor", "approvalMemory",
		"rememberedList", "approvalForgotten", "approvalEventData", "forgetApprovalPayload"} {
		v.def(t, 2, d)
	}
	for _, d := range toolDefs {
		v.toolDef(t, d)
	}
	names, err := fs.Glob(schemas.FS(), "*.schema.json")
	if err != nil || strings.Join(names, " ") != strings.Join([]string{schemas.ProtocolV1, schemas.ProtocolV2, schemas.ToolAdapter}, " ") ||
		len(schemas.Names) != len(names) {
		t.Fatalf("embedded schemas: %v, %v", names, err)
	}
}

// TestFixtures validates every fixture against the schema of its version, and against the
// definition its name starts with (command-, response-, event-). Fixtures under invalid/ must
// fail, which shows the schema is not vacuous where they probe it.
func TestFixtures(t *testing.T) {
	v := newValidator(t)
	for _, major := range []int{1, 2} {
		dir := filepath.Join("testdata", "fixtures", fmt.Sprintf("v%d", major))
		valid, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		invalid, _ := filepath.Glob(filepath.Join(dir, "invalid", "*.json"))
		if len(valid) < 20 || len(invalid) < 3 {
			t.Fatalf("%s: %d fixtures and %d invalid ones; expected more", dir, len(valid), len(invalid))
		}
		covered := map[string]bool{}
		for _, path := range valid {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			inst := parseInstance(t, data)
			if err := v.root[major].Validate(inst); err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			kind, _, _ := strings.Cut(filepath.Base(path), "-")
			if err := v.def(t, major, kind).Validate(inst); err != nil {
				t.Errorf("%s is not a %s: %v", path, kind, err)
			}
			m := inst.(map[string]any)
			switch kind {
			case "command":
				covered["command "+m["operation"].(string)] = true
			case "event":
				covered["event "+m["event"].(string)] = true
			case "response":
				if e, ok := m["error"].(map[string]any); ok {
					covered["error"] = true
					covered["error "+e["code"].(string)] = true
				} else {
					data := m["data"].(map[string]any)
					for member, def := range resultMembers {
						if _, ok := data[member]; ok {
							covered[def] = true
						}
					}
				}
			}
		}
		want := []string{"handshake", "error", "event sessionClosed", "event eventDropped", "event hostDraining",
			"error stale_generation", "error outbound_record_too_large",
			"wakeResult", "ticketResult", "queuedResult", "abortResult",
			"error session_not_running", "error session_queue_full", "error idempotency_conflict", "error request_indeterminate",
			"event attachmentEvicted", "error attachment_capacity", "error connection_control_only"}
		for _, op := range protocol.Operations(major) {
			want = append(want, "command "+op)
		}
		for _, ev := range turnEvents {
			want = append(want, "event "+ev)
		}
		if major >= 2 {
			want = append(want, "error ticket_not_found", "error ticket_not_indeterminate")
		}
		for _, w := range want {
			if !covered[w] {
				t.Errorf("%s: no fixture for %s", dir, w)
			}
		}
		for _, path := range invalid {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.root[major].Validate(parseInstance(t, data)); err == nil {
				t.Errorf("%s validates, but it should not", path)
			}
		}
	}
}

// turnEvents are the events of agent turns.
var turnEvents = []string{
	protocol.EventPromptAccepted, protocol.EventTurnStart, protocol.EventMessageStart, protocol.EventMessageUpdate,
	protocol.EventMessageEnd, protocol.EventToolStart, protocol.EventToolEnd, protocol.EventTurnEnd,
	protocol.EventSessionIdle, protocol.EventRequestFailed,
}

// resultMembers names the response data a fixture covers by a member only that data has.
var resultMembers = map[string]string{
	"capabilities": "handshake",
	"result":       "wakeResult",
	"ticket":       "ticketResult",
	"queued":       "queuedResult",
	"aborted":      "abortResult",
}

// TestVersionPattern checks the protocolVersion pattern against ParseVersion. The pattern
// spells out "a minor that fits an int64" digit by digit, so the minors tried are those around
// every digit of the largest int64, plus random ones of every length the parser reads.
func TestVersionPattern(t *testing.T) {
	v := newValidator(t)
	const top = "9223372036854775807"
	minors := []string{"", "0", "00", "01", "1", "9", "10", "99", "999999999999999999", "1000000000000000000",
		"9999999999999999999", "18446744073709551615", "99999999999999999999", top}
	for i := range len(top) {
		d := int(top[i] - '0')
		rest := len(top) - i - 1
		if d > 0 && (i > 0 || d > 1) {
			minors = append(minors, top[:i]+string(rune('0'+d-1))+top[i+1:], top[:i]+string(rune('0'+d-1))+strings.Repeat("9", rest))
		}
		if d < 9 {
			minors = append(minors, top[:i]+string(rune('0'+d+1))+top[i+1:], top[:i]+string(rune('0'+d+1))+strings.Repeat("0", rest))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, 1+rng.IntN(30))
		for i := range b {
			b[i] = byte('0' + rng.IntN(10))
		}
		if rng.IntN(4) > 0 {
			b[0] = byte('1' + rng.IntN(9)) // mostly without a leading zero
		}
		minors = append(minors, string(b))
	}
	accepted := 0
	for _, major := range []int{1, 2} {
		sch := v.def(t, major, "protocolVersion")
		for _, minor := range minors {
			s := strconv.Itoa(major) + "." + minor
			_, code := protocol.ParseVersion(s)
			schema := sch.Validate(s) == nil
			if code != schema {
				t.Errorf("%q: ParseVersion accepts=%v, schema accepts=%v", s, code, schema)
			}
			if code {
				accepted++
			}
		}
	}
	if accepted < 100 {
		t.Errorf("only %d accepted versions tried", accepted)
	}
}

// agreementCase is one command line and whether the daemon accepts it.
type agreementCase struct {
	name  string
	major int
	line  string
	ok    bool
}

func line(version, op, identity, payload string) string {
	s := `{"protocolVersion":"` + version + `","requestId":"r-1","operation":"` + op + `"`
	if identity != "" {
		s += "," + identity
	}
	return s + `,"payload":` + payload + "}"
}

func openLine(version, payload string) string {
	return line(version, "open", `"sessionId":"s","generation":1`, payload)
}

// openPayload builds an open payload from a base with every required member, with members
// replaced or added by over (JSON members, without the braces) and members removed by drop.
func openPayload(over string, drop ...string) string {
	base := map[string]string{
		"cwd":       `"/tmp"`,
		"session":   `{"mode":"new"}`,
		"resources": resources(""),
	}
	for _, d := range drop {
		delete(base, d)
	}
	var parts []string
	for _, k := range []string{"cwd", "session", "resources"} {
		if v, ok := base[k]; ok {
			parts = append(parts, `"`+k+`":`+v)
		}
	}
	if over != "" {
		parts = append(parts, over)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func resources(over string, drop ...string) string {
	var parts []string
next:
	for _, k := range []string{"extensions", "skills", "promptTemplates", "themes", "contextFiles", "tools"} {
		for _, d := range drop {
			if d == k {
				continue next
			}
		}
		if strings.Contains(over, `"`+k+`"`) {
			continue
		}
		parts = append(parts, `"`+k+`":"none"`)
	}
	if over != "" {
		parts = append(parts, over)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func rep(s string, n int) string { return strings.Repeat(s, n) }

// wakeLine is a wake of session s, generation 1, with key k.
func wakeLine(version, payload string) string {
	return line(version, "wake", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, payload)
}

// ticketID is a well-formed ticket id: that of the wake wakeLine sends.
var ticketID = protocol.TicketID("s", "k")

// agreementCases are command lines for the parser and the schema. The parser refuses a
// duplicated member; JSON parsing hides that from a schema, so it is not in this table. A
// member that differs from a known one only in case is visible to the schema and is here. The
// rows of piCompatCases are appended: every command member of Pi Daemon's protocol, accepted
// and refused as Pi Daemon does (docs/protocol.md, "Compatibility with Pi Daemon clients").
// Lines of a major other than 1 or 2 are outside both schemas and are not here either.
var agreementCases = append(baseAgreementCases, piCompatCases()...)

var baseAgreementCases = []agreementCase{
	// Versions.
	{"handshake 1.0", 1, line("1.0", "handshake", "", `{}`), true},
	{"handshake unknown minor", 1, line("1.7", "handshake", "", `{}`), true},
	{"version largest minor", 1, line("1.9223372036854775807", "handshake", "", `{}`), true},
	{"version minor overflows int64", 1, line("1.9223372036854775808", "handshake", "", `{}`), true},
	{"version leading zero minor", 1, line("1.00", "handshake", "", `{}`), true},
	{"version leading zero major", 1, line("01.0", "handshake", "", `{}`), false},
	{"version no minor", 1, line("1.", "handshake", "", `{}`), false},
	{"version no major", 1, line(".1", "handshake", "", `{}`), false},
	{"version no dot", 1, line("1", "handshake", "", `{}`), false},
	{"version with space", 1, line(" 1.0", "handshake", "", `{}`), false},
	{"version with suffix", 1, line("1.0-beta", "handshake", "", `{}`), false},
	{"version number", 1, `{"protocolVersion":1.0,"requestId":"r","operation":"handshake","payload":{}}`, false},
	{"version missing", 1, `{"requestId":"r","operation":"handshake","payload":{}}`, false},
	{"handshake 2.0", 2, line("2.0", "handshake", "", `{}`), true},
	{"handshake 2.7", 2, line("2.7", "handshake", "", `{}`), true},
	{"version 2.01", 2, line("2.01", "handshake", "", `{}`), true},

	// requestId.
	{"requestId 128 two-byte runes", 1, `{"protocolVersion":"1.0","requestId":"` + rep("é", 128) + `","operation":"handshake","payload":{}}`, true},
	{"requestId 129 two-byte runes", 1, `{"protocolVersion":"1.0","requestId":"` + rep("é", 129) + `","operation":"handshake","payload":{}}`, false},
	{"requestId 128 astral runes", 2, `{"protocolVersion":"2.0","requestId":"` + rep("😀", 128) + `","operation":"handshake","payload":{}}`, true},
	{"requestId 129 astral runes", 2, `{"protocolVersion":"2.0","requestId":"` + rep("😀", 129) + `","operation":"handshake","payload":{}}`, false},
	{"requestId empty", 1, `{"protocolVersion":"1.0","requestId":"","operation":"handshake","payload":{}}`, false},
	{"requestId C0 control", 1, `{"protocolVersion":"1.0","requestId":"a\u0007b","operation":"handshake","payload":{}}`, false},
	{"requestId DEL", 1, `{"protocolVersion":"1.0","requestId":"a\u007fb","operation":"handshake","payload":{}}`, false},
	{"requestId C1 control", 1, `{"protocolVersion":"1.0","requestId":"a\u0085b","operation":"handshake","payload":{}}`, false},
	{"requestId no-break space", 1, `{"protocolVersion":"1.0","requestId":"a\u00a0b","operation":"handshake","payload":{}}`, true},
	{"requestId line separator", 1, `{"protocolVersion":"1.0","requestId":"a\u2028b","operation":"handshake","payload":{}}`, true},
	{"requestId number", 1, `{"protocolVersion":"1.0","requestId":7,"operation":"handshake","payload":{}}`, false},
	{"requestId missing", 1, `{"protocolVersion":"1.0","operation":"handshake","payload":{}}`, false},

	// operation and payload.
	{"operation unknown", 1, line("1.0", "fly", "", `{}`), false},
	{"operation of 2.x in 1.x", 1, line("1.0", "listSessions", "", `{}`), false},
	{"operation wrong case", 1, line("1.0", "Handshake", "", `{}`), false},
	{"operation empty", 1, line("1.0", "", "", `{}`), false},
	{"operation missing", 1, `{"protocolVersion":"1.0","requestId":"r","payload":{}}`, false},
	{"payload missing", 1, `{"protocolVersion":"1.0","requestId":"r","operation":"handshake"}`, false},
	{"payload array", 1, line("1.0", "handshake", "", `[]`), false},
	{"payload null", 1, line("1.0", "handshake", "", `null`), false},
	{"payload string", 1, line("1.0", "handshake", "", `"{}"`), false},
	{"handshake payload member", 1, line("1.0", "handshake", "", `{"x":1}`), true},
	{"top level array", 1, `[{"protocolVersion":"1.0"}]`, false},

	// Outer members.
	{"unknown outer member", 1, `{"protocolVersion":"1.0","requestId":"r","operation":"handshake","payload":{},"trace":{"a":[1,null]}}`, true},
	{"unknown outer null", 2, `{"protocolVersion":"2.0","requestId":"r","operation":"handshake","payload":{},"x":null}`, true},
	{"outer name that only starts like a member", 1, `{"protocolVersion":"1.0","requestId":"r","operation":"handshake","payload":{},"payloads":1}`, true},
	{"outer case variant", 1, `{"protocolVersion":"1.0","requestId":"r","RequestId":"r","operation":"handshake","payload":{}}`, false},
	{"outer case variant long s", 1, `{"protocolVersion":"1.0","requestId":"r","operation":"status","payload":{},"ſessionId":"x"}`, false},
	{"outer case variant Kelvin sign", 2, `{"protocolVersion":"2.0","requestId":"r","operation":"handshake","payload":{},"idempotencyKey":"k"}`, false},
	{"outer case variant only", 1, `{"protocolVersion":"1.0","requestId":"r","operation":"handshake","Payload":{}}`, false},
	{"sessionId null", 1, line("1.0", "status", `"sessionId":null`, `{}`), false},

	// Identity rules.
	{"handshake with sessionId", 1, line("1.0", "handshake", `"sessionId":"s"`, `{}`), true},
	{"handshake with generation", 1, line("1.0", "handshake", `"sessionId":"s","generation":1`, `{}`), true},
	{"handshake with idempotencyKey", 1, line("1.0", "handshake", `"idempotencyKey":"k"`, `{}`), true},
	{"status host", 1, line("1.0", "status", "", `{}`), true},
	{"status session", 1, line("1.0", "status", `"sessionId":"s"`, `{}`), true},
	{"status session generation", 1, line("1.0", "status", `"sessionId":"s","generation":3`, `{}`), true},
	{"status generation without session", 1, line("1.0", "status", `"generation":3`, `{}`), true},
	{"status with idempotencyKey", 1, line("1.0", "status", `"sessionId":"s","idempotencyKey":"k"`, `{}`), true},
	{"status payload member", 2, line("2.0", "status", "", `{"verbose":true}`), true},
	{"attach", 1, line("1.0", "attach", `"sessionId":"s","generation":0`, `{}`), true},
	{"attach without generation", 1, line("1.0", "attach", `"sessionId":"s"`, `{}`), false},
	{"attach without session", 1, line("1.0", "attach", `"generation":0`, `{}`), false},
	{"attach with idempotencyKey", 1, line("1.0", "attach", `"sessionId":"s","generation":0,"idempotencyKey":"k"`, `{}`), true},
	{"attach payload member", 1, line("1.0", "attach", `"sessionId":"s","generation":0`, `{"since":1}`), true},
	{"detach", 2, line("2.0", "detach", `"sessionId":"s","generation":0`, `{}`), true},
	{"wake", 1, line("1.0", "wake", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{"prompt":"hi"}`), true},
	{"wake without idempotencyKey", 1, line("1.0", "wake", `"sessionId":"s","generation":1`, `{"prompt":"hi"}`), false},
	{"wake idempotencyKey 512", 1, line("1.0", "wake", `"sessionId":"s","generation":1,"idempotencyKey":"`+rep("ключ", 128)+`"`, `{"prompt":"hi"}`), true},
	{"wake idempotencyKey 513", 1, line("1.0", "wake", `"sessionId":"s","generation":1,"idempotencyKey":"`+rep("ключ", 128)+`x"`, `{}`), false},
	{"wake idempotencyKey empty", 1, line("1.0", "wake", `"sessionId":"s","generation":1,"idempotencyKey":""`, `{}`), false},
	{"steer", 2, line("2.0", "steer", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{"message":"m"}`), true},
	{"followUp without generation", 1, line("1.0", "followUp", `"sessionId":"s","idempotencyKey":"k"`, `{}`), false},
	{"abort", 1, line("1.0", "abort", `"sessionId":"s","generation":1`, `{}`), true},
	{"abort with idempotencyKey", 1, line("1.0", "abort", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{}`), true},

	// Agent-turn payloads.
	{"wake full", 2, wakeLine("2.0", `{"prompt":"hi","source":"cron:nightly","waitForTerminal":false}`), true},
	{"wake waitForTerminal true", 1, wakeLine("1.0", `{"prompt":"hi","waitForTerminal":true}`), true},
	{"wake empty payload", 1, wakeLine("1.0", `{}`), false},
	{"wake empty prompt", 1, wakeLine("1.0", `{"prompt":""}`), false},
	{"wake prompt 262144 runes", 2, wakeLine("2.0", `{"prompt":"`+rep("é", 262144)+`"}`), true},
	{"wake prompt 262145 runes", 2, wakeLine("2.0", `{"prompt":"`+rep("é", 262145)+`"}`), false},
	{"wake prompt whitespace", 1, wakeLine("1.0", `{"prompt":" "}`), true},
	{"wake prompt control characters", 1, wakeLine("1.0", `{"prompt":"line\nline\u0000"}`), true},
	{"wake prompt number", 1, wakeLine("1.0", `{"prompt":5}`), false},
	{"wake prompt null", 1, wakeLine("1.0", `{"prompt":null}`), false},
	{"wake source 128", 1, wakeLine("1.0", `{"prompt":"hi","source":"`+rep("ü", 128)+`"}`), true},
	{"wake source 129", 1, wakeLine("1.0", `{"prompt":"hi","source":"`+rep("ü", 129)+`"}`), false},
	{"wake source empty", 2, wakeLine("2.0", `{"prompt":"hi","source":""}`), false},
	{"wake source newline", 2, wakeLine("2.0", `{"prompt":"hi","source":"a\nb"}`), false},
	{"wake source C1", 2, wakeLine("2.0", `{"prompt":"hi","source":"a\u0085b"}`), false},
	{"wake source null", 1, wakeLine("1.0", `{"prompt":"hi","source":null}`), false},
	{"wake waitForTerminal string", 1, wakeLine("1.0", `{"prompt":"hi","waitForTerminal":"false"}`), false},
	{"wake waitForTerminal number", 2, wakeLine("2.0", `{"prompt":"hi","waitForTerminal":0}`), false},
	{"wake waitForTerminal null", 2, wakeLine("2.0", `{"prompt":"hi","waitForTerminal":null}`), false},
	{"wake unknown member", 1, wakeLine("1.0", `{"prompt":"hi","model":"x"}`), true},
	{"wake case variant member", 1, wakeLine("1.0", `{"prompt":"hi","Prompt":"hi"}`), false},
	{"wake without generation", 2, line("2.0", "wake", `"sessionId":"s","idempotencyKey":"k"`, `{"prompt":"hi"}`), false},
	{"steer message 262144 runes", 1, line("1.0", "steer", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{"message":"`+rep("ß", 262144)+`"}`), true},
	{"steer message 262145 runes", 1, line("1.0", "steer", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{"message":"`+rep("ß", 262145)+`"}`), false},
	{"steer empty message", 2, line("2.0", "steer", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{"message":""}`), false},
	{"steer without message", 2, line("2.0", "steer", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{}`), false},
	{"steer without idempotencyKey", 2, line("2.0", "steer", `"sessionId":"s","generation":1`, `{"message":"m"}`), false},
	{"followUp", 1, line("1.0", "followUp", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{"message":"then this"}`), true},
	{"followUp prompt member", 2, line("2.0", "followUp", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{"message":"m","prompt":"p"}`), true},
	{"followUp message array", 1, line("1.0", "followUp", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{"message":["m"]}`), false},
	{"abort payload member", 2, line("2.0", "abort", `"sessionId":"s","generation":1`, `{"reason":"x"}`), true},
	{"ticket", 2, line("2.0", "ticket", "", `{"ticketId":"`+ticketID+`"}`), true},
	{"ticket minor 2.7", 2, line("2.7", "ticket", "", `{"ticketId":"`+ticketID+`"}`), true},
	{"ticket in v1", 1, line("1.0", "ticket", "", `{"ticketId":"`+ticketID+`"}`), false},
	{"ticket without ticketId", 2, line("2.0", "ticket", "", `{}`), false},
	{"ticket id short", 2, line("2.0", "ticket", "", `{"ticketId":"`+ticketID[:len(ticketID)-1]+`"}`), false},
	{"ticket id long", 2, line("2.0", "ticket", "", `{"ticketId":"`+ticketID+`A"}`), false},
	{"ticket id prefix", 2, line("2.0", "ticket", "", `{"ticketId":"Ticket-`+ticketID[7:]+`"}`), false},
	{"ticket id padding", 2, line("2.0", "ticket", "", `{"ticketId":"`+ticketID[:len(ticketID)-1]+`="}`), false},
	{"ticket id plus", 2, line("2.0", "ticket", "", `{"ticketId":"`+ticketID[:len(ticketID)-1]+`+"}`), false},
	{"ticket id multibyte", 2, line("2.0", "ticket", "", `{"ticketId":"`+ticketID[:len(ticketID)-1]+`é"}`), false},
	{"ticket id number", 2, line("2.0", "ticket", "", `{"ticketId":1}`), false},
	{"ticket with sessionId", 2, line("2.0", "ticket", `"sessionId":"s"`, `{"ticketId":"`+ticketID+`"}`), true},
	{"ticket with idempotencyKey", 2, line("2.0", "ticket", `"idempotencyKey":"k"`, `{"ticketId":"`+ticketID+`"}`), true},
	{"ticket unknown member", 2, line("2.0", "ticket", "", `{"ticketId":"`+ticketID+`","outcome":"failed"}`), true},
	{"reconcile succeeded", 2, line("2.0", "reconcile", "", `{"ticketId":"`+ticketID+`","outcome":"succeeded"}`), true},
	{"reconcile failed", 2, line("2.0", "reconcile", "", `{"ticketId":"`+ticketID+`","outcome":"failed"}`), true},
	{"reconcile in v1", 1, line("1.0", "reconcile", "", `{"ticketId":"`+ticketID+`","outcome":"failed"}`), false},
	{"reconcile outcome unknown", 2, line("2.0", "reconcile", "", `{"ticketId":"`+ticketID+`","outcome":"completed"}`), false},
	{"reconcile outcome case", 2, line("2.0", "reconcile", "", `{"ticketId":"`+ticketID+`","outcome":"Failed"}`), false},
	{"reconcile without outcome", 2, line("2.0", "reconcile", "", `{"ticketId":"`+ticketID+`"}`), false},
	{"reconcile bad ticketId", 2, line("2.0", "reconcile", "", `{"ticketId":"ticket-x","outcome":"failed"}`), false},
	{"reconcile with generation", 2, line("2.0", "reconcile", `"sessionId":"s","generation":1`, `{"ticketId":"`+ticketID+`","outcome":"failed"}`), true},
	{"drain with sessionId", 1, line("1.0", "drain", `"sessionId":"s"`, `{}`), true},
	{"listSessions with sessionId", 2, line("2.0", "listSessions", `"sessionId":"s"`, `{}`), true},
	{"describeSession", 2, line("2.0", "describeSession", `"sessionId":"s"`, `{}`), true},
	{"describeSession without session", 2, line("2.0", "describeSession", "", `{}`), false},
	{"describeSession with generation", 2, line("2.0", "describeSession", `"sessionId":"s","generation":1`, `{}`), true},
	{"describeSession payload member", 2, line("2.0", "describeSession", `"sessionId":"s"`, `{"x":1}`), true},

	// sessionId and generation.
	{"sessionId 256 runes", 1, line("1.0", "status", `"sessionId":"`+rep("ж", 256)+`"`, `{}`), true},
	{"sessionId 257 runes", 1, line("1.0", "status", `"sessionId":"`+rep("ж", 257)+`"`, `{}`), false},
	{"sessionId empty", 1, line("1.0", "status", `"sessionId":""`, `{}`), false},
	{"sessionId newline", 1, line("1.0", "status", `"sessionId":"a\nb"`, `{}`), false},
	{"sessionId number", 1, line("1.0", "status", `"sessionId":5`, `{}`), false},
	{"generation 0", 1, line("1.0", "attach", `"sessionId":"s","generation":0`, `{}`), true},
	{"generation 2^53-1", 1, line("1.0", "attach", `"sessionId":"s","generation":9007199254740991`, `{}`), true},
	{"generation 2^53", 1, line("1.0", "attach", `"sessionId":"s","generation":9007199254740992`, `{}`), false},
	{"generation negative", 1, line("1.0", "attach", `"sessionId":"s","generation":-1`, `{}`), false},
	{"generation fraction", 1, line("1.0", "attach", `"sessionId":"s","generation":1.5`, `{}`), false},
	{"generation string", 1, line("1.0", "attach", `"sessionId":"s","generation":"1"`, `{}`), false},
	{"generation null", 1, line("1.0", "attach", `"sessionId":"s","generation":null`, `{}`), false},

	// close and drain payloads.
	{"close", 1, line("1.0", "close", `"sessionId":"s","generation":1`, `{}`), true},
	{"close retain false", 1, line("1.0", "close", `"sessionId":"s","generation":1`, `{"retainSession":false}`), true},
	{"close retain string", 1, line("1.0", "close", `"sessionId":"s","generation":1`, `{"retainSession":"no"}`), false},
	{"close retain null", 1, line("1.0", "close", `"sessionId":"s","generation":1`, `{"retainSession":null}`), false},
	{"close retain case variant", 2, line("2.0", "close", `"sessionId":"s","generation":1`, `{"RetainSession":true}`), false},
	{"drain", 1, line("1.0", "drain", "", `{}`), true},
	{"drain timeout 0", 1, line("1.0", "drain", "", `{"timeoutMs":0}`), true},
	{"drain timeout max", 2, line("2.0", "drain", "", `{"timeoutMs":86400000}`), true},
	{"drain timeout over max", 1, line("1.0", "drain", "", `{"timeoutMs":86400001}`), false},
	{"drain timeout negative", 1, line("1.0", "drain", "", `{"timeoutMs":-1}`), false},
	{"drain timeout fraction", 1, line("1.0", "drain", "", `{"timeoutMs":1.5}`), false},
	{"drain timeout huge", 1, line("1.0", "drain", "", `{"timeoutMs":100000000000000000000}`), false},
	{"drain unknown member", 1, line("1.0", "drain", "", `{"timeout":5}`), true},

	// listSessions payload.
	{"listSessions", 2, line("2.0", "listSessions", "", `{}`), true},
	{"listSessions limit 1", 2, line("2.0", "listSessions", "", `{"limit":1}`), true},
	{"listSessions limit 100", 2, line("2.0", "listSessions", "", `{"limit":100}`), true},
	{"listSessions limit 0", 2, line("2.0", "listSessions", "", `{"limit":0}`), false},
	{"listSessions limit 101", 2, line("2.0", "listSessions", "", `{"limit":101}`), false},
	{"listSessions cursor empty", 2, line("2.0", "listSessions", "", `{"cursor":""}`), true},
	{"listSessions cursor", 2, line("2.0", "listSessions", "", `{"cursor":"c2Vzc2lvbi1h"}`), true},
	{"listSessions cursor one byte", 2, line("2.0", "listSessions", "", `{"cursor":"QQ"}`), true},
	{"listSessions cursor two bytes", 2, line("2.0", "listSessions", "", `{"cursor":"QUI"}`), true},
	{"listSessions cursor dirty bits", 2, line("2.0", "listSessions", "", `{"cursor":"QR"}`), false},
	{"listSessions cursor one char", 2, line("2.0", "listSessions", "", `{"cursor":"Q"}`), false},
	{"listSessions cursor padded", 2, line("2.0", "listSessions", "", `{"cursor":"QQ=="}`), false},
	{"listSessions cursor standard alphabet", 2, line("2.0", "listSessions", "", `{"cursor":"a+/A"}`), false},
	{"listSessions cursor with newline", 2, line("2.0", "listSessions", "", `{"cursor":"QU\nJD"}`), false},
	{"listSessions cursor trailing CRLF", 2, line("2.0", "listSessions", "", `{"cursor":"QUJD\r\n"}`), false},
	{"listSessions cursor only newline", 2, line("2.0", "listSessions", "", `{"cursor":"\n"}`), false},
	{"listSessions cursor 512", 2, line("2.0", "listSessions", "", `{"cursor":"`+rep("A", 512)+`"}`), true},
	{"listSessions cursor 516", 2, line("2.0", "listSessions", "", `{"cursor":"`+rep("A", 516)+`"}`), false},
	{"listSessions cursor number", 2, line("2.0", "listSessions", "", `{"cursor":5}`), false},

	// open payload, both versions.
	{"open v1", 1, openLine("1.0", openPayload("")), true},
	{"open v2", 2, openLine("2.0", openPayload("")), true},
	{"open v2 with room", 2, openLine("2.0", openPayload(`"room":"home"`)), true},
	{"open v2 room number", 2, openLine("2.0", openPayload(`"room":7`)), false},
	{"open v2 room grammar", 2, openLine("2.0", openPayload(`"room":"Home"`)), false},
	{"open v1 room ignored", 1, openLine("1.0", openPayload(`"room":7`)), true},
	{"open full v1", 1, openLine("1.0", openPayload(`"name":"Büro","agentDir":"/home/a/.agent","model":{"provider":"openai","id":"gpt-x","thinkingLevel":"high"}`)), true},
	{"open without generation", 1, line("1.0", "open", `"sessionId":"s"`, openPayload("")), false},
	{"open with idempotencyKey", 1, line("1.0", "open", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, openPayload("")), true},
	{"open no cwd", 1, openLine("1.0", openPayload("", "cwd")), false},
	{"open no session", 1, openLine("1.0", openPayload("", "session")), false},
	{"open no resources", 1, openLine("1.0", openPayload("", "resources")), true},
	{"open unknown member", 1, openLine("1.0", openPayload(`"tools":"none"`)), true},
	{"open cwd root", 1, openLine("1.0", openPayload(`"cwd":"/"`, "cwd")), true},
	{"open cwd dotted names", 1, openLine("1.0", openPayload(`"cwd":"/a/..b/.c/.../b."`, "cwd")), true},
	{"open cwd relative", 1, openLine("1.0", openPayload(`"cwd":"tmp"`, "cwd")), false},
	{"open cwd double slash", 1, openLine("1.0", openPayload(`"cwd":"/a//b"`, "cwd")), false},
	{"open cwd dot", 1, openLine("1.0", openPayload(`"cwd":"/a/./b"`, "cwd")), false},
	{"open cwd dot dot", 1, openLine("1.0", openPayload(`"cwd":"/a/../b"`, "cwd")), false},
	{"open cwd trailing slash", 1, openLine("1.0", openPayload(`"cwd":"/a/"`, "cwd")), false},
	{"open cwd trailing dot", 2, openLine("2.0", openPayload(`"cwd":"/a/."`, "cwd")), false},
	{"open cwd tab", 1, openLine("1.0", openPayload(`"cwd":"/a\tb"`, "cwd")), false},
	{"open cwd 4096", 1, openLine("1.0", openPayload(`"cwd":"/`+rep("ü", 4095)+`"`, "cwd")), true},
	{"open cwd 4097", 1, openLine("1.0", openPayload(`"cwd":"/`+rep("ü", 4096)+`"`, "cwd")), false},
	{"open cwd null", 1, openLine("1.0", openPayload(`"cwd":null`, "cwd")), false},
	{"open name 128", 1, openLine("1.0", openPayload(`"name":"`+rep("名", 128)+`"`)), true},
	{"open name 129", 1, openLine("1.0", openPayload(`"name":"`+rep("名", 129)+`"`)), false},
	{"open name empty", 1, openLine("1.0", openPayload(`"name":""`)), false},
	{"open name control", 2, openLine("2.0", openPayload(`"name":"a\u009bb"`)), false},
	{"open agentDir relative", 1, openLine("1.0", openPayload(`"agentDir":"./agent"`)), false},
	{"open mode open with path", 1, openLine("1.0", openPayload(`"session":{"mode":"open","path":"/s/a.jsonl"}`, "session")), true},
	{"open mode open without path", 1, openLine("1.0", openPayload(`"session":{"mode":"open"}`, "session")), false},
	{"open mode new with path", 1, openLine("1.0", openPayload(`"session":{"mode":"new","path":"/s/a.jsonl"}`, "session")), true},
	{"open mode continue", 1, openLine("1.0", openPayload(`"session":{"mode":"continue"}`, "session")), true},
	{"open mode memory", 2, openLine("2.0", openPayload(`"session":{"mode":"memory"}`, "session")), true},
	{"open mode unknown", 1, openLine("1.0", openPayload(`"session":{"mode":"fork"}`, "session")), false},
	{"open mode missing", 1, openLine("1.0", openPayload(`"session":{}`, "session")), false},
	{"open session null", 1, openLine("1.0", openPayload(`"session":null`, "session")), false},
	{"open session case variant", 1, openLine("1.0", openPayload(`"session":{"Mode":"new"}`, "session")), false},
	{"open session unknown member", 2, openLine("2.0", openPayload(`"session":{"mode":"new","id":"x"}`, "session")), true},
	{"open v1 sessionDir ignored", 1, openLine("1.0", openPayload(`"session":{"mode":"new","sessionDir":"not a path"}`, "session")), true},
	{"open v1 sessionDir not a string", 1, openLine("1.0", openPayload(`"session":{"mode":"new","sessionDir":1}`, "session")), true},
	{"open v2 sessionDir", 2, openLine("2.0", openPayload(`"session":{"mode":"new","sessionDir":"/var/s"}`, "session")), true},
	{"open v2 sessionDir relative", 2, openLine("2.0", openPayload(`"session":{"mode":"new","sessionDir":"not a path"}`, "session")), false},
	{"open model", 2, openLine("2.0", openPayload(`"model":{"provider":"ollama","id":"`+rep("模", 256)+`"}`)), true},
	{"open model id 257", 2, openLine("2.0", openPayload(`"model":{"provider":"ollama","id":"`+rep("模", 257)+`"}`)), false},
	{"open model provider 129", 1, openLine("1.0", openPayload(`"model":{"provider":"`+rep("p", 129)+`","id":"m"}`)), false},
	{"open model without id", 1, openLine("1.0", openPayload(`"model":{"provider":"p"}`)), false},
	{"open model thinking unknown", 1, openLine("1.0", openPayload(`"model":{"provider":"p","id":"m","thinkingLevel":"extreme"}`)), false},
	{"open model unknown member", 1, openLine("1.0", openPayload(`"model":{"provider":"p","id":"m","temperature":1}`)), true},

	// Resources.
	{"open tools not none", 1, openLine("1.0", openPayload(`"resources":`+resources(`"tools":"all"`), "resources")), false},
	{"open skills object", 2, openLine("2.0", openPayload(`"resources":`+resources(`"skills":{}`), "resources")), false},
	{"open tools host adapter", 2, openLine("2.0", openPayload(`"resources":`+resources(`"tools":{"mode":"host-adapter"}`), "resources")), false},
	{"open themes missing", 1, openLine("1.0", openPayload(`"resources":`+resources("", "themes"), "resources")), false},
	{"open resources unknown member", 1, openLine("1.0", openPayload(`"resources":`+resources(`"mcp":"none"`), "resources")), true},
	{"open v1 systemPrompt none", 1, openLine("1.0", openPayload(`"resources":`+resources(`"systemPrompt":"none"`), "resources")), true},
	{"open v1 systemPrompt text", 1, openLine("1.0", openPayload(`"resources":`+resources(`"systemPrompt":"Be brief."`), "resources")), true},
	{"open v2 systemPrompt text", 2, openLine("2.0", openPayload(`"resources":`+resources(`"systemPrompt":"Be brief.\n\tNo tables."`), "resources")), true},
	{"open v2 systemPrompt none", 2, openLine("2.0", openPayload(`"resources":`+resources(`"systemPrompt":"none"`), "resources")), true},
	{"open v2 systemPrompt empty", 2, openLine("2.0", openPayload(`"resources":`+resources(`"systemPrompt":""`), "resources")), true},
	{"open v2 systemPrompt null", 2, openLine("2.0", openPayload(`"resources":`+resources(`"systemPrompt":null`), "resources")), false},

	// Host tool adapters (2.x): the resources.tools wrapper, and invokeTool. openLine's envelope
	// is session "s", generation 1, which toolsLine's descriptor is bound to.
	{"open tools descriptor", 2, toolsLine("2.0", `{"mode":"host-adapter","descriptor":`+toolDescriptor(nil)+`}`), true},
	{"open tools descriptor 2.9", 2, toolsLine("2.9", `{"mode":"host-adapter","descriptor":`+toolDescriptor(nil)+`}`), true},
	{"open tools descriptor in 1.x", 1, toolsLine("1.0", `{"mode":"host-adapter","descriptor":`+toolDescriptor(nil)+`}`), false},
	{"open tools mode builtin", 2, toolsLine("2.0", `{"mode":"builtin","descriptor":`+toolDescriptor(nil)+`}`), false},
	{"open tools mode missing", 2, toolsLine("2.0", `{"descriptor":`+toolDescriptor(nil)+`}`), false},
	{"open tools mode case variant", 2, toolsLine("2.0", `{"Mode":"host-adapter","descriptor":`+toolDescriptor(nil)+`}`), false},
	{"open tools wrapper unknown member", 2, toolsLine("2.0", `{"mode":"host-adapter","descriptor":`+toolDescriptor(nil)+`,"root":"/"}`), false},
	{"open tools descriptor string", 2, toolsLine("2.0", `{"mode":"host-adapter","descriptor":"airlock-fs"}`), false},
	{"open tools descriptor array", 2, toolsLine("2.0", `{"mode":"host-adapter","descriptor":[`+toolDescriptor(nil)+`]}`), false},
	{"open tools descriptor null", 2, toolsLine("2.0", `{"mode":"host-adapter","descriptor":null}`), false},
	{"open tools descriptor empty", 2, toolsLine("2.0", `{"mode":"host-adapter","descriptor":{}}`), false},
	{"open tools descriptor unknown member", 2, toolsLine("2.0", `{"mode":"host-adapter","descriptor":`+toolDescriptor(map[string]string{"binding.bearer": `"x"`})+`}`), false},
	{"open tools descriptor short handle", 2, toolsLine("2.0", `{"mode":"host-adapter","descriptor":`+toolDescriptor(map[string]string{"binding.capabilityHandle": `"abc"`})+`}`), false},
	{"open tools descriptor no limits", 2, toolsLine("2.0", `{"mode":"host-adapter","descriptor":`+toolDescriptor(map[string]string{"limits": ""})+`}`), false},
	{"open tools null", 2, toolsLine("2.0", `null`), false},
	{"open tools string all", 2, toolsLine("2.0", `"all"`), false},
	{"open tools empty object", 2, toolsLine("2.0", `{}`), false},
	{"invokeTool", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"call-1","operation":"fs.read","arguments":{"path":"README.md"}}`), true},
	{"invokeTool empty arguments", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"call-1","operation":"fs.read","arguments":{}}`), true},
	{"invokeTool unknown operation", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"call-1","operation":"fs.delete","arguments":{"path":"a"}}`), true},
	{"invokeTool toolCallId 128 runes", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"`+rep("ж", 128)+`","operation":"fs.stat","arguments":{"path":"."}}`), true},
	{"invokeTool toolCallId 129 runes", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"`+rep("ж", 129)+`","operation":"fs.stat","arguments":{"path":"."}}`), false},
	{"invokeTool toolCallId empty", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"","operation":"fs.stat","arguments":{"path":"."}}`), false},
	{"invokeTool toolCallId C1 control", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"a\u0090b","operation":"fs.stat","arguments":{"path":"."}}`), false},
	{"invokeTool toolCallId number", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":7,"operation":"fs.stat","arguments":{"path":"."}}`), false},
	{"invokeTool without toolCallId", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"operation":"fs.stat","arguments":{"path":"."}}`), false},
	{"invokeTool operation empty", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"c","operation":"","arguments":{"path":"."}}`), false},
	{"invokeTool operation number", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"c","operation":1,"arguments":{"path":"."}}`), false},
	{"invokeTool without operation", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"c","arguments":{"path":"."}}`), false},
	{"invokeTool arguments array", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"c","operation":"fs.stat","arguments":[]}`), false},
	{"invokeTool arguments null", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"c","operation":"fs.stat","arguments":null}`), false},
	{"invokeTool arguments string", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"c","operation":"fs.stat","arguments":"."}`), false},
	{"invokeTool without arguments", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"c","operation":"fs.stat"}`), false},
	{"invokeTool payload unknown member", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallId":"c","operation":"fs.stat","arguments":{},"idempotencyKey":"k"}`), true},
	{"invokeTool payload case variant", 2, toolLine("2.0", `"sessionId":"s","generation":1`, `{"toolCallID":"c","operation":"fs.stat","arguments":{}}`), false},
	{"invokeTool without generation", 2, toolLine("2.0", `"sessionId":"s"`, `{"toolCallId":"c","operation":"fs.stat","arguments":{}}`), false},
	{"invokeTool without sessionId", 2, toolLine("2.0", `"generation":1`, `{"toolCallId":"c","operation":"fs.stat","arguments":{}}`), false},
	{"invokeTool with idempotencyKey", 2, toolLine("2.0", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{"toolCallId":"c","operation":"fs.stat","arguments":{}}`), true},
	{"invokeTool in 1.x", 1, toolLine("1.0", `"sessionId":"s","generation":1`, `{"toolCallId":"c","operation":"fs.stat","arguments":{}}`), false},

	// Capability adapters (2.x). The wire checks are the member types and the envelope bounds
	// of registerAdapter, removeAdapter and adapterLogs; the registration rules
	// (invalid_registration), capability ids and actions (unknown_capability,
	// unsupported_action) and invoke args (too_large, invalid_args) are checked later and are
	// not part of the wire format.
	{"registerAdapter", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/usr/local/bin/go-lamp"}`), true},
	{"registerAdapter with args", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"go-lamp","args":["--verbose",""]}`), true},
	{"registerAdapter args empty", 2, line("2.7", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","args":[]}`), true},
	{"registerAdapter name 64 runes", 2, line("2.0", "registerAdapter", "", `{"name":"`+rep("ä", 64)+`","command":"/bin/lamp"}`), false},
	{"registerAdapter name 65 runes", 2, line("2.0", "registerAdapter", "", `{"name":"`+rep("ä", 65)+`","command":"/bin/lamp"}`), false},
	{"registerAdapter name empty", 2, line("2.0", "registerAdapter", "", `{"name":"","command":"/bin/lamp"}`), false},
	{"registerAdapter name C1 control", 2, line("2.0", "registerAdapter", "", `{"name":"la\u0085mp","command":"/bin/lamp"}`), false},
	{"registerAdapter name number", 2, line("2.0", "registerAdapter", "", `{"name":7,"command":"/bin/lamp"}`), false},
	{"registerAdapter without name", 2, line("2.0", "registerAdapter", "", `{"command":"/bin/lamp"}`), false},
	{"registerAdapter without command", 2, line("2.0", "registerAdapter", "", `{"name":"lamp"}`), false},
	{"registerAdapter command empty", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":""}`), false},
	{"registerAdapter command over 1024", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/`+rep("c", 4095)+`"}`), false},
	{"registerAdapter command 4097", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/`+rep("c", 4096)+`"}`), false},
	{"registerAdapter command null", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":null}`), false},
	{"registerAdapter args string", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","args":"-v"}`), false},
	{"registerAdapter args null", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","args":null}`), false},
	{"registerAdapter args number item", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","args":[1]}`), false},
	{"registerAdapter passEnv", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","passEnv":["CUPS_SERVER","http_proxy","_X"]}`), true},
	{"registerAdapter passEnv 64 bytes", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","passEnv":["`+rep("A", 64)+`"]}`), true},
	{"registerAdapter passEnv 65 bytes", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","passEnv":["`+rep("A", 65)+`"]}`), false},
	{"registerAdapter passEnv empty list", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","passEnv":[]}`), true},
	{"registerAdapter passEnv empty name", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","passEnv":[""]}`), false},
	{"registerAdapter passEnv with a value", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","passEnv":["TOKEN=x"]}`), false},
	{"registerAdapter passEnv digit first", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","passEnv":["1A"]}`), false},
	{"registerAdapter passEnv twice", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","passEnv":["A","A"]}`), false},
	{"registerAdapter passEnv 17", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","passEnv":["A","B","C","D","E","F","G","H","I","J","K","L","M","N","O","P","Q"]}`), false},
	{"registerAdapter passEnv object", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","passEnv":{"A":"x"}}`), false},
	{"registerAdapter passEnv case variant", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","PassEnv":["A"]}`), false},
	{"registerAdapter unknown member", 2, line("2.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp","env":{}}`), true},
	{"registerAdapter case variant", 2, line("2.0", "registerAdapter", "", `{"Name":"lamp","command":"/bin/lamp"}`), false},
	{"registerAdapter with sessionId", 2, line("2.0", "registerAdapter", `"sessionId":"s"`, `{"name":"lamp","command":"/bin/lamp"}`), true},
	{"registerAdapter in 1.x", 1, line("1.0", "registerAdapter", "", `{"name":"lamp","command":"/bin/lamp"}`), false},
	{"registerAdapter wrong case", 2, line("2.0", "RegisterAdapter", "", `{"name":"lamp","command":"/bin/lamp"}`), false},
	{"removeAdapter", 2, line("2.0", "removeAdapter", "", `{"name":"lamp"}`), true},
	{"removeAdapter name not a registration name", 2, line("2.0", "removeAdapter", "", `{"name":"Büro lamp"}`), false},
	{"removeAdapter without name", 2, line("2.0", "removeAdapter", "", `{}`), false},
	{"removeAdapter name 65", 2, line("2.0", "removeAdapter", "", `{"name":"`+rep("l", 65)+`"}`), false},
	{"removeAdapter name tab", 2, line("2.0", "removeAdapter", "", `{"name":"a\tb"}`), false},
	{"removeAdapter with generation", 2, line("2.0", "removeAdapter", `"sessionId":"s","generation":1`, `{"name":"lamp"}`), true},
	{"removeAdapter in 1.x", 1, line("1.3", "removeAdapter", "", `{"name":"lamp"}`), false},
	{"listAdapters", 2, line("2.0", "listAdapters", "", `{}`), true},
	{"listAdapters payload member", 2, line("2.0", "listAdapters", "", `{"all":true}`), true},
	{"listAdapters with idempotencyKey", 2, line("2.0", "listAdapters", `"idempotencyKey":"k"`, `{}`), true},
	{"listAdapters in 1.x", 1, line("1.0", "listAdapters", "", `{}`), false},
	{"adapterLogs", 2, line("2.0", "adapterLogs", "", `{"name":"lamp"}`), true},
	{"adapterLogs unknown member", 2, line("2.0", "adapterLogs", "", `{"name":"lamp","tail":10}`), true},
	{"adapterLogs name array", 2, line("2.0", "adapterLogs", "", `{"name":["lamp"]}`), false},
	{"adapterLogs in 1.x", 1, line("1.0", "adapterLogs", "", `{"name":"lamp"}`), false},
	{"listCapabilities", 2, line("2.0", "listCapabilities", "", `{}`), true},
	{"listCapabilities payload member", 2, line("2.0", "listCapabilities", "", `{"adapter":"lamp"}`), true},
	{"listCapabilities with sessionId", 2, line("2.0", "listCapabilities", `"sessionId":"s"`, `{}`), true},
	{"listCapabilities in 1.x", 1, line("1.0", "listCapabilities", "", `{}`), false},
	{"describeCapability", 2, line("2.0", "describeCapability", "", `{"capabilityId":"desk_lamp"}`), true},
	{"describeCapability without id", 2, line("2.0", "describeCapability", "", `{}`), false},
	{"describeCapability id number", 2, line("2.0", "describeCapability", "", `{"capabilityId":1}`), false},
	{"describeCapability unknown member", 2, line("2.0", "describeCapability", "", `{"capabilityId":"desk_lamp","adapter":"lamp"}`), true},
	{"describeCapability in 1.x", 1, line("1.0", "describeCapability", "", `{"capabilityId":"desk_lamp"}`), false},
	{"observeCapability", 2, line("2.0", "observeCapability", "", `{"capabilityId":"desk_lamp"}`), true},
	{"observeCapability id empty", 2, line("2.0", "observeCapability", "", `{"capabilityId":""}`), false},
	{"observeCapability id outside the grammar", 2, line("2.0", "observeCapability", "", `{"capabilityId":"Desk Lamp\n"}`), false},
	{"observeCapability id null", 2, line("2.0", "observeCapability", "", `{"capabilityId":null}`), false},
	{"observeCapability with action", 2, line("2.0", "observeCapability", "", `{"capabilityId":"desk_lamp","action":"set_power"}`), true},
	{"observeCapability case variant", 2, line("2.0", "observeCapability", "", `{"capabilityID":"desk_lamp"}`), false},
	{"observeCapability with sessionId", 2, line("2.0", "observeCapability", `"sessionId":"s"`, `{"capabilityId":"desk_lamp"}`), true},
	{"observeCapability in 1.x", 1, line("1.0", "observeCapability", "", `{"capabilityId":"desk_lamp"}`), false},
	{"invokeCapability", 2, line("2.0", "invokeCapability", "", `{"capabilityId":"desk_lamp","action":"set_power","args":{"on":true}}`), true},
	{"invokeCapability without args", 2, line("2.0", "invokeCapability", "", `{"capabilityId":"desk_lamp","action":"set_power"}`), true},
	{"invokeCapability args array", 2, line("2.0", "invokeCapability", "", `{"capabilityId":"desk_lamp","action":"set_power","args":[true]}`), false},
	{"invokeCapability args null", 2, line("2.0", "invokeCapability", "", `{"capabilityId":"desk_lamp","action":"set_power","args":null}`), false},
	{"invokeCapability without action", 2, line("2.0", "invokeCapability", "", `{"capabilityId":"desk_lamp"}`), false},
	{"invokeCapability action number", 2, line("2.0", "invokeCapability", "", `{"capabilityId":"desk_lamp","action":1,"args":{}}`), false},
	{"invokeCapability id object", 2, line("2.0", "invokeCapability", "", `{"capabilityId":{},"action":"set_power","args":{}}`), false},
	{"invokeCapability unknown member", 2, line("2.0", "invokeCapability", "", `{"capabilityId":"desk_lamp","action":"set_power","arguments":{}}`), true},
	{"invokeCapability case variant", 2, line("2.0", "invokeCapability", "", `{"capabilityId":"desk_lamp","action":"set_power","Args":{}}`), false},
	{"invokeCapability with idempotencyKey", 2, line("2.0", "invokeCapability", `"idempotencyKey":"k"`, `{"capabilityId":"desk_lamp","action":"set_power","args":{"on":true}}`), true},
	{"invokeCapability in 1.x", 1, line("1.0", "invokeCapability", "", `{"capabilityId":"desk_lamp","action":"set_power","args":{"on":true}}`), false},
	// Rooms (2.x). The wire checks are the member types, the id, host id, action and
	// approval id grammars and the bounds; whether the room, capability, provider or
	// approval exists is the room service's to say.
	{"roomStatus", 2, line("2.0", "roomStatus", "", `{}`), true},
	{"roomStatus with a member", 2, line("2.0", "roomStatus", "", `{"verbose":true}`), true},
	{"roomStatus in 1.x", 1, line("1.0", "roomStatus", "", `{}`), false},
	{"listRooms", 2, line("2.0", "listRooms", "", `{}`), true},
	{"listApprovals", 2, line("2.0", "listApprovals", "", `{}`), true},
	{"roomUILogin", 2, line("2.0", "roomUILogin", "", `{}`), true},
	{"roomUILogin in 1.x", 1, line("1.0", "roomUILogin", "", `{}`), false},
	{"fabricStatus", 2, line("2.0", "fabricStatus", "", `{}`), true},
	{"fabricStatus in 1.x", 1, line("1.0", "fabricStatus", "", `{}`), false},
	{"listBusHosts", 2, line("2.0", "listBusHosts", "", `{}`), true},
	{"listBusHosts in 1.x", 1, line("1.0", "listBusHosts", "", `{}`), false},
	{"admitBusHost", 2, line("2.0", "admitBusHost", "", `{"hostId":"`+rep("b", 64)+`","nkey":"U`+rep("A", 55)+`","rooms":[{"room":"home","owner":true}]}`), true},
	{"admitBusHost without rooms", 2, line("2.0", "admitBusHost", "", `{"hostId":"`+rep("b", 64)+`","nkey":"U`+rep("A", 55)+`"}`), true},
	{"admitBusHost unknown member", 2, line("2.0", "admitBusHost", "", `{"hostId":"`+rep("b", 64)+`","nkey":"U`+rep("A", 55)+`","extra":1}`), true},
	{"admitBusHost a seed", 2, line("2.0", "admitBusHost", "", `{"hostId":"`+rep("b", 64)+`","nkey":"SU`+rep("A", 56)+`"}`), false},
	{"admitBusHost lowercase nkey", 2, line("2.0", "admitBusHost", "", `{"hostId":"`+rep("b", 64)+`","nkey":"U`+rep("a", 55)+`"}`), false},
	{"admitBusHost no nkey", 2, line("2.0", "admitBusHost", "", `{"hostId":"`+rep("b", 64)+`"}`), false},
	{"admitBusHost bad host", 2, line("2.0", "admitBusHost", "", `{"hostId":"B`+rep("b", 63)+`","nkey":"U`+rep("A", 55)+`"}`), false},
	{"admitBusHost bad room", 2, line("2.0", "admitBusHost", "", `{"hostId":"`+rep("b", 64)+`","nkey":"U`+rep("A", 55)+`","rooms":[{"room":"-x"}]}`), false},
	{"admitBusHost room case variant", 2, line("2.0", "admitBusHost", "", `{"hostId":"`+rep("b", 64)+`","nkey":"U`+rep("A", 55)+`","rooms":[{"room":"home","Owner":true}]}`), false},
	{"admitBusHost too many rooms", 2, line("2.0", "admitBusHost", "", `{"hostId":"`+rep("b", 64)+`","nkey":"U`+rep("A", 55)+`","rooms":[`+strings.Repeat(`{"room":"r"},`, 256)+`{"room":"r"}]}`), false},
	{"removeBusHost", 2, line("2.0", "removeBusHost", "", `{"hostId":"`+rep("b", 64)+`"}`), true},
	{"removeBusHost bad host", 2, line("2.0", "removeBusHost", "", `{"hostId":"b"}`), false},
	{"removeRoomMember", 2, line("2.0", "removeRoomMember", "", `{"room":"home","hostId":"`+rep("b", 64)+`"}`), true},
	{"removeRoomMember no room", 2, line("2.0", "removeRoomMember", "", `{"hostId":"`+rep("b", 64)+`"}`), false},
	{"removeRoomMember bad host", 2, line("2.0", "removeRoomMember", "", `{"room":"home","hostId":"`+rep("B", 64)+`"}`), false},
	{"removeRoomMember host case variant", 2, line("2.0", "removeRoomMember", "", `{"room":"home","hostId":"`+rep("b", 64)+`","HostId":"x"}`), false},
	{"createRoom", 2, line("2.0", "createRoom", "", `{"room":"home","title":"Home"}`), true},
	{"createRoom without title", 2, line("2.0", "createRoom", "", `{"room":"home"}`), true},
	{"createRoom id 64", 2, line("2.0", "createRoom", "", `{"room":"`+rep("a", 64)+`"}`), true},
	{"createRoom id 65", 2, line("2.0", "createRoom", "", `{"room":"`+rep("a", 65)+`"}`), false},
	{"createRoom id uppercase", 2, line("2.0", "createRoom", "", `{"room":"Home"}`), false},
	{"createRoom id with a dot", 2, line("2.0", "createRoom", "", `{"room":"a.b"}`), false},
	{"createRoom id starting with -", 2, line("2.0", "createRoom", "", `{"room":"-a"}`), false},
	{"createRoom without room", 2, line("2.0", "createRoom", "", `{"title":"Home"}`), false},
	{"createRoom title 128", 2, line("2.0", "createRoom", "", `{"room":"home","title":"`+rep("t", 128)+`"}`), true},
	{"createRoom title 129", 2, line("2.0", "createRoom", "", `{"room":"home","title":"`+rep("t", 129)+`"}`), false},
	{"createRoom title control", 2, line("2.0", "createRoom", "", `{"room":"home","title":"a\tb"}`), false},
	{"createRoom case variant", 2, line("2.0", "createRoom", "", `{"Room":"home"}`), false},
	{"showRoom", 2, line("2.0", "showRoom", "", `{"room":"home"}`), true},
	{"showRoom room number", 2, line("2.0", "showRoom", "", `{"room":7}`), false},
	{"closeRoom", 2, line("2.0", "closeRoom", "", `{"room":"home"}`), true},
	{"listRoomCapabilities", 2, line("2.0", "listRoomCapabilities", "", `{"room":"home"}`), true},
	{"listRoomCapabilities without room", 2, line("2.0", "listRoomCapabilities", "", `{}`), false},
	{"inviteRoom", 2, line("2.0", "inviteRoom", "", `{"room":"home","name":"bob"}`), true},
	{"inviteRoom name control", 2, line("2.0", "inviteRoom", "", `{"room":"home","name":"b\u0085ob"}`), false},
	{"joinRoom", 2, line("2.0", "joinRoom", "", `{"code":"ajc1.home.x.y"}`), true},
	{"joinRoom code empty", 2, line("2.0", "joinRoom", "", `{"code":""}`), false},
	{"joinRoom code 257", 2, line("2.0", "joinRoom", "", `{"code":"`+rep("c", 257)+`"}`), false},
	{"joinRoom code number", 2, line("2.0", "joinRoom", "", `{"code":1}`), false},
	{"publishCapability", 2, line("2.0", "publishCapability", "", `{"room":"home","capabilityId":"desk_lamp","actions":["set_power"],"observe":true,"members":["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"],"approveEach":true}`), true},
	{"publishCapability all actions", 2, line("2.0", "publishCapability", "", `{"room":"home","capabilityId":"desk_lamp"}`), true},
	{"publishCapability action grammar", 2, line("2.0", "publishCapability", "", `{"room":"home","capabilityId":"desk_lamp","actions":["Set"]}`), false},
	{"publishCapability 9 actions", 2, line("2.0", "publishCapability", "", `{"room":"home","capabilityId":"desk_lamp","actions":["a","b","c","d","e","f","g","h","i"]}`), false},
	{"publishCapability member not a host id", 2, line("2.0", "publishCapability", "", `{"room":"home","capabilityId":"desk_lamp","members":["bob"]}`), false},
	{"publishCapability observe string", 2, line("2.0", "publishCapability", "", `{"room":"home","capabilityId":"desk_lamp","observe":"yes"}`), false},
	{"publishCapability without capabilityId", 2, line("2.0", "publishCapability", "", `{"room":"home"}`), false},
	{"unpublishCapability", 2, line("2.0", "unpublishCapability", "", `{"room":"home","capabilityId":"desk_lamp"}`), true},
	{"unpublishCapability id grammar", 2, line("2.0", "unpublishCapability", "", `{"room":"home","capabilityId":"Desk"}`), false},
	{"observeRoomCapability", 2, line("2.0", "observeRoomCapability", "", `{"room":"home","provider":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","capabilityId":"desk_lamp"}`), true},
	{"observeRoomCapability with action", 2, line("2.0", "observeRoomCapability", "", `{"room":"home","provider":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","capabilityId":"desk_lamp","action":"set_power"}`), false},
	{"observeRoomCapability with args", 2, line("2.0", "observeRoomCapability", "", `{"room":"home","provider":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","capabilityId":"desk_lamp","args":{}}`), false},
	{"observeRoomCapability provider uppercase", 2, line("2.0", "observeRoomCapability", "", `{"room":"home","provider":"`+rep("A", 64)+`","capabilityId":"desk_lamp"}`), false},
	{"observeRoomCapability without provider", 2, line("2.0", "observeRoomCapability", "", `{"room":"home","capabilityId":"desk_lamp"}`), false},
	{"invokeRoomCapability", 2, line("2.0", "invokeRoomCapability", "", `{"room":"home","provider":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","capabilityId":"desk_lamp","action":"set_power","args":{"on":true}}`), true},
	{"invokeRoomCapability without args", 2, line("2.0", "invokeRoomCapability", "", `{"room":"home","provider":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","capabilityId":"desk_lamp","action":"set_power"}`), true},
	{"invokeRoomCapability without action", 2, line("2.0", "invokeRoomCapability", "", `{"room":"home","provider":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","capabilityId":"desk_lamp"}`), false},
	{"invokeRoomCapability args array", 2, line("2.0", "invokeRoomCapability", "", `{"room":"home","provider":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","capabilityId":"desk_lamp","action":"set_power","args":[1]}`), false},
	{"invokeRoomCapability args null", 2, line("2.0", "invokeRoomCapability", "", `{"room":"home","provider":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","capabilityId":"desk_lamp","action":"set_power","args":null}`), false},
	{"invokeRoomCapability case variant", 2, line("2.0", "invokeRoomCapability", "", `{"room":"home","provider":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","capabilityId":"desk_lamp","Action":"set_power"}`), false},
	{"invokeRoomCapability in 1.x", 1, line("1.0", "invokeRoomCapability", "", `{"room":"home","provider":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","capabilityId":"desk_lamp","action":"set_power"}`), false},
	{"decideApproval", 2, line("2.0", "decideApproval", "", `{"approvalId":"`+rep("0", 24)+`","approve":false}`), true},
	{"decideApproval without approve", 2, line("2.0", "decideApproval", "", `{"approvalId":"`+rep("0", 24)+`"}`), false},
	{"decideApproval approve string", 2, line("2.0", "decideApproval", "", `{"approvalId":"`+rep("0", 24)+`","approve":"yes"}`), false},
	{"decideApproval id 23", 2, line("2.0", "decideApproval", "", `{"approvalId":"`+rep("0", 23)+`","approve":true}`), false},
	{"decideApproval remember", 2, line("2.0", "decideApproval", "", `{"approvalId":"`+rep("0", 24)+`","approve":true,"remember":true,"anyArgs":true}`), true},
	{"decideApproval remember a denial", 2, line("2.0", "decideApproval", "", `{"approvalId":"`+rep("0", 24)+`","approve":false,"remember":true}`), false},
	{"decideApproval pattern without remember", 2, line("2.0", "decideApproval", "", `{"approvalId":"`+rep("0", 24)+`","approve":true,"pattern":"src/**"}`), false},
	{"decideApproval pattern and anyArgs", 2, line("2.0", "decideApproval", "", `{"approvalId":"`+rep("0", 24)+`","approve":true,"remember":true,"pattern":"a","anyArgs":true}`), false},
	{"decideApproval pattern too long", 2, line("2.0", "decideApproval", "", `{"approvalId":"`+rep("0", 24)+`","approve":true,"remember":true,"pattern":"`+rep("a", 4097)+`"}`), false},
	{"forgetApproval", 2, line("2.0", "forgetApproval", "", `{"memoryId":"`+rep("0", 24)+`"}`), true},
	{"forgetApproval id 25", 2, line("2.0", "forgetApproval", "", `{"memoryId":"`+rep("0", 25)+`"}`), false},
}

// TestAgreement runs each command line through the parser and through the schema of its major
// version and requires the same verdict from both, and the one the table expects.
// TestServerOutputAttachmentBounds checks the lines the attachment bounds produce (issue
// 24.3) against the schemas: attachmentEvicted, in the evicted session's version, as the last
// line of the connection whose attachment made room; attachment_capacity when none may.
func TestServerOutputAttachmentBounds(t *testing.T) {
	v := newValidator(t)
	limits := daemon.DefaultLimits
	limits.MaxAttachments, limits.MaxAttachmentsPerSession = 2, 1
	_, socket, cwd, _ := startDaemon(t, limits)
	checked := 0
	o := v.dial(t, socket, "o", "2.0", &checked)
	waitReady(t, o)
	open := `{"cwd":"` + cwd + `","session":{"mode":"new"},"resources":` + resources("") + `}`
	for _, s := range []string{"s1", "s2", "s3"} {
		o.ok(o.call("open", `"sessionId":"`+s+`","generation":1`, open), "openResult")
	}
	x := v.dial(t, socket, "x", "1.0", &checked)
	x.ok(x.call("attach", `"sessionId":"s1","generation":1`, `{}`), "attachResult")
	// s1 is at its bound of one: y's attachment displaces x's, the process's own.
	y := v.dial(t, socket, "y", "2.0", &checked)
	y.ok(y.call("attach", `"sessionId":"s1","generation":1`, `{}`), "attachResult")
	ev := x.next()
	data, _ := ev["data"].(map[string]any)
	if ev["event"] != "attachmentEvicted" || ev["sessionId"] != "s1" || ev["protocolVersion"] != "2.0" || num(ev["sequence"]) != 0 ||
		data["limit"] != "perSession" || num(data["maxAttachmentsPerSession"]) != 1 || num(data["maxAttachments"]) != 2 {
		t.Errorf("x got %v, want attachmentEvicted of s1", ev)
	}
	select {
	case line, ok := <-x.c.Events():
		if ok {
			t.Errorf("x got %s after attachmentEvicted, want the connection closed", line)
		}
	case <-time.After(10 * time.Second):
		t.Error("x's connection was not closed after attachmentEvicted")
	}
	// y holds s1 and s2, the total: its third attachment could displace only its own, on this
	// very connection, so it is refused.
	y.ok(y.call("attach", `"sessionId":"s2","generation":1`, `{}`), "attachResult")
	e := y.fail(y.call("attach", `"sessionId":"s3","generation":1`, `{}`), "attachment_capacity")
	if det := e["details"].(map[string]any); det["limit"] != "total" || num(det["maxAttachments"]) != 2 || num(det["maxAttachmentsPerSession"]) != 1 {
		t.Errorf("attachment_capacity details: %v", det)
	}
	// y keeps both attachments.
	o.ok(o.call("close", `"sessionId":"s2","generation":1`, `{}`), "closeResult")
	if ev := y.next(); ev["event"] != "sessionClosed" || ev["sessionId"] != "s2" {
		t.Errorf("y got %v, want sessionClosed of s2", ev)
	}
	if checked < 8 {
		t.Errorf("only %d lines checked", checked)
	}
}

func TestAgreement(t *testing.T) {
	if len(agreementCases) < 60 {
		t.Fatalf("only %d agreement cases", len(agreementCases))
	}
	v := newValidator(t)
	st, err := store.Open(filepath.Join(t.TempDir(), "state"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seen := map[string]bool{}
	for _, tc := range agreementCases {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			code, why := codeAccepts(st, []byte(tc.line))
			schemaErr := v.root[tc.major].Validate(parseInstance(t, []byte(tc.line)))
			if code != tc.ok {
				t.Errorf("parser accepts=%v (%s), table says %v", code, why, tc.ok)
			}
			if (schemaErr == nil) != tc.ok {
				t.Errorf("schema accepts=%v, table says %v: %v", schemaErr == nil, tc.ok, schemaErr)
			}
		})
	}
}

// codeAccepts reports whether the daemon would accept a command line: the envelope parser, the
// operation's closed payload type and its bounds check, and for listSessions the cursor check
// the store makes; it mirrors dispatch.go and adapters.go in internal/daemon. Runtime checks (a
// cwd that exists, a session that is resident, an adapter registration that starts, a
// capability some adapter serves, invoke args that fit the action) are not part of the wire
// format and are left out.
//
// An open that grants a host tool adapter also has its descriptor parsed, as dispatch does,
// against a binding of the envelope's sessionId and generation and of the descriptor's own
// hostInstanceId: that the descriptor names this host incarnation is a runtime fact, and so is
// its agreement with the envelope (tool_adapter_binding_mismatch), so no row here breaks it.
// The same holds for the other checks listed at descriptorCases. invokeTool is the parser's
// closed payload and its bounds; which operation the generation was granted and whether the
// arguments fit it are the adapter connection's checks (adapter_operation_denied,
// adapter_request_invalid, invalid_tool_adapter_path), made before anything is sent.
func codeAccepts(st *store.Store, line []byte) (bool, string) {
	cmd, perr := protocol.ParseCommand(line)
	if perr != nil {
		return false, perr.Code
	}
	var e *protocol.Error
	switch cmd.Operation {
	case protocol.OpHandshake, protocol.OpStatus, protocol.OpAttach, protocol.OpDetach, protocol.OpDescribeSession:
		e = protocol.DecodePayload(cmd, &protocol.EmptyPayload{})
	case protocol.OpOpen:
		var p protocol.OpenPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			if _, e = p.Validate(cmd.Version); e == nil && p.ToolDescriptor() != nil {
				var probe struct {
					Binding struct {
						HostInstanceID string `json:"hostInstanceId"`
					} `json:"binding"`
				}
				_ = json.Unmarshal(p.ToolDescriptor(), &probe)
				_, e = tooladapter.ParseDescriptor(p.ToolDescriptor(), tooladapter.Binding{
					HostInstanceID: probe.Binding.HostInstanceID, SessionID: cmd.SessionID, Generation: cmd.Generation})
			}
		}
	case protocol.OpInvokeTool:
		var p protocol.InvokeToolPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpClose:
		e = protocol.DecodePayload(cmd, &protocol.ClosePayload{})
	case protocol.OpDrain:
		var p protocol.DrainPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			_, e = p.Validate()
		}
	case protocol.OpListSessions:
		var p protocol.ListSessionsPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			var limit int
			if limit, e = p.Validate(); e == nil {
				if _, _, err := st.Page(p.Cursor, limit); err != nil {
					e = protocol.AsError(err)
				}
			}
		}
	case protocol.OpRegisterAdapter:
		var p protocol.RegisterAdapterPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpRemoveAdapter, protocol.OpAdapterLogs:
		var p protocol.AdapterNamePayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpListAdapters, protocol.OpListCapabilities:
		e = protocol.DecodePayload(cmd, &protocol.EmptyPayload{})
	case protocol.OpDescribeCapability, protocol.OpObserveCapability:
		var p protocol.CapabilityPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpInvokeCapability:
		var p protocol.InvokeCapabilityPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpRoomStatus, protocol.OpListRooms, protocol.OpListApprovals, protocol.OpRoomUILogin, protocol.OpFabricStatus, protocol.OpListBusHosts,
		protocol.OpListRememberedApprovals:
		e = protocol.DecodePayload(cmd, &protocol.EmptyPayload{})
	case protocol.OpForgetApproval:
		var p protocol.ForgetApprovalPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpAdmitBusHost:
		var p protocol.AdmitBusHostPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpRemoveRoomMember:
		var p protocol.RoomMemberPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpRemoveBusHost:
		var p protocol.BusHostPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpCreateRoom:
		var p protocol.CreateRoomPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpShowRoom, protocol.OpCloseRoom, protocol.OpListRoomCapabilities:
		var p protocol.RoomPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpInviteRoom:
		var p protocol.InviteRoomPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpJoinRoom:
		var p protocol.JoinRoomPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpPublishCapability:
		var p protocol.PublishCapabilityPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpUnpublishCapability:
		var p protocol.RoomCapabilityPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpObserveRoomCapability, protocol.OpInvokeRoomCapability:
		var p protocol.RoomCallPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate(cmd.Operation == protocol.OpInvokeRoomCapability)
		}
	case protocol.OpDecideApproval:
		var p protocol.DecideApprovalPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpWake:
		var p protocol.WakePayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpSteer, protocol.OpFollowUp:
		var p protocol.MessagePayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpAbort:
		e = protocol.DecodePayload(cmd, &protocol.EmptyPayload{})
	case protocol.OpTicket:
		var p protocol.TicketPayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	case protocol.OpReconcile:
		var p protocol.ReconcilePayload
		if e = protocol.DecodePayload(cmd, &p); e == nil {
			e = p.Validate()
		}
	default:
		return false, "no payload rule for " + cmd.Operation
	}
	if e != nil {
		return false, e.Code + ": " + e.Message
	}
	return true, ""
}

// --- Real server output ---

// modelProviders are the providers the test daemons configure, all served by one scripted
// model server: the opens of these tests name them.
var modelProviders = []string{"ollama", "openai", "p"}

// startDaemon starts an in-process daemon under a short temporary directory, with the
// providers of modelProviders configured to a scripted model server it returns as well.
func startDaemon(t *testing.T, limits daemon.Limits) (*daemon.Daemon, string, string, *modeltest.Server) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "al-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	llm := modeltest.New()
	t.Cleanup(llm.Close) // after the daemon's shutdown, which the next cleanup runs
	providers := make(map[string]session.Provider, len(modelProviders))
	for _, name := range modelProviders {
		providers[name] = session.Provider{Name: name, BaseURL: llm.URL()}
	}
	socket := filepath.Join(dir, "s.sock")
	d, err := daemon.Start(daemon.Config{SocketPath: socket, StateDir: filepath.Join(dir, "state"), Limits: limits, Providers: providers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	cwd := filepath.Join(dir, "work")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	return d, socket, cwd, llm
}

// peer is one client connection whose every received line is validated.
type peer struct {
	t       *testing.T
	v       *validator
	name    string
	version string
	c       *client.Client
	n       int
	events  []map[string]any // events received and not yet taken
	checked *int             // lines validated, across peers
	lines   *[]string        // when set, every line received is appended
}

func (v *validator) dial(t *testing.T, socket, name, version string, checked *int) *peer {
	t.Helper()
	c, err := client.Dial(context.Background(), socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetVersion(version)
	return &peer{t: t, v: v, name: name, version: version, c: c, checked: checked}
}

var majorPrefix = regexp.MustCompile(`^([0-9]+)\.`)

// check validates one line the daemon sent against the schema of the major version it carries
// and returns it decoded. A line of another major (an incompatible_protocol answer echoes the
// client's "3.0") is outside both schemas; it is returned unchecked.
func (p *peer) check(line []byte) map[string]any {
	p.t.Helper()
	if p.lines != nil {
		*p.lines = append(*p.lines, string(line))
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		p.t.Fatalf("%s: daemon sent non-JSON: %v\n%s", p.name, err, line)
	}
	pv, _ := m["protocolVersion"].(string)
	sub := majorPrefix.FindStringSubmatch(pv)
	if sub == nil {
		p.t.Fatalf("%s: line without a protocol version: %s", p.name, line)
	}
	major, _ := strconv.Atoi(sub[1])
	sch := p.v.root[major]
	if sch == nil {
		return m
	}
	if err := sch.Validate(parseInstance(p.t, line)); err != nil {
		p.t.Errorf("%s: line does not validate against the v%d schema: %v\n%s", p.name, major, err, line)
	}
	*p.checked++
	return m
}

// next returns the next line the daemon sends on this connection, checked.
func (p *peer) next() map[string]any {
	p.t.Helper()
	select {
	case raw, ok := <-p.c.Events():
		if !ok {
			p.t.Fatalf("%s: connection closed", p.name)
		}
		return p.check(raw)
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s: nothing received for 10s", p.name)
	}
	return nil
}

// send writes one raw line and returns the response to it. Events that arrive first are kept
// for event().
func (p *peer) send(line string) map[string]any {
	p.t.Helper()
	if err := p.c.WriteLine([]byte(line + "\n")); err != nil {
		p.t.Fatal(err)
	}
	for {
		m := p.next()
		if m["kind"] == "event" {
			p.events = append(p.events, m)
			continue
		}
		return m
	}
}

// call sends a command built from its parts, with a fresh requestId.
func (p *peer) call(op, identity, payload string) map[string]any {
	p.t.Helper()
	p.n++
	rid := fmt.Sprintf("%s-%d", p.name, p.n)
	s := `{"protocolVersion":"` + p.version + `","requestId":"` + rid + `","operation":"` + op + `"`
	if identity != "" {
		s += "," + identity
	}
	s += `,"payload":` + payload + "}"
	resp := p.send(s)
	if resp["requestId"] != rid {
		p.t.Fatalf("%s: answer to %s has requestId %v", p.name, rid, resp["requestId"])
	}
	if resp["protocolVersion"] != p.version {
		p.t.Errorf("%s: answer to %s version %v, want the echo %q", p.name, rid, resp["protocolVersion"], p.version)
	}
	return resp
}

// ok requires a successful response and validates its data against one definition.
func (p *peer) ok(resp map[string]any, def string) map[string]any {
	p.t.Helper()
	if resp["ok"] != true {
		p.t.Fatalf("%s: want ok, got %v", p.name, resp)
	}
	major, _ := strconv.Atoi(strings.SplitN(p.version, ".", 2)[0])
	if err := p.v.def(p.t, major, def).Validate(resp["data"]); err != nil {
		p.t.Errorf("%s: data is not a %s: %v", p.name, def, err)
	}
	return resp["data"].(map[string]any)
}

// fail requires an error response with the given code and returns the error.
func (p *peer) fail(resp map[string]any, code string) map[string]any {
	p.t.Helper()
	e, _ := resp["error"].(map[string]any)
	if resp["ok"] != false || e == nil || e["code"] != code {
		p.t.Fatalf("%s: want error %s, got %v", p.name, code, resp)
	}
	return e
}

// event returns the next event, waiting for it if none is kept.
func (p *peer) event() map[string]any {
	p.t.Helper()
	for len(p.events) == 0 {
		m := p.next()
		if m["kind"] != "event" {
			p.t.Fatalf("%s: want an event, got %v", p.name, m)
		}
		p.events = append(p.events, m)
	}
	ev := p.events[0]
	p.events = p.events[1:]
	return ev
}

func (p *peer) noEvents() {
	p.t.Helper()
	if len(p.events) > 0 {
		p.t.Errorf("%s: unexpected events %v", p.name, p.events)
	}
}

// waitReady polls host status until recovery is done. It uses Call, whose parsed response is
// encoded again to be checked.
func waitReady(t *testing.T, p *peer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := p.c.Call(context.Background(), client.Command{Operation: protocol.OpStatus})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		p.check(raw)
		var host protocol.HostSnapshot
		if err := resp.Decode(&host); err != nil {
			t.Fatal(err)
		}
		if host.Ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("daemon not ready after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func num(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

// TestServerOutput drives a daemon through every operation and validates every line it sends.
func TestServerOutput(t *testing.T) {
	v := newValidator(t)
	d, socket, cwd, llm := startDaemon(t, daemon.DefaultLimits)
	checked := 0
	a := v.dial(t, socket, "a", "1.0", &checked)
	b := v.dial(t, socket, "b", "2.0", &checked)
	c := v.dial(t, socket, "c", "2.7", &checked)
	waitReady(t, b)

	// Handshakes: data.protocolVersion is "2.0" for any 2.x request, "1.0" otherwise.
	h1 := a.ok(a.call("handshake", "", `{}`), "handshake")
	if h1["protocolVersion"] != "1.0" || h1["supportedVersions"] != nil {
		t.Errorf("1.0 handshake: %v", h1)
	}
	h2 := b.ok(b.call("handshake", "", `{}`), "handshake")
	if h2["protocolVersion"] != "2.0" || h2["supportedVersions"] == nil || h2["supportedProtocolVersions"] == nil {
		t.Errorf("2.0 handshake: %v", h2)
	}
	h27 := c.ok(c.call("handshake", "", `{}`), "handshake")
	if h27["protocolVersion"] != "2.0" {
		t.Errorf("2.7 handshake: %v", h27)
	}

	// Opens: a v1 session with a model, a v2 session with a system prompt and a sessionDir.
	open1 := openPayload(`"cwd":"`+cwd+`","name":"Büro","model":{"provider":"ollama","id":"qwen3","thinkingLevel":"low"}`, "cwd")
	r := a.ok(a.call("open", `"sessionId":"s1","generation":1`, open1), "openResult")
	if r["created"] != true {
		t.Errorf("first open: %v", r)
	}
	r = a.ok(a.call("open", `"sessionId":"s1","generation":1`, open1), "openResult")
	if r["created"] != false {
		t.Errorf("repeated open of the resident generation: %v", r)
	}
	open2 := `{"cwd":"` + cwd + `","session":{"mode":"new","sessionDir":"` + cwd + `"},"resources":` +
		resources(`"systemPrompt":"Answer in one line."`) + `}`
	b.ok(b.call("open", `"sessionId":"s2","generation":4`, open2), "openResult")
	a.fail(a.call("open", `"sessionId":"s1","generation":1`, openPayload(`"cwd":"`+cwd+`"`, "cwd")), "session_policy_conflict")

	// Status: host (lists the 2.0 session to a 1.0 client), one session.
	host := a.ok(a.call("status", "", `{}`), "hostSnapshot")
	if n := len(host["sessions"].([]any)); n != 2 {
		t.Errorf("host status lists %d sessions, want 2", n)
	}
	a.ok(a.call("status", `"sessionId":"s1"`, `{}`), "sessionSnapshot")
	a.ok(a.call("status", `"sessionId":"s1","generation":1`, `{}`), "sessionSnapshot")
	a.fail(a.call("status", `"sessionId":"nope"`, `{}`), "session_not_found")

	// Attach: a (1.0) and b (2.0) to s1, c to s2.
	att := a.ok(a.call("attach", `"sessionId":"s1","generation":1`, `{}`), "attachResult")
	if att["attached"] != true {
		t.Errorf("attach: %v", att)
	}
	b.ok(b.call("attach", `"sessionId":"s1","generation":1`, `{}`), "attachResult")
	c.ok(c.call("attach", `"sessionId":"s2","generation":4`, `{}`), "attachResult")

	// Errors: stale generation, a higher one, unsupported and unknown operations.
	e := a.fail(a.call("open", `"sessionId":"s1","generation":0`, open1), "stale_generation")
	if det := e["details"].(map[string]any); num(det["currentGeneration"]) != 1 || num(det["receivedGeneration"]) != 0 {
		t.Errorf("stale_generation details: %v", det)
	}
	a.fail(a.call("attach", `"sessionId":"s1","generation":0`, `{}`), "stale_generation")
	a.fail(a.call("attach", `"sessionId":"s1","generation":2`, `{}`), "session_not_found")
	a.fail(a.call("wake", `"sessionId":"s1","generation":0,"idempotencyKey":"k1"`, `{"prompt":"hi"}`), "stale_generation")
	b.fail(b.call("ticket", "", `{"ticketId":"`+ticketID+`"}`), "ticket_not_found")
	a.fail(a.call("ticket", "", `{"ticketId":"`+ticketID+`"}`), "unknown_operation")

	// Agent turns: a (1.0) and b (2.0) are attached to s1 and see every event of its turns.
	driveTurns(t, llm, a, b, c, cwd)
	a.fail(a.call("listSessions", "", `{}`), "unknown_operation")
	a.fail(a.call("close", `"sessionId":"s1","generation":1`, `{"retainSession":1}`), "invalid_field")
	a.fail(a.send(`{"protocolVersion":"1.0","requestId":"dup","operation":"status","operation":"status","payload":{}}`), "invalid_field")
	a.fail(a.send(`{"protocolVersion":"1.0.0","requestId":"badv","operation":"status","payload":{}}`), "invalid_protocol_version")
	a.fail(a.send(`{"protocolVersion":"1.0","requestId":"","operation":"status","payload":{}}`), "invalid_field")
	b.fail(b.call("open", `"sessionId":"s9","generation":1`, openPayload(`"cwd":"/nonexistent/airlock"`, "cwd")), "open_failed")
	b.fail(b.call("open", `"sessionId":"s9","generation":1`, openPayload(`"resources":`+resources(`"skills":"all"`), "resources")), "unsupported_resource_policy")

	// Detach: once attached, then not.
	if r := a.ok(a.call("detach", `"sessionId":"s1","generation":1`, `{}`), "detachResult"); r["detached"] != true {
		t.Errorf("detach: %v", r)
	}
	if r := a.ok(a.call("detach", `"sessionId":"s1","generation":1`, `{}`), "detachResult"); r["detached"] != false {
		t.Errorf("second detach: %v", r)
	}

	// The catalog (2.x only): pages of one, and a description with the policy digest.
	page := b.ok(b.call("listSessions", "", `{"limit":1}`), "sessionPage")
	cursor, _ := page["nextCursor"].(string)
	if cursor == "" || len(page["sessions"].([]any)) != 1 {
		t.Fatalf("first page: %v", page)
	}
	page = b.ok(b.call("listSessions", "", `{"limit":1,"cursor":"`+cursor+`"}`), "sessionPage")
	if page["nextCursor"] != nil {
		t.Errorf("last page has a cursor: %v", page)
	}
	desc := b.ok(b.call("describeSession", `"sessionId":"s1"`, `{}`), "sessionDescription")
	checkDigest(t, desc["record"].(map[string]any))
	if desc["snapshot"] == nil {
		t.Errorf("resident session described without a snapshot: %v", desc)
	}
	desc2 := b.ok(b.call("describeSession", `"sessionId":"s2"`, `{}`), "sessionDescription")
	checkDigest(t, desc2["record"].(map[string]any))
	b.fail(b.call("describeSession", `"sessionId":"nope"`, `{}`), "session_not_found")

	// Close with the session kept: b is attached and gets sessionClosed in the version of the
	// session's open (1.0), though it speaks 2.0.
	cl := b.ok(b.call("close", `"sessionId":"s1","generation":1`, `{}`), "closeResult")
	if cl["closed"] != true || cl["deleted"] != false {
		t.Errorf("close: %v", cl)
	}
	ev := b.event()
	if ev["event"] != "sessionClosed" || ev["protocolVersion"] != "1.0" || ev["sessionId"] != "s1" {
		t.Errorf("sessionClosed: %v", ev)
	}
	if data := ev["data"].(map[string]any); data["retainSession"] != true || data["reason"] != "closed" {
		t.Errorf("sessionClosed data: %v", data)
	}
	a.noEvents()
	desc = b.ok(b.call("describeSession", `"sessionId":"s1"`, `{}`), "sessionDescription")
	if rec := desc["record"].(map[string]any); rec["residency"] != "dormant" || desc["snapshot"] != nil {
		t.Errorf("closed session: %v", desc)
	}
	a.fail(a.call("status", `"sessionId":"s1"`, `{}`), "session_not_found")
	cl = b.ok(b.call("close", `"sessionId":"s1","generation":1`, `{"retainSession":false}`), "closeResult")
	if cl["closed"] != false || cl["deleted"] != true {
		t.Errorf("close of a dormant session without retain: %v", cl)
	}

	// A higher generation replaces the resident one: its subscribers get sessionClosed.
	a.ok(a.call("open", `"sessionId":"s3","generation":1`, open1), "openResult")
	a.ok(a.call("attach", `"sessionId":"s3","generation":1`, `{}`), "attachResult")
	a.ok(a.call("open", `"sessionId":"s3","generation":2`, open1), "openResult")
	if ev := a.event(); ev["event"] != "sessionClosed" || ev["data"].(map[string]any)["reason"] != "replaced" || num(ev["generation"]) != 1 {
		t.Errorf("replaced: %v", ev)
	}

	// Capability adapters (2.x): go-lamp is registered, driven and removed, and registered again
	// so that shutdown has a child to reap.
	lampPID := driveAdapters(t, a, b)

	// Drain: c, attached to s2, gets hostDraining; new residency is refused.
	dr := b.ok(b.call("drain", "", `{"timeoutMs":1000}`), "drainResult")
	if num(dr["timeoutMs"]) != 1000 {
		t.Errorf("drain: %v", dr)
	}
	if ev := c.event(); ev["event"] != "hostDraining" || ev["protocolVersion"] != "2.0" {
		t.Errorf("hostDraining: %v", ev)
	}
	b.fail(b.call("open", `"sessionId":"s4","generation":1`, open2), "host_draining")

	// A framing error is answered (version 1.0) and closes the connection.
	f := v.dial(t, socket, "f", "2.0", &checked)
	f.fail(f.send(`{"protocolVersion":"2.0",`), "invalid_json")
	waitClosed(t, f)
	// Another major is answered in its own version, outside both schemas, and closes too.
	g := v.dial(t, socket, "g", "3.0", &checked)
	if r := g.send(`{"protocolVersion":"3.0","requestId":"x","operation":"handshake","payload":{}}`); r["protocolVersion"] != "3.0" {
		t.Errorf("incompatible_protocol answer: %v", r)
	} else {
		g.fail(r, "incompatible_protocol")
	}
	waitClosed(t, g)

	// Shutdown retires s2: c gets sessionClosed with reason shutdown before its connection ends.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := c.event(); ev["event"] != "sessionClosed" || ev["data"].(map[string]any)["reason"] != "shutdown" {
		t.Errorf("shutdown: %v", ev)
	}
	if err := syscall.Kill(lampPID, 0); err != syscall.ESRCH {
		t.Errorf("the adapter (pid %d) outlived the daemon's shutdown: %v", lampPID, err)
	}
	if checked < 100 {
		t.Errorf("only %d lines checked", checked)
	}
	t.Logf("%d lines validated", checked)
}

// buildLamp builds the example adapter examples/adapters/go-lamp into a temporary directory.
// It needs no race detector: it is a separate process that imports nothing of airlock.
func buildLamp(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "go-lamp")
	cmd := exec.Command("go", "build", "-o", out, "./examples/adapters/go-lamp")
	cmd.Dir = ".." // the module root; tests run in schemas/
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build go-lamp: %v\n%s", err, b)
	}
	return out
}

func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// driveAdapters registers go-lamp and drives the eight capability-adapter operations through b
// (2.0), their refusals, a crash and restart, and a removal; a (1.0) sees none of it. It leaves
// go-lamp registered and returns its pid, for the shutdown check.
func driveAdapters(t *testing.T, a, b *peer) int {
	t.Helper()
	lamp := buildLamp(t)
	register := `{"name":"lamp","command":` + jsonString(lamp) + `,"passEnv":["CUPS_SERVER"]}`
	hostAdapters := func(p *peer) []any {
		t.Helper()
		host := p.ok(p.call("status", "", `{}`), "hostSnapshot")
		list, _ := host["adapters"].([]any)
		if _, present := host["adapters"]; present && len(list) == 0 {
			t.Errorf("%s: host status with an empty adapters member: %v", p.name, host["adapters"])
		}
		return list
	}
	adapterList := func() []any {
		t.Helper()
		return b.ok(b.call("listAdapters", "", `{}`), "adapterList")["adapters"].([]any)
	}

	// The operations are 2.x only.
	for _, op := range []string{"registerAdapter", "removeAdapter", "listAdapters", "adapterLogs",
		"listCapabilities", "describeCapability", "observeCapability", "invokeCapability"} {
		a.fail(a.call(op, "", `{}`), "unknown_operation")
	}
	if n := len(adapterList()); n != 0 {
		t.Errorf("adapters before any registration: %d", n)
	}
	if caps := b.ok(b.call("listCapabilities", "", `{}`), "capabilityList")["capabilities"].([]any); len(caps) != 0 {
		t.Errorf("capabilities before any registration: %v", caps)
	}
	if list := hostAdapters(b); list != nil {
		t.Errorf("host status reports adapters before any registration: %v", list)
	}

	reg := b.ok(b.call("registerAdapter", "", register), "registerResult")["adapter"].(map[string]any)
	pid := int(num(reg["pid"]))
	if reg["name"] != "lamp" || reg["state"] != "ready" || pid == 0 || reg["command"] != lamp ||
		fmt.Sprint(reg["capabilities"]) != "[desk_lamp]" || fmt.Sprint(reg["args"]) != "[]" || fmt.Sprint(reg["passEnv"]) != "[CUPS_SERVER]" {
		t.Fatalf("register: %v", reg)
	}

	// Registration refusals: the envelope, the registration rules, a capability another adapter
	// owns.
	// An unknown member is ignored, as in every payload; a case variant of a known one is not.
	b.fail(b.call("registerAdapter", "", `{"name":"lamp","command":`+jsonString(lamp)+`,"Args":[]}`), "invalid_field")
	b.fail(b.call("registerAdapter", "", `{"name":"lamp","command":""}`), "invalid_field")
	b.fail(b.call("registerAdapter", "", `{"name":"Lamp","command":`+jsonString(lamp)+`}`), "invalid_field")
	b.fail(b.call("registerAdapter", "", `{"name":"lamp2","command":"./go-lamp"}`), "invalid_registration")
	b.fail(b.call("registerAdapter", "", `{"name":"lamp2","command":`+jsonString(lamp)+`,"args":["`+rep("a", 1025)+`"]}`), "invalid_field")
	b.fail(b.call("registerAdapter", "", `{"name":"lamp2","command":`+jsonString(lamp)+`}`), "capability_conflict")

	if list := adapterList(); len(list) != 1 || list[0].(map[string]any)["name"] != "lamp" {
		t.Errorf("listAdapters: %v", list)
	}
	caps := b.ok(b.call("listCapabilities", "", `{}`), "capabilityList")["capabilities"].([]any)
	if len(caps) != 1 {
		t.Fatalf("listCapabilities: %v", caps)
	}
	if c := caps[0].(map[string]any); c["capabilityId"] != "desk_lamp" || c["adapter"] != "lamp" || c["available"] != true ||
		fmt.Sprint(c["actions"]) != "[set_power set_brightness]" {
		t.Errorf("capability summary: %v", c)
	}
	desc := b.ok(b.call("describeCapability", "", `{"capabilityId":"desk_lamp"}`), "capabilityDescription")["descriptor"].(map[string]any)
	if desc["observe"] != true || len(desc["actions"].([]any)) != 2 {
		t.Errorf("descriptor: %v", desc)
	}
	b.fail(b.call("describeCapability", "", `{"capabilityId":"no_such_thing"}`), "unknown_capability")

	obs := b.ok(b.call("observeCapability", "", `{"capabilityId":"desk_lamp"}`), "capabilityResult")
	if res := obs["result"].(map[string]any); obs["action"] != nil || res["on"] != false || num(res["brightness"]) != 60 {
		t.Errorf("observe: %v", obs)
	}
	inv := b.ok(b.call("invokeCapability", "", `{"capabilityId":"desk_lamp","action":"set_power","args":{"on":true}}`), "capabilityResult")
	if res := inv["result"].(map[string]any); inv["action"] != "set_power" || inv["capabilityId"] != "desk_lamp" || res["on"] != true {
		t.Errorf("invoke set_power: %v", inv)
	}
	inv = b.ok(b.call("invokeCapability", "", `{"capabilityId":"desk_lamp","action":"set_brightness","args":{"level":30}}`), "capabilityResult")
	if res := inv["result"].(map[string]any); num(res["brightness"]) != 30 {
		t.Errorf("invoke set_brightness: %v", inv)
	}

	// Capability refusals: malformed payloads at the envelope (invalid_field), the rest by the
	// runtime, or by the adapter itself (a level over 100). None of them stops the adapter.
	refusals := []struct{ op, payload, code string }{
		{"invokeCapability", `{"capabilityId":"desk_lamp","action":"set_power","args":{"on":"yes"}}`, "invalid_args"},
		{"invokeCapability", `{"capabilityId":"desk_lamp","action":"set_power","args":{}}`, "invalid_args"},
		{"invokeCapability", `{"capabilityId":"desk_lamp","action":"set_power","args":{"on":true,"extra":1}}`, "invalid_args"},
		{"invokeCapability", `{"capabilityId":"desk_lamp","action":"set_power","args":[true]}`, "invalid_field"},
		{"invokeCapability", `{"capabilityId":"desk_lamp","action":"set_power","args":{"on":null}}`, "invalid_args"},
		{"invokeCapability", `{"capabilityId":"desk_lamp","action":"set_brightness","args":{"level":150}}`, "invalid_args"},
		{"invokeCapability", `{"capabilityId":"desk_lamp","action":"set_power","args":{"on":true,"pad":"` + rep("x", 1100) + `"}}`, "invalid_field"},
		{"invokeCapability", `{"capabilityId":"desk_lamp","action":"explode","args":{}}`, "unsupported_action"},
		{"invokeCapability", `{"capabilityId":"desk_lamp"}`, "invalid_field"},
		{"invokeCapability", `{"capabilityId":"no_such_thing","action":"set_power","args":{"on":true}}`, "unknown_capability"},
		{"invokeCapability", `{"capabilityId":"desk_lamp","action":"set_power","args":{"on":true},"ARGS":1}`, "invalid_field"},
		{"observeCapability", `{}`, "invalid_field"},
		{"observeCapability", `{"capabilityId":"desk_lamp","capabilityID":"x"}`, "invalid_field"},
		{"adapterLogs", `{"name":"nope"}`, "unknown_adapter"},
		{"adapterLogs", `{"name":""}`, "invalid_field"},
		{"removeAdapter", `{"name":"lamp2"}`, "unknown_adapter"},
	}
	for _, r := range refusals {
		if e := b.fail(b.call(r.op, "", r.payload), r.code); e["details"] != nil && r.code != "invalid_field" {
			t.Errorf("%s %s: details %v", r.op, r.payload, e["details"])
		}
	}
	if list := adapterList(); num(list[0].(map[string]any)["pid"]) != int64(pid) {
		t.Errorf("a refusal restarted the adapter: %v", list)
	}

	logs := b.ok(b.call("adapterLogs", "", `{"name":"lamp"}`), "adapterLogsResult")
	if lines := fmt.Sprint(logs["lines"]); logs["name"] != "lamp" || !strings.Contains(lines, fmt.Sprintf("[airlock] started pid %d", pid)) {
		t.Errorf("adapterLogs: %v", logs)
	}

	// Host status reports the adapter to 2.x clients only, in status and in the handshake.
	if list := hostAdapters(b); len(list) != 1 || list[0].(map[string]any)["state"] != "ready" {
		t.Errorf("2.x host status adapters: %v", list)
	}
	if list := hostAdapters(a); list != nil {
		t.Errorf("1.x host status reports adapters: %v", list)
	}
	if h := b.ok(b.call("handshake", "", `{}`), "handshake"); h["host"].(map[string]any)["adapters"] == nil {
		t.Errorf("2.x handshake host lacks the adapter: %v", h["host"])
	}

	// A crash: the capability is unavailable, retryably, until the supervisor restarted the
	// adapter (after 250 ms); status shows the restart and the failure.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := b.call("observeCapability", "", `{"capabilityId":"desk_lamp"}`)
		if r["ok"] == false {
			if e := b.fail(r, "unavailable"); e["retryable"] != true {
				t.Errorf("unavailable is not retryable: %v", e)
			}
			break
		}
		b.ok(r, "capabilityResult")
		if time.Now().After(deadline) {
			t.Fatal("observe never failed after the adapter was killed")
		}
		time.Sleep(2 * time.Millisecond)
	}
	for {
		st := adapterList()[0].(map[string]any)
		if st["state"] == "ready" && num(st["pid"]) != int64(pid) {
			if num(st["restarts"]) < 1 || st["lastFailure"] == nil {
				t.Errorf("restarted adapter: %v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("adapter not restarted: %v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res := b.ok(b.call("observeCapability", "", `{"capabilityId":"desk_lamp"}`), "capabilityResult")["result"].(map[string]any); num(res["brightness"]) != 60 {
		t.Errorf("observe after the restart: %v", res)
	}
	pid = int(num(adapterList()[0].(map[string]any)["pid"]))

	// Removal stops and reaps the child; the name and the capability are gone.
	if r := b.ok(b.call("removeAdapter", "", `{"name":"lamp"}`), "removeResult"); r["removed"] != true {
		t.Errorf("remove: %v", r)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("removed adapter (pid %d) still exists: %v", pid, err)
	}
	b.fail(b.call("removeAdapter", "", `{"name":"lamp"}`), "unknown_adapter")
	b.fail(b.call("adapterLogs", "", `{"name":"lamp"}`), "unknown_adapter")
	b.fail(b.call("observeCapability", "", `{"capabilityId":"desk_lamp"}`), "unknown_capability")
	b.fail(b.call("describeCapability", "", `{"capabilityId":"desk_lamp"}`), "unknown_capability")
	if list := hostAdapters(b); list != nil {
		t.Errorf("host status reports a removed adapter: %v", list)
	}
	reg = b.ok(b.call("registerAdapter", "", register), "registerResult")["adapter"].(map[string]any)
	return int(num(reg["pid"]))
}

// waitClosed drains a connection the daemon is closing, checking what it still sends.
func waitClosed(t *testing.T, p *peer) {
	t.Helper()
	for {
		select {
		case raw, ok := <-p.c.Events():
			if !ok {
				return
			}
			p.check(raw)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: connection still open", p.name)
		}
	}
}

// checkDigest recomputes a catalog record's policyDigest from its policy.
func checkDigest(t *testing.T, rec map[string]any) {
	t.Helper()
	raw, err := json.Marshal(rec["policy"])
	if err != nil {
		t.Fatal(err)
	}
	var pol protocol.Policy
	if err := json.Unmarshal(raw, &pol); err != nil {
		t.Fatal(err)
	}
	if got := pol.Digest(); got != rec["policyDigest"] {
		t.Errorf("policyDigest %v, recomputed %s", rec["policyDigest"], got)
	}
}

// TestServerOutputOverLimits provokes the replacement records: a response over the response
// limit becomes outbound_record_too_large, an event over the event limit becomes eventDropped at
// the same sequence.
func TestServerOutputOverLimits(t *testing.T) {
	v := newValidator(t)
	limits := daemon.DefaultLimits
	limits.MaxEventBytes = 2048
	limits.MaxResponseBytes = 2048
	d, socket, cwd, llm := startDaemon(t, limits)
	checked := 0
	a := v.dial(t, socket, "a", "1.0", &checked)
	b := v.dial(t, socket, "b", "2.0", &checked)

	// A session id of four-byte runes (1 KiB, in the envelope and again in the snapshot), a
	// name and a model id of three-byte runes make the open response exceed 2048 bytes, the
	// smallest limit the daemon accepts. Until recovery is done the open is refused with
	// host_not_ready, which is small.
	bigID := rep("𝔰", 256)
	bigSession := `"sessionId":"` + bigID + `","generation":1`
	big := `{"cwd":"` + cwd + `","name":"` + rep("名", 128) + `","session":{"mode":"new"},"model":{"provider":"p","id":"` +
		rep("模", 256) + `"},"resources":` + resources("") + `}`
	deadline := time.Now().Add(10 * time.Second)
	var resp map[string]any
	for {
		resp = a.call("open", bigSession, big)
		if e, _ := resp["error"].(map[string]any); e == nil || e["code"] != "host_not_ready" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("daemon not ready after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e := a.fail(resp, "outbound_record_too_large")
	if resp["sessionId"] != bigID || resp["sequence"] != nil {
		t.Errorf("replaced response should keep sessionId and drop sequence: %v", resp)
	}
	if num(e["details"].(map[string]any)["maxBytes"]) != 2048 {
		t.Errorf("details: %v", e)
	}

	// Several sessions make host status (and the handshake that embeds it) too large as well.
	for i := range 3 {
		a.call("open", fmt.Sprintf(`"sessionId":"more-%d","generation":1`, i), big)
	}
	a.fail(a.call("status", "", `{}`), "outbound_record_too_large")
	b.fail(b.call("handshake", "", `{}`), "outbound_record_too_large")

	// The attached connection gets eventDropped in place of the oversized sessionClosed.
	att := b.ok(b.call("attach", bigSession, `{}`), "attachResult")
	b.ok(b.call("close", bigSession, `{}`), "closeResult")
	ev := b.event()
	if ev["event"] != "eventDropped" || num(ev["sequence"]) != num(att["sequence"])+1 || ev["protocolVersion"] != "1.0" {
		t.Errorf("eventDropped: %v", ev)
	}
	data := ev["data"].(map[string]any)
	if data["originalEvent"] != "sessionClosed" || data["error"].(map[string]any)["code"] != "outbound_record_too_large" {
		t.Errorf("eventDropped data: %v", data)
	}

	// A turn whose text does not fit: its answer is replaced, and so are its messageUpdate and
	// messageEnd events; the small events around them arrive as they are.
	const small = `"sessionId":"small","generation":1`
	b.ok(b.call("open", small, `{"cwd":"`+cwd+`","session":{"mode":"new"},"model":{"provider":"p","id":"m"},"resources":`+resources("")+`}`), "openResult")
	b.ok(b.call("attach", small, `{}`), "attachResult")
	llm.Push(modeltest.Reply{Text: rep("x", 3000)})
	b.fail(b.call("wake", small+`,"idempotencyKey":"k"`, `{"prompt":"say a lot"}`), "outbound_record_too_large")
	var seen []string
	for {
		ev := b.event()
		name := ev["event"].(string)
		if name == "eventDropped" {
			name += "(" + ev["data"].(map[string]any)["originalEvent"].(string) + ")"
		}
		seen = append(seen, name)
		if name == "sessionIdle" {
			break
		}
	}
	if got, want := strings.Join(seen, " "), "promptAccepted turnStart messageStart eventDropped(messageUpdate) eventDropped(messageEnd) turnEnd sessionIdle"; got != want {
		t.Errorf("events of an oversized turn: %s, want %s", got, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d lines validated", checked)
}

// piCompatCases are the rows of the compatibility table in docs/protocol.md, as command lines
// under both majors: a command Pi Daemon accepts is accepted, one it refuses is refused.
// internal/daemon's TestPiDaemonCompat sends the same kinds of line to the real daemon and
// checks the codes.
func piCompatCases() []agreementCase {
	var cases []agreementCase
	for _, major := range []int{1, 2} {
		v := strconv.Itoa(major) + ".0"
		add := func(name, line string, ok bool) {
			cases = append(cases, agreementCase{"pi " + v + " " + name, major, line, ok})
		}
		// Envelope.
		add("version minor with leading zeros", line(strconv.Itoa(major)+".007", "handshake", "", `{}`), true)
		add("version minor of 30 digits", line(strconv.Itoa(major)+"."+rep("9", 30), "handshake", "", `{}`), true)
		add("version of 33 characters", line(strconv.Itoa(major)+"."+rep("9", 31), "handshake", "", `{}`), false)
		add("requestId of 128", strings.Replace(line(v, "handshake", "", `{}`), `"r-1"`, `"`+rep("r", 128)+`"`, 1), true)
		add("requestId of 129", strings.Replace(line(v, "handshake", "", `{}`), `"r-1"`, `"`+rep("r", 129)+`"`, 1), false)
		add("unknown envelope member", strings.Replace(line(v, "handshake", "", `{}`), `"payload"`, `"trace":{"id":1},"payload"`, 1), true)
		add("payload missing", `{"protocolVersion":"`+v+`","requestId":"r","operation":"handshake"}`, false)
		add("payload an array", line(v, "handshake", "", `[]`), false)
		add("generation 3.0", line(v, "open", `"sessionId":"s","generation":3.0`, openPayload("")), true)
		add("generation 1e1", line(v, "open", `"sessionId":"s","generation":1e1`, openPayload("")), true)
		add("generation -0", line(v, "open", `"sessionId":"s","generation":-0`, openPayload("")), true)
		add("generation 1.5", line(v, "open", `"sessionId":"s","generation":1.5`, openPayload("")), false)
		add("generation -1", line(v, "open", `"sessionId":"s","generation":-1`, openPayload("")), false)
		add("generation 2^53", line(v, "open", `"sessionId":"s","generation":9007199254740992`, openPayload("")), false)
		add("sessionId of 256", line(v, "status", `"sessionId":"`+rep("s", 256)+`"`, `{}`), true)
		add("sessionId of 257", line(v, "status", `"sessionId":"`+rep("s", 257)+`"`, `{}`), false)
		add("idempotencyKey of 512", line(v, "wake", `"sessionId":"s","generation":1,"idempotencyKey":"`+rep("k", 512)+`"`, `{"prompt":"p"}`), true)
		add("idempotencyKey of 513", line(v, "wake", `"sessionId":"s","generation":1,"idempotencyKey":"`+rep("k", 513)+`"`, `{"prompt":"p"}`), false)
		add("handshake ignores identity", line(v, "handshake", `"sessionId":5,"generation":"x","idempotencyKey":null`, `{}`), true)
		add("drain ignores identity", line(v, "drain", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{}`), true)
		add("open ignores idempotencyKey", line(v, "open", `"sessionId":"s","generation":1,"idempotencyKey":[]`, openPayload("")), true)
		add("status ignores a generation without sessionId", line(v, "status", `"generation":"x"`, `{}`), true)
		add("wake without idempotencyKey", line(v, "wake", `"sessionId":"s","generation":1`, `{"prompt":"p"}`), false)
		// open.
		add("open as Pi's own example", openLine(v,
			`{"cwd":"/tmp","name":"agent-a","session":{"mode":"new"},"model":{"provider":"p","id":"m"},"resources":`+resources(`"systemPrompt":"Be concise."`)+`}`), true)
		add("open without resources", openLine(v, openPayload("", "resources")), true)
		add("open resources null", openLine(v, openPayload(`"resources":null`, "resources")), false)
		add("open unknown members at every level", openLine(v,
			`{"cwd":"/tmp","future":{"a":1},"session":{"mode":"new","fork":true},"model":{"provider":"p","id":"m","temperature":0.2},"resources":`+resources(`"agents":"all"`)+`}`), true)
		add("open case-variant payload member", openLine(v, openPayload(`"CWD":"/x"`)), false)
		add("open case-variant session member", openLine(v, openPayload(`"session":{"mode":"new","MODE":"x"}`, "session")), false)
		add("open case-variant model member", openLine(v, openPayload(`"model":{"provider":"p","id":"m","Provider":"q"}`)), false)
		add("open case-variant resources member", openLine(v, openPayload(`"resources":`+resources(`"SystemPrompt":"x"`), "resources")), false)
		add("open cwd missing", openLine(v, openPayload("", "cwd")), false)
		add("open session missing", openLine(v, openPayload("", "session")), false)
		add("open mode fork", openLine(v, openPayload(`"session":{"mode":"fork"}`, "session")), false)
		add("open mode open without path", openLine(v, openPayload(`"session":{"mode":"open"}`, "session")), false)
		add("open mode new with a path", openLine(v, openPayload(`"session":{"mode":"new","path":"rel"}`, "session")), true)
		add("open mode new with an empty path", openLine(v, openPayload(`"session":{"mode":"new","path":""}`, "session")), false)
		add("open name of 129", openLine(v, openPayload(`"name":"`+rep("n", 129)+`"`)), false)
		add("open model without id", openLine(v, openPayload(`"model":{"provider":"p"}`)), false)
		add("open thinkingLevel ultra", openLine(v, openPayload(`"model":{"provider":"p","id":"m","thinkingLevel":"ultra"}`)), false)
		add("open skills all", openLine(v, openPayload(`"resources":`+resources(`"skills":"all"`), "resources")), false)
		add("open skills a number", openLine(v, openPayload(`"resources":`+resources(`"skills":1`), "resources")), false)
		add("open themes missing", openLine(v, openPayload(`"resources":`+resources("", "themes"), "resources")), false)
		add("open systemPrompt text", openLine(v, openPayload(`"resources":`+resources(`"systemPrompt":"Be concise."`), "resources")), true)
		add("open systemPrompt empty", openLine(v, openPayload(`"resources":`+resources(`"systemPrompt":""`), "resources")), true)
		add("open systemPrompt none", openLine(v, openPayload(`"resources":`+resources(`"systemPrompt":"none"`), "resources")), true)
		add("open systemPrompt at the limit", openLine(v, openPayload(`"resources":`+resources(`"systemPrompt":"`+rep("é", 262144)+`"`), "resources")), true)
		add("open systemPrompt over the limit", openLine(v, openPayload(`"resources":`+resources(`"systemPrompt":"`+rep("x", 262145)+`"`), "resources")), false)
		add("open systemPrompt a number", openLine(v, openPayload(`"resources":`+resources(`"systemPrompt":1`), "resources")), false)
		add("open sessionDir a number", openLine(v, openPayload(`"session":{"mode":"new","sessionDir":7}`, "session")), major == 1)
		add("open tools host-adapter string", openLine(v, openPayload(`"resources":`+resources(`"tools":"host-adapter"`), "resources")), false)
		add("open tools with a smuggled member", openLine(v, openPayload(`"resources":`+resources(`"tools":{"mode":"host-adapter","descriptor":{},"token":"t"}`), "resources")), false)
		add("open tools mode builtin", openLine(v, openPayload(`"resources":`+resources(`"tools":{"mode":"builtin","descriptor":{}}`), "resources")), false)
		// wake, steer, followUp.
		add("wake unknown member", wakeLine(v, `{"prompt":"p","priority":1}`), true)
		add("wake prompt empty", wakeLine(v, `{"prompt":""}`), false)
		add("wake prompt over the limit", wakeLine(v, `{"prompt":"`+rep("x", 262145)+`"}`), false)
		add("wake source of 129", wakeLine(v, `{"prompt":"p","source":"`+rep("s", 129)+`"}`), false)
		add("wake waitForTerminal a string", wakeLine(v, `{"prompt":"p","waitForTerminal":"no"}`), false)
		add("steer unknown member", line(v, "steer", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{"message":"m","x":1}`), true)
		add("followUp message missing", line(v, "followUp", `"sessionId":"s","generation":1,"idempotencyKey":"k"`, `{}`), false)
		// status, abort, attach, detach, close, drain.
		add("status unknown payload member", line(v, "status", "", `{"verbose":true}`), true)
		add("abort unknown payload member", line(v, "abort", `"sessionId":"s","generation":1`, `{"reason":"x"}`), true)
		add("attach without generation", line(v, "attach", `"sessionId":"s"`, `{}`), false)
		add("close unknown member", line(v, "close", `"sessionId":"s","generation":1`, `{"retainSession":false,"why":"x"}`), true)
		add("close retainSession a string", line(v, "close", `"sessionId":"s","generation":1`, `{"retainSession":"no"}`), false)
		add("drain timeoutMs 1e3", line(v, "drain", "", `{"timeoutMs":1e3}`), true)
		add("drain timeoutMs 86400001", line(v, "drain", "", `{"timeoutMs":86400001}`), false)
		add("drain timeoutMs 0.5", line(v, "drain", "", `{"timeoutMs":0.5}`), false)
	}
	return cases
}

// TestServerOutputConnectionAdmission checks the answers of connection admission (issue 16)
// against the schemas: an idle connection evicted for a new one, a new one refused when every
// connection is attached, and a connection that never sends a line.
func TestServerOutputConnectionAdmission(t *testing.T) {
	v := newValidator(t)
	limits := daemon.DefaultLimits
	// Three connections, two per process: a and c stay attached while b and d are turned
	// away; two attachments, so that c's does not displace a's.
	limits.MaxConnections, limits.MaxConnectionsPerPeer, limits.MaxAttachments = 3, 2, 2
	limits.FirstLineTimeout = 300 * time.Millisecond
	_, socket, cwd, _ := startDaemon(t, limits)
	checked := 0
	a := v.dial(t, socket, "a", "2.0", &checked)
	waitReady(t, a)
	open := `{"cwd":"` + cwd + `","session":{"mode":"new"},"resources":` + resources("") + `}`
	a.ok(a.call("open", `"sessionId":"s1","generation":1`, open), "openResult")
	a.ok(a.call("attach", `"sessionId":"s1","generation":1`, `{}`), "attachResult")

	b := v.dial(t, socket, "b", "1.0", &checked)
	b.ok(b.call("handshake", "", `{}`), "handshake")
	c := v.dial(t, socket, "c", "1.0", &checked)
	e := b.fail(b.next(), "connection_evicted")
	if det := e["details"].(map[string]any); num(det["maxConnections"]) != 3 || num(det["maxConnectionsPerPeer"]) != 2 {
		t.Errorf("connection_evicted details: %v", det)
	}
	c.ok(c.call("open", `"sessionId":"s2","generation":1`, open), "openResult")
	c.ok(c.call("attach", `"sessionId":"s2","generation":1`, `{}`), "attachResult")

	d := v.dial(t, socket, "d", "1.0", &checked)
	e = d.fail(d.next(), "connection_capacity")
	if det := e["details"].(map[string]any); num(det["maxConnectionsPerPeer"]) != 2 {
		t.Errorf("connection_capacity details: %v", det)
	}

	c.c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for num(a.ok(a.call("status", "", `{}`), "hostSnapshot")["connections"]) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the closed connection is still counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	idle := v.dial(t, socket, "idle", "1.0", &checked)
	e = idle.fail(idle.next(), "line_timeout")
	if det := e["details"].(map[string]any); num(det["timeoutMs"]) != 300 || det["firstLine"] != true {
		t.Errorf("line_timeout details: %v", det)
	}
	if checked < 10 {
		t.Errorf("only %d lines checked", checked)
	}
}
