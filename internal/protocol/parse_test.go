package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Lines are built from members in the order given, so that tests control order, duplicates
// and exact spelling.

func obj(members ...string) string { return "{" + strings.Join(members, ",") + "}" }

// str is a member with a string value, JSON-escaped.
func str(key, value string) string {
	v, err := json.Marshal(value)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("%q:%s", key, v)
}

// raw is a member whose value is written as is.
func raw(key, value string) string { return fmt.Sprintf("%q:%s", key, value) }

// identityFor returns the identity members an operation needs to be accepted.
func identityFor(op string) []string {
	switch op {
	case OpOpen, OpAbort, OpAttach, OpDetach, OpClose:
		return []string{str("sessionId", "s1"), raw("generation", "1")}
	case OpWake, OpSteer, OpFollowUp:
		return []string{str("sessionId", "s1"), raw("generation", "1"), str("idempotencyKey", "k1")}
	case OpDescribeSession:
		return []string{str("sessionId", "s1")}
	}
	return nil
}

// command is a well-formed command line with extra members inserted before the payload.
func command(version, op string, extra ...string) string {
	m := []string{str("protocolVersion", version), str("requestId", "r1"), str("operation", op)}
	m = append(m, extra...)
	return obj(append(m, raw("payload", "{}"))...)
}

func mustParse(t *testing.T, line string) *Command {
	t.Helper()
	cmd, pe := ParseCommand([]byte(line))
	if pe != nil {
		t.Fatalf("ParseCommand(%s) refused: %v (details %v)", line, pe.Error, pe.Details)
	}
	return cmd
}

// refusal is what a refused line must produce.
type refusal struct {
	name    string
	line    string
	code    string
	field   string // details.field; "" means there must be none
	reason  string // details.reason, when the strict decoder refused
	version string // the version echoed
	rid     string // the requestId echoed
	close   bool
}

func checkRefusal(t *testing.T, tt refusal) {
	t.Helper()
	cmd, pe := ParseCommand([]byte(tt.line))
	if pe == nil {
		t.Fatalf("accepted %s as %+v", tt.line, cmd)
	}
	if cmd != nil {
		t.Errorf("a refusal also returned a command: %+v", cmd)
	}
	if pe.Code != tt.code {
		t.Errorf("code %q, want %q (%s)", pe.Code, tt.code, pe.Message)
	}
	if got, _ := pe.Details["field"].(string); got != tt.field {
		t.Errorf("details.field %q, want %q", got, tt.field)
	}
	if tt.reason != "" {
		if got, _ := pe.Details["reason"].(string); got != tt.reason {
			t.Errorf("details.reason %q, want %q", got, tt.reason)
		}
	}
	if pe.Version != tt.version {
		t.Errorf("echoed version %q, want %q", pe.Version, tt.version)
	}
	if pe.RequestID != tt.rid {
		t.Errorf("echoed requestId %q, want %q", pe.RequestID, tt.rid)
	}
	if pe.Close != tt.close {
		t.Errorf("Close %v, want %v", pe.Close, tt.close)
	}
	if pe.Retryable {
		t.Error("a parse error is never retryable")
	}
	if !errors.Is(pe.Unwrap(), &Error{Code: tt.code}) {
		t.Errorf("Unwrap() = %v, want code %s", pe.Unwrap(), tt.code)
	}
}

func TestParseCommandVersionEcho(t *testing.T) {
	tests := []struct {
		version      string
		major, minor int
	}{
		{"1.0", 1, 0},
		{"2.0", 2, 0},
		{"2.7", 2, 7},
		{"1.99", 1, 99},
		{"1.10", 1, 10},
		{"2.123456789", 2, 123456789},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			cmd := mustParse(t, command(tt.version, OpHandshake))
			want := Version{Major: tt.major, Minor: tt.minor, Raw: tt.version}
			if cmd.Version != want {
				t.Errorf("Version = %+v, want %+v", cmd.Version, want)
			}
			if cmd.RequestID != "r1" || cmd.Operation != OpHandshake || string(cmd.Payload) != "{}" {
				t.Errorf("command %+v", cmd)
			}
			if cmd.Version.V2() != (tt.major == 2) {
				t.Errorf("V2() = %v", cmd.Version.V2())
			}
		})
	}
}

func TestParseCommandBadVersion(t *testing.T) {
	long33 := strings.Repeat("1", 16) + "." + strings.Repeat("1", 16)
	var tests []refusal
	for _, v := range []string{
		"1", "1.", ".1", ".", "v1.0", "1.0.0", "1..0", " 1.0", "1.0 ",
		"1.0\n", "1,0", "+1.0", "-1.0", "1.-0", "1.1e1", "0x1.0", "١.٠", "1.٠",
	} {
		tests = append(tests, refusal{
			name: fmt.Sprintf("string %q", v),
			line: obj(str("protocolVersion", v), str("requestId", "r1"), str("operation", OpHandshake), raw("payload", "{}")),
			code: CodeInvalidProtocolVersion, version: Version1, rid: "r1",
		})
	}
	// As in Pi Daemon, a protocolVersion that is not a string of 1 to 32 characters is a bad
	// member, not a bad version.
	for _, v := range []string{`""`, `"` + long33 + `"`, `1.0`, `1`, `2`, `null`, `true`, `{"major":1}`, `["1.0"]`} {
		tests = append(tests, refusal{
			name: "JSON " + v,
			line: obj(raw("protocolVersion", v), str("requestId", "r1"), str("operation", OpHandshake), raw("payload", "{}")),
			code: CodeInvalidField, field: "protocolVersion", version: Version1, rid: "r1",
		})
	}
	tests = append(tests,
		refusal{name: "missing", line: obj(str("requestId", "r1"), str("operation", OpHandshake), raw("payload", "{}")),
			code: CodeInvalidField, field: "protocolVersion", version: Version1, rid: "r1"},
		refusal{name: "empty object", line: `{}`, code: CodeInvalidField, field: "protocolVersion", version: Version1},
		refusal{name: "bad version and bad requestId", line: obj(str("protocolVersion", "x"), str("requestId", ""), raw("payload", "{}")),
			code: CodeInvalidProtocolVersion, version: Version1},
		// The version is checked first: a bad one hides every other problem.
		refusal{name: "bad version before unknown operation", line: obj(str("protocolVersion", "1"), str("requestId", "r1"), str("operation", "nope")),
			code: CodeInvalidProtocolVersion, version: Version1, rid: "r1"},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkRefusal(t, tt) })
	}
}

func TestParseCommandIncompatibleMajor(t *testing.T) {
	long32 := strings.Repeat("1", 16) + "." + strings.Repeat("1", 15) // the longest version there is
	// A major with a leading zero is not "1" or "2", the majors the schemas spell.
	for _, v := range []string{"3.0", "0.9", "0.0", "10.1", "3.99", long32, "01.0", "02.0", "00.1", "99999999999999999999.0"} {
		t.Run(v, func(t *testing.T) {
			tt := refusal{line: command(v, OpHandshake), code: CodeIncompatibleProtocol, version: v, rid: "r1", close: true}
			checkRefusal(t, tt)
			_, pe := ParseCommand([]byte(tt.line))
			if pe.Details["received"] != v || !reflect.DeepEqual(pe.Details["supported"], []string{"1.0", "2.0"}) {
				t.Errorf("details %v", pe.Details)
			}
		})
	}
	// The major decides before anything else about the command is read.
	checkRefusal(t, refusal{line: obj(str("protocolVersion", "3.0"), str("requestId", ""), str("operation", "nope")),
		code: CodeIncompatibleProtocol, version: "3.0", close: true})
}

func TestParseCommandRequestID(t *testing.T) {
	accepted := []string{
		"r",
		strings.Repeat("a", 128),
		strings.Repeat("é", 128), // 256 bytes
		strings.Repeat("😀", 128), // 512 bytes
		"with space",
		"\u2028 is a separator, not a control character",
	}
	for _, id := range accepted {
		t.Run(fmt.Sprintf("accept %.20q", id), func(t *testing.T) {
			line := obj(str("protocolVersion", "2.0"), str("requestId", id), str("operation", OpStatus), raw("payload", "{}"))
			if cmd := mustParse(t, line); cmd.RequestID != id {
				t.Errorf("RequestID %q, want %q", cmd.RequestID, id)
			}
		})
	}

	var tests []refusal
	for name, v := range map[string]string{
		"missing":        "",
		"empty":          `""`,
		"129 ASCII":      `"` + strings.Repeat("a", 129) + `"`,
		"129 multi-byte": `"` + strings.Repeat("é", 129) + `"`,
		"BEL":            `"a\u0007"`,
		"LF":             `"a\n"`,
		"NUL":            `"\u0000"`,
		"DEL":            `"a\u007f"`,
		"C1 NEL":         `"a\u0085"`,
		"C1 APC":         `"\u009f"`,
		"number":         `1`,
		"null":           `null`,
		"true":           `true`,
		"object":         `{}`,
		"array":          `["r1"]`,
	} {
		members := []string{str("protocolVersion", "2.0")}
		if v != "" {
			members = append(members, raw("requestId", v))
		}
		members = append(members, str("operation", OpStatus), raw("payload", "{}"))
		tests = append(tests, refusal{name: name, line: obj(members...), code: CodeInvalidField, field: "requestId", version: "2.0"})
	}
	// requestId is checked before the operation.
	tests = append(tests, refusal{name: "before operation", line: obj(str("protocolVersion", "1.0"), str("operation", "nope")),
		code: CodeInvalidField, field: "requestId", version: "1.0"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkRefusal(t, tt) })
	}
}

func TestParseCommandOperation(t *testing.T) {
	op32 := strings.Repeat("o", 32)
	op33 := strings.Repeat("o", 33)
	line := func(version, opMember string) string {
		m := []string{str("protocolVersion", version), str("requestId", "r1")}
		if opMember != "" {
			m = append(m, opMember)
		}
		return obj(append(m, raw("payload", "{}"))...)
	}
	tests := []refusal{
		{name: "missing", line: line("1.0", ""), code: CodeInvalidField, field: "operation", version: "1.0", rid: "r1"},
		{name: "empty", line: line("1.0", str("operation", "")), code: CodeInvalidField, field: "operation", version: "1.0", rid: "r1"},
		{name: "33 characters", line: line("1.0", str("operation", op33)), code: CodeInvalidField, field: "operation", version: "1.0", rid: "r1"},
		{name: "number", line: line("1.0", raw("operation", "1")), code: CodeInvalidField, field: "operation", version: "1.0", rid: "r1"},
		{name: "null", line: line("1.0", raw("operation", "null")), code: CodeInvalidField, field: "operation", version: "1.0", rid: "r1"},
		{name: "unknown", line: line("1.0", str("operation", "nope")), code: CodeUnknownOperation, version: "1.0", rid: "r1"},
		{name: "unknown, 32 characters", line: line("2.7", str("operation", op32)), code: CodeUnknownOperation, version: "2.7", rid: "r1"},
		{name: "wrong case", line: line("1.0", str("operation", "Handshake")), code: CodeUnknownOperation, version: "1.0", rid: "r1"},
		{name: "upper case", line: line("2.0", str("operation", "HANDSHAKE")), code: CodeUnknownOperation, version: "2.0", rid: "r1"},
		{name: "trailing space", line: line("1.0", str("operation", "status ")), code: CodeUnknownOperation, version: "1.0", rid: "r1"},
		{name: "listSessions under 1.0", line: line("1.0", str("operation", OpListSessions)), code: CodeUnknownOperation, version: "1.0", rid: "r1"},
		{name: "describeSession under 1.0", line: line("1.0", str("operation", OpDescribeSession)) + "", code: CodeUnknownOperation, version: "1.0", rid: "r1"},
		{name: "listSessions under 1.9", line: line("1.9", str("operation", OpListSessions)), code: CodeUnknownOperation, version: "1.9", rid: "r1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkRefusal(t, tt) })
	}

	_, pe := ParseCommand([]byte(line("1.0", str("operation", "nope"))))
	if pe.Details["operation"] != "nope" {
		t.Errorf("unknown_operation details %v, want the operation named", pe.Details)
	}

	for _, v := range []string{"2.0", "2.7"} {
		for _, op := range []string{OpListSessions, OpDescribeSession} {
			if cmd := mustParse(t, command(v, op, identityFor(op)...)); cmd.Operation != op {
				t.Errorf("%s under %s: %+v", op, v, cmd)
			}
		}
	}
}

// TestOperationTables pins the operation lists: version 1 is exactly the eleven operations of
// the original protocol, in handshake order; 2.x adds the session catalog and the capability
// adapter operations.
func TestOperationTables(t *testing.T) {
	v1 := []string{"handshake", "open", "wake", "steer", "followUp", "status", "abort", "attach", "detach", "close", "drain"}
	v2 := append(slices.Clone(v1), "listSessions", "describeSession", "invokeTool",
		"registerAdapter", "removeAdapter", "listAdapters", "adapterLogs", "approveAdapter",
		"listCapabilities", "describeCapability", "observeCapability", "invokeCapability",
		"ticket", "reconcile", "abortTool",
		"roomStatus", "createRoom", "listRooms", "showRoom", "closeRoom", "inviteRoom", "joinRoom",
		"removeRoomMember", "publishCapability", "unpublishCapability", "listRoomCapabilities",
		"observeRoomCapability", "invokeRoomCapability", "listApprovals", "decideApproval", "roomUILogin", "fabricStatus",
		"admitBusHost", "listBusHosts", "removeBusHost", "listRememberedApprovals", "forgetApproval",
		"proposeAdapter", "listProposals")
	if got := Operations(1); !slices.Equal(got, v1) {
		t.Errorf("Operations(1) = %v", got)
	}
	if got := Operations(2); !slices.Equal(got, v2) {
		t.Errorf("Operations(2) = %v", got)
	}
	Operations(2)[0] = "mutated"
	if Operations(1)[0] != "handshake" {
		t.Error("Operations returns shared storage")
	}
	for _, op := range v2 {
		if _, ok := identityRules[op]; !ok {
			t.Errorf("identityRules lacks %s", op)
		}
	}
	if len(identityRules) != len(v2) {
		t.Errorf("identityRules has %d operations, want %d", len(identityRules), len(v2))
	}
}

type presence int

const (
	ignored presence = iota
	optional
	required
)

// identityRules are the envelope identity members each operation takes, written from the
// protocol documentation rather than from operations.go: sessionId, generation, idempotencyKey.
// A member an operation does not take ("ignored") is accepted and dropped unread, as Pi
// Daemon's parser drops it.
var identityRules = map[string][3]presence{
	"handshake":       {ignored, ignored, ignored},
	"open":            {required, required, ignored},
	"wake":            {required, required, required},
	"steer":           {required, required, required},
	"followUp":        {required, required, required},
	"status":          {optional, optional, ignored},
	"abort":           {required, required, ignored},
	"attach":          {required, required, ignored},
	"detach":          {required, required, ignored},
	"close":           {required, required, ignored},
	"drain":           {ignored, ignored, ignored},
	"listSessions":    {ignored, ignored, ignored},
	"describeSession": {required, ignored, ignored},
	"invokeTool":      {required, required, ignored},

	"registerAdapter":    {ignored, ignored, ignored},
	"removeAdapter":      {ignored, ignored, ignored},
	"listAdapters":       {ignored, ignored, ignored},
	"adapterLogs":        {ignored, ignored, ignored},
	"approveAdapter":     {ignored, ignored, ignored},
	"listCapabilities":   {ignored, ignored, ignored},
	"describeCapability": {ignored, ignored, ignored},
	"observeCapability":  {optional, optional, ignored},
	"invokeCapability":   {optional, optional, ignored},
	"ticket":             {ignored, ignored, ignored},
	"reconcile":          {ignored, ignored, ignored},
	"abortTool":          {ignored, ignored, ignored},

	"roomStatus":            {ignored, ignored, ignored},
	"createRoom":            {ignored, ignored, ignored},
	"listRooms":             {ignored, ignored, ignored},
	"showRoom":              {ignored, ignored, ignored},
	"closeRoom":             {ignored, ignored, ignored},
	"inviteRoom":            {ignored, ignored, ignored},
	"joinRoom":              {ignored, ignored, ignored},
	"publishCapability":     {ignored, ignored, ignored},
	"unpublishCapability":   {ignored, ignored, ignored},
	"listRoomCapabilities":  {ignored, ignored, ignored},
	"observeRoomCapability": {ignored, ignored, ignored},
	"invokeRoomCapability":  {ignored, ignored, ignored},
	"listApprovals":         {ignored, ignored, ignored},
	"decideApproval":        {ignored, ignored, ignored},
	"roomUILogin":           {ignored, ignored, ignored},
	"fabricStatus":          {ignored, ignored, ignored},
	"admitBusHost":          {ignored, ignored, ignored},
	"listBusHosts":          {ignored, ignored, ignored},
	"removeBusHost":         {ignored, ignored, ignored},
	"removeRoomMember":      {ignored, ignored, ignored},

	"listRememberedApprovals": {ignored, ignored, ignored},
	"forgetApproval":          {ignored, ignored, ignored},

	"proposeAdapter": {required, required, ignored},
	"listProposals":  {optional, optional, ignored},
}

var identityNames = [3]string{"sessionId", "generation", "idempotencyKey"}

// TestParseCommandIdentity tries every combination of the three identity members on every
// operation, under both majors, against identityRules.
func TestParseCommandIdentity(t *testing.T) {
	values := [3]string{str("sessionId", "sess-1"), raw("generation", "7"), str("idempotencyKey", "key-1")}
	for op, rules := range identityRules {
		for _, version := range []string{"1.0", "2.0"} {
			if version == "1.0" && !slices.Contains(Operations(1), op) {
				continue // 2.x only; see TestParseCommandOperation
			}
			for mask := range 8 {
				var extra []string
				var present [3]bool
				var offending []string
				var kept [3]bool
				for i := range 3 {
					present[i] = mask&(1<<i) != 0
					if present[i] {
						extra = append(extra, values[i])
					}
					if rules[i] == required && !present[i] {
						offending = append(offending, identityNames[i])
					}
					kept[i] = present[i] && rules[i] != ignored
				}
				if !present[0] && rules[0] == optional { // status without a sessionId asks about the host
					kept[1] = false
				}
				name := fmt.Sprintf("%s/%s/%v", op, version, present)
				cmd, pe := ParseCommand([]byte(command(version, op, extra...)))
				if len(offending) == 0 {
					if pe != nil {
						t.Errorf("%s: refused: %v", name, pe.Error)
						continue
					}
					want := Command{Version: cmd.Version, RequestID: "r1", Operation: op, Payload: cmd.Payload}
					if kept[0] {
						want.SessionID, want.HasSession = "sess-1", true
					}
					if kept[1] {
						want.Generation, want.HasGeneration = 7, true
					}
					if kept[2] {
						want.IdempotencyKey = "key-1"
					}
					if !reflect.DeepEqual(*cmd, want) {
						t.Errorf("%s: got %+v, want %+v", name, *cmd, want)
					}
					continue
				}
				if pe == nil {
					t.Errorf("%s: accepted, want a refusal naming one of %v", name, offending)
					continue
				}
				field, _ := pe.Details["field"].(string)
				if pe.Code != CodeInvalidField || !slices.Contains(offending, field) {
					t.Errorf("%s: %s naming %q, want invalid_field naming one of %v", name, pe.Code, field, offending)
				}
				if pe.RequestID != "r1" || pe.Version != version || pe.Close {
					t.Errorf("%s: echo %q %q close %v", name, pe.RequestID, pe.Version, pe.Close)
				}
			}
		}
	}
}

func TestParseCommandIdentityNamedCases(t *testing.T) {
	tests := []refusal{
		{name: "open without sessionId", line: command("1.0", OpOpen, raw("generation", "1")),
			code: CodeInvalidField, field: "sessionId", version: "1.0", rid: "r1"},
		{name: "open without generation", line: command("1.0", OpOpen, str("sessionId", "s")),
			code: CodeInvalidField, field: "generation", version: "1.0", rid: "r1"},
		{name: "wake without idempotencyKey", line: command("1.0", OpWake, str("sessionId", "s"), raw("generation", "1")),
			code: CodeInvalidField, field: "idempotencyKey", version: "1.0", rid: "r1"},
		// null is a value, not an absent member.
		{name: "status with null sessionId", line: command("1.0", OpStatus, raw("sessionId", "null")),
			code: CodeInvalidField, field: "sessionId", version: "1.0", rid: "r1"},
		{name: "status with null generation", line: command("1.0", OpStatus, str("sessionId", "s"), raw("generation", "null")),
			code: CodeInvalidField, field: "generation", version: "1.0", rid: "r1"},
		{name: "wake with null idempotencyKey", line: command("1.0", OpWake, str("sessionId", "s"), raw("generation", "1"), raw("idempotencyKey", "null")),
			code: CodeInvalidField, field: "idempotencyKey", version: "1.0", rid: "r1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkRefusal(t, tt) })
	}
	for _, extra := range [][]string{nil, {str("sessionId", "s")}, {str("sessionId", "s"), raw("generation", "0")}} {
		mustParse(t, command("1.0", OpStatus, extra...))
	}
	// Members an operation does not take are dropped unread, whatever they hold, as Pi Daemon
	// drops them.
	for _, tt := range []struct {
		name, line string
	}{
		{"handshake with sessionId", command("2.0", OpHandshake, str("sessionId", "s"))},
		{"handshake with a bad sessionId", command("1.0", OpHandshake, raw("sessionId", "5"))},
		{"drain with every identity member", command("1.0", OpDrain, str("sessionId", "s"), raw("generation", `"x"`), raw("idempotencyKey", "null"))},
		{"open with idempotencyKey", command("1.0", OpOpen, str("sessionId", "s"), raw("generation", "1"), str("idempotencyKey", "k"))},
		{"open with a bad idempotencyKey", command("1.0", OpOpen, str("sessionId", "s"), raw("generation", "1"), raw("idempotencyKey", "{}"))},
		{"status with generation only", command("1.0", OpStatus, raw("generation", "1"))},
		{"status with a bad generation only", command("1.0", OpStatus, raw("generation", `"x"`))},
		{"describeSession with generation", command("2.0", OpDescribeSession, str("sessionId", "s"), raw("generation", "1"))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := mustParse(t, tt.line)
			if cmd.IdempotencyKey != "" || (cmd.HasGeneration && cmd.Operation != OpOpen) ||
				(cmd.HasSession && cmd.Operation != OpOpen && cmd.Operation != OpDescribeSession) {
				t.Errorf("kept a member the operation does not take: %+v", cmd)
			}
		})
	}
}

func TestParseCommandGeneration(t *testing.T) {
	accepted := map[string]int64{
		"0":                0,
		"1":                1,
		"9007199254740991": MaxSafeInteger,
		" 42 ":             42, // JSON whitespace around the number
		// Any JSON number worth an integer, as Number.isSafeInteger and JSON Schema read it.
		"-0": 0, "1.0": 1, "1e3": 1000, "1E3": 1000, "1e0": 1, "1E+2": 100, "0.5e1": 5, "120e-1": 12,
		"0e999999999": 0, "9007199254740991.000": MaxSafeInteger, "90071992547409910e-1": MaxSafeInteger,
	}
	for lit, want := range accepted {
		t.Run("accept "+lit, func(t *testing.T) {
			cmd := mustParse(t, command("1.0", OpOpen, str("sessionId", "s"), raw("generation", lit)))
			if !cmd.HasGeneration || cmd.Generation != want {
				t.Errorf("generation %d (has %v), want %d", cmd.Generation, cmd.HasGeneration, want)
			}
		})
	}
	for _, lit := range []string{
		"9007199254740992", "9007199254740993", "99999999999999999999", "-1", "-1e0", "0.5", "1e-1",
		"9.007199254740992e15", "1e400", "1e999999999999", `"1"`, `"01"`, "null", "true", "[1]", "{}",
	} {
		t.Run("refuse "+lit, func(t *testing.T) {
			checkRefusal(t, refusal{line: command("1.0", OpOpen, str("sessionId", "s"), raw("generation", lit)),
				code: CodeInvalidField, field: "generation", version: "1.0", rid: "r1"})
		})
	}
}

func TestParseCommandSessionIDAndKey(t *testing.T) {
	mustParse(t, command("1.0", OpStatus, str("sessionId", strings.Repeat("s", 256))))
	mustParse(t, command("1.0", OpStatus, str("sessionId", strings.Repeat("ß", 256))))
	mustParse(t, command("1.0", OpWake, str("sessionId", "s"), raw("generation", "1"), str("idempotencyKey", strings.Repeat("k", 512))))
	mustParse(t, command("1.0", OpWake, str("sessionId", "s"), raw("generation", "1"), str("idempotencyKey", strings.Repeat("ķ", 512))))

	wake := func(key string) string {
		return command("1.0", OpWake, str("sessionId", "s"), raw("generation", "1"), raw("idempotencyKey", key))
	}
	tests := []refusal{
		{name: "sessionId empty", line: command("1.0", OpStatus, str("sessionId", "")), code: CodeInvalidField, field: "sessionId", version: "1.0", rid: "r1"},
		{name: "sessionId 257", line: command("1.0", OpStatus, str("sessionId", strings.Repeat("s", 257))), code: CodeInvalidField, field: "sessionId", version: "1.0", rid: "r1"},
		{name: "sessionId control", line: command("1.0", OpStatus, str("sessionId", "a\tb")), code: CodeInvalidField, field: "sessionId", version: "1.0", rid: "r1"},
		{name: "sessionId number", line: command("1.0", OpStatus, raw("sessionId", "5")), code: CodeInvalidField, field: "sessionId", version: "1.0", rid: "r1"},
		{name: "idempotencyKey empty", line: wake(`""`), code: CodeInvalidField, field: "idempotencyKey", version: "1.0", rid: "r1"},
		{name: "idempotencyKey 513", line: wake(`"` + strings.Repeat("k", 513) + `"`), code: CodeInvalidField, field: "idempotencyKey", version: "1.0", rid: "r1"},
		{name: "idempotencyKey control", line: wake(`"k\r"`), code: CodeInvalidField, field: "idempotencyKey", version: "1.0", rid: "r1"},
		{name: "idempotencyKey number", line: wake(`7`), code: CodeInvalidField, field: "idempotencyKey", version: "1.0", rid: "r1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkRefusal(t, tt) })
	}
}

func TestParseCommandPayload(t *testing.T) {
	head := []string{str("protocolVersion", "2.0"), str("requestId", "r1"), str("operation", OpHandshake)}
	with := func(members ...string) string { return obj(append(slices.Clone(head), members...)...) }

	for _, v := range []string{"null", "[]", `"{}"`, "1", "true"} {
		checkRefusal(t, refusal{line: with(raw("payload", v)), code: CodeInvalidField, field: "payload", version: "2.0", rid: "r1"})
	}
	checkRefusal(t, refusal{line: with(), code: CodeInvalidField, field: "payload", version: "2.0", rid: "r1"})

	// The payload is kept raw, as sent, for the operation's own strict decode.
	cmd := mustParse(t, with(raw("payload", ` {"cwd": "/x", "Cwd": [1, {"a":null}] } `)))
	if want := `{"cwd": "/x", "Cwd": [1, {"a":null}] }`; string(cmd.Payload) != want {
		t.Errorf("Payload %q, want %q", cmd.Payload, want)
	}
	// Duplicates are refused inside the payload too, already at this stage.
	checkRefusal(t, refusal{line: with(raw("payload", `{"a":1,"b":{"c":1,"c":2}}`)),
		code: CodeInvalidField, field: "payload.b.c", reason: ndjson.ReasonDuplicateKey, version: "2.0", rid: "r1"})
}

func TestParseCommandStrictOuterObject(t *testing.T) {
	tests := []refusal{
		{name: "duplicate operation", line: obj(str("protocolVersion", "2.0"), str("requestId", "r1"), str("operation", OpStatus), str("operation", OpDrain), raw("payload", "{}")),
			code: CodeInvalidField, field: "operation", reason: ndjson.ReasonDuplicateKey, version: "2.0", rid: "r1"},
		{name: "duplicate sessionId", line: command("2.7", OpStatus, str("sessionId", "a"), str("sessionId", "b")),
			code: CodeInvalidField, field: "sessionId", reason: ndjson.ReasonDuplicateKey, version: "2.7", rid: "r1"},
		{name: "duplicate generation", line: command("1.0", OpOpen, str("sessionId", "a"), raw("generation", "1"), raw("generation", "1")),
			code: CodeInvalidField, field: "generation", reason: ndjson.ReasonDuplicateKey, version: "1.0", rid: "r1"},
		{name: "duplicate payload", line: command("1.0", OpStatus, raw("payload", "{}")),
			code: CodeInvalidField, field: "payload", reason: ndjson.ReasonDuplicateKey, version: "1.0", rid: "r1"},
		{name: "duplicate unknown member", line: command("1.0", OpStatus, raw("x", "1"), raw("x", "2")),
			code: CodeInvalidField, field: "x", reason: ndjson.ReasonDuplicateKey, version: "1.0", rid: "r1"},
		{name: "duplicate through an escape", line: command("1.0", OpStatus, `"\u006f\u0070eration":"drain"`),
			code: CodeInvalidField, field: "operation", reason: ndjson.ReasonDuplicateKey, version: "1.0", rid: "r1"},
		{name: "duplicate with a bad requestId", line: obj(str("protocolVersion", "2.0"), str("requestId", ""), str("operation", OpStatus), str("operation", OpStatus)),
			code: CodeInvalidField, field: "operation", reason: ndjson.ReasonDuplicateKey, version: "2.0"},
		{name: "duplicate with a bad version", line: obj(str("protocolVersion", "2"), str("requestId", "r1"), str("operation", OpStatus), str("operation", OpStatus)),
			code: CodeInvalidField, field: "operation", reason: ndjson.ReasonDuplicateKey, version: "1.0", rid: "r1"},
		{name: "case variant SessionId", line: command("2.0", OpStatus, str("SessionId", "s")),
			code: CodeInvalidField, field: "SessionId", reason: ndjson.ReasonCaseVariant, version: "2.0", rid: "r1"},
		{name: "case variant Payload", line: command("1.0", OpStatus, raw("Payload", "{}")),
			code: CodeInvalidField, field: "Payload", reason: ndjson.ReasonCaseVariant, version: "1.0", rid: "r1"},
		{name: "case variant OPERATION", line: command("1.0", OpStatus, str("OPERATION", "drain")),
			code: CodeInvalidField, field: "OPERATION", reason: ndjson.ReasonCaseVariant, version: "1.0", rid: "r1"},
		{name: "long s for s in sessionId", line: command("1.0", OpStatus, str("\u017fessionId", "s")),
			code: CodeInvalidField, field: "\u017fessionId", reason: ndjson.ReasonCaseVariant, version: "1.0", rid: "r1"},
		{name: "Kelvin sign for k in idempotencyKey", line: command("1.0", OpStatus, str("idempotency\u212aey", "k")),
			code: CodeInvalidField, field: "idempotency\u212aey", reason: ndjson.ReasonCaseVariant, version: "1.0", rid: "r1"},
		// Valid JSON that is not an object is a field error, not a framing error.
		{name: "array", line: `[]`, code: CodeInvalidField, version: "1.0", reason: ndjson.ReasonType},
		{name: "null", line: `null`, code: CodeInvalidField, version: "1.0", reason: ndjson.ReasonType},
		{name: "string", line: `"{}"`, code: CodeInvalidField, version: "1.0", reason: ndjson.ReasonType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkRefusal(t, tt) })
	}

	// A member the line names twice, or also under a case variant, is ambiguous: it is not
	// echoed, and the default takes its place.
	ambiguous := []refusal{
		{name: "duplicate requestId", line: obj(str("protocolVersion", "2.0"), str("requestId", "first"), str("requestId", "second"), str("operation", OpStatus), raw("payload", "{}")),
			code: CodeInvalidField, field: "requestId", reason: ndjson.ReasonDuplicateKey, version: "2.0"},
		{name: "duplicate protocolVersion", line: obj(str("protocolVersion", "2.0"), str("protocolVersion", "2.3"), str("requestId", "r1"), str("operation", OpStatus), raw("payload", "{}")),
			code: CodeInvalidField, field: "protocolVersion", reason: ndjson.ReasonDuplicateKey, version: "1.0", rid: "r1"},
		{name: "case variant RequestID next to requestId", line: command("2.0", OpStatus, str("RequestID", "r2")),
			code: CodeInvalidField, field: "RequestID", reason: ndjson.ReasonCaseVariant, version: "2.0"},
		{name: "case variant RequestID alone", line: obj(str("protocolVersion", "2.0"), str("RequestID", "r1"), str("operation", OpStatus), raw("payload", "{}")),
			code: CodeInvalidField, field: "RequestID", reason: ndjson.ReasonCaseVariant, version: "2.0"},
		{name: "case variant of protocolVersion", line: command("2.0", OpStatus, str("ProtocolVersion", "2.0")),
			code: CodeInvalidField, field: "ProtocolVersion", reason: ndjson.ReasonCaseVariant, version: "1.0", rid: "r1"},
	}
	for _, tt := range ambiguous {
		t.Run(tt.name, func(t *testing.T) { checkRefusal(t, tt) })
	}
}

func TestParseCommandToleratesUnknownOuterMembers(t *testing.T) {
	line := command("2.7", OpStatus,
		str("kind", "anything"), raw("extra", `{"deep":[1,{"a":null}],"A":1}`), raw("nothing", "null"), str("traceparent", "00-ab-cd-01"))
	cmd := mustParse(t, line)
	if cmd.Version.Raw != "2.7" || cmd.Operation != OpStatus || cmd.HasSession {
		t.Errorf("command %+v", cmd)
	}
}

func TestParseCommandInvalidJSON(t *testing.T) {
	for _, line := range []string{
		`{`, `not json`, ``, ` `, `{"protocolVersion":"1.0",}`, `{}{}`, `{} x`, `{'a':1}`,
		`{"protocolVersion":"1.0","requestId":"r1","requestId":`, // malformed, whatever its start holds
		`{"protocolVersion":"1.0","requestId":"r1"`,
		// A leading zero is not JSON at all, so "generation":01 never reaches the generation rules.
		`{"protocolVersion":"1.0","requestId":"r1","operation":"open","sessionId":"s","generation":01,"payload":{}}`,
		`{"protocolVersion":"1.0","requestId":"r1","operation":"open","sessionId":"s","generation":00,"payload":{}}`,
		"\ufeff{}",
		"{\"protocolVersion\":\"1.0\",\"requestId\":\"a\tb\"}",
		strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001),
	} {
		t.Run(fmt.Sprintf("%.40q", line), func(t *testing.T) {
			checkRefusal(t, refusal{line: line, code: CodeInvalidJSON, version: Version1, close: true})
		})
	}
}

func TestFrameError(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		code    string
		details map[string]any
	}{
		{"line too large", &ndjson.FrameError{Code: ndjson.CodeLineTooLarge, MaxLineBytes: 1 << 20, ActualBytes: 2_000_000},
			CodeLineTooLarge, map[string]any{"maxLineBytes": 1 << 20, "actualBytes": int64(2_000_000)}},
		{"line too large, lower bound", &ndjson.FrameError{Code: ndjson.CodeLineTooLarge, MaxLineBytes: 10, ActualBytes: 170, ActualIsLowerBound: true},
			CodeLineTooLarge, map[string]any{"maxLineBytes": 10, "actualBytes": int64(170), "actualBytesIsLowerBound": true}},
		{"wrapped", fmt.Errorf("conn 3: %w", &ndjson.FrameError{Code: ndjson.CodeLineTooLarge, MaxLineBytes: 4, ActualBytes: 5}),
			CodeLineTooLarge, map[string]any{"maxLineBytes": 4, "actualBytes": int64(5)}},
		{"invalid UTF-8", &ndjson.FrameError{Code: ndjson.CodeInvalidUTF8}, CodeInvalidUTF8, nil},
		{"not a frame error", io.ErrUnexpectedEOF, CodeInvalidJSON, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pe := FrameError(tt.err)
			if pe.Code != tt.code || !reflect.DeepEqual(pe.Details, tt.details) {
				t.Errorf("got %s %v, want %s %v", pe.Code, pe.Details, tt.code, tt.details)
			}
			if !pe.Close || pe.Version != Version1 || pe.RequestID != "" || pe.Retryable {
				t.Errorf("got %+v", pe)
			}
		})
	}
}

// TestFrameErrorFromReader runs a real Reader into FrameError and checks the wire form.
func TestFrameErrorFromReader(t *testing.T) {
	r := ndjson.NewReader(strings.NewReader(strings.Repeat("x", 20)+"\r\n"+"\xff\n"), 16)
	_, err := r.Next()
	b, _ := json.Marshal(FrameError(err).Error)
	if want := `{"code":"line_too_large","message":"line exceeds 16 bytes","retryable":false,"details":{"actualBytes":20,"maxLineBytes":16}}`; string(b) != want {
		t.Errorf("wire error %s\nwant          %s", b, want)
	}
	_, err = r.Next()
	if pe := FrameError(err); pe.Code != CodeInvalidUTF8 || !pe.Close {
		t.Errorf("got %+v", pe)
	}
}
