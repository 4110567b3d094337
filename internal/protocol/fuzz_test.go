package protocol

import (
	"encoding/json"
	"math/big"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Seeds live in testdata/fuzz/<FuzzName>; `go test` runs them, `go test -fuzz` grows them.

// parseCodes are the only codes ParseCommand may answer with.
var parseCodes = []string{
	CodeInvalidJSON, CodeInvalidField, CodeInvalidProtocolVersion, CodeIncompatibleProtocol, CodeUnknownOperation,
}

// isIdentifier is the identifier rule written out again: 1 to max code points of valid UTF-8,
// none of them a control character.
func isIdentifier(s string, max int) bool {
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > max {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func FuzzParseCommand(f *testing.F) {
	f.Fuzz(func(t *testing.T, line []byte) {
		cmd, pe := ParseCommand(line)
		if (cmd == nil) == (pe == nil) {
			t.Fatalf("want exactly one of command and error, got %+v and %+v", cmd, pe)
		}
		if pe != nil {
			checkFuzzRefusal(t, line, pe)
			return
		}

		// An accepted line is well-formed, duplicate-free JSON...
		if err := ndjson.Valid(line); err != nil {
			t.Fatalf("accepted a line ndjson.Valid refuses: %v", err)
		}
		// ...whose members, read independently, are what the command says.
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("accepted a line that is not a JSON object: %v", err)
		}
		readString := func(key string) (string, bool) {
			raw, ok := m[key]
			if !ok {
				return "", false
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("accepted %s that is not a string: %s", key, raw)
			}
			return s, true
		}

		v := cmd.Version
		if v.Major != 1 && v.Major != 2 {
			t.Fatalf("accepted major %d", v.Major)
		}
		if raw, _ := readString("protocolVersion"); raw != v.Raw {
			t.Fatalf("Version.Raw %q, line says %q", v.Raw, raw)
		}
		if pv, ok := ParseVersion(v.Raw); !ok || pv != v {
			t.Fatalf("Version %+v does not reparse", v)
		}
		if !isIdentifier(cmd.RequestID, 128) {
			t.Fatalf("accepted requestId %q", cmd.RequestID)
		}
		if rid, _ := readString("requestId"); rid != cmd.RequestID {
			t.Fatalf("RequestID %q, line says %q", cmd.RequestID, rid)
		}
		if !slices.Contains(Operations(v.Major), cmd.Operation) {
			t.Fatalf("accepted operation %q under %s", cmd.Operation, v.Raw)
		}
		if op, _ := readString("operation"); op != cmd.Operation {
			t.Fatalf("Operation %q, line says %q", cmd.Operation, op)
		}

		rules, ok := identityRules[cmd.Operation]
		if !ok {
			t.Fatalf("operation %q has no identity rule", cmd.Operation)
		}
		present := [3]bool{cmd.HasSession, cmd.HasGeneration, cmd.IdempotencyKey != ""}
		for i, p := range present {
			if (rules[i] == required && !p) || (rules[i] == ignored && p) {
				t.Fatalf("%s accepted with %s present=%v", cmd.Operation, identityNames[i], p)
			}
		}
		if cmd.HasGeneration && !cmd.HasSession {
			t.Fatal("accepted a generation without a sessionId")
		}
		// A member the operation takes is kept exactly as the line says; one it does not take
		// is dropped, whatever it holds.
		if rules[0] != ignored {
			if sid, ok := readString("sessionId"); ok != cmd.HasSession || sid != cmd.SessionID || (ok && !isIdentifier(sid, 256)) {
				t.Fatalf("SessionID %q (has %v), line says %q (has %v)", cmd.SessionID, cmd.HasSession, sid, ok)
			}
		}
		if rules[2] != ignored {
			if key, ok := readString("idempotencyKey"); ok != (cmd.IdempotencyKey != "") || key != cmd.IdempotencyKey || (ok && !isIdentifier(key, 512)) {
				t.Fatalf("IdempotencyKey %q, line says %q", cmd.IdempotencyKey, key)
			}
		}
		if raw, ok := m["generation"]; rules[1] != ignored && cmd.HasSession && ok != cmd.HasGeneration {
			t.Fatalf("HasGeneration %v, line has it: %v", cmd.HasGeneration, ok)
		} else if cmd.HasGeneration {
			// Any JSON number worth an integer in range: its float64 value is exact there.
			f, err := strconv.ParseFloat(string(raw), 64)
			if err != nil || f != float64(cmd.Generation) || cmd.Generation < 0 || cmd.Generation > MaxSafeInteger {
				t.Fatalf("Generation %d from %s", cmd.Generation, raw)
			}
		}

		if len(cmd.Payload) == 0 || cmd.Payload[0] != '{' || ndjson.Valid(cmd.Payload) != nil {
			t.Fatalf("accepted payload %q", cmd.Payload)
		}
	})
}

func checkFuzzRefusal(t *testing.T, line []byte, pe *ParseError) {
	t.Helper()
	if pe.Error == nil {
		t.Fatal("ParseError without an error")
	}
	if !slices.Contains(parseCodes, pe.Code) {
		t.Fatalf("refused with code %q", pe.Code)
	}
	closing := pe.Code == CodeInvalidJSON || pe.Code == CodeIncompatibleProtocol
	if pe.Close != closing {
		t.Fatalf("%s with Close %v", pe.Code, pe.Close)
	}
	if (pe.Code == CodeInvalidJSON) != !json.Valid(line) {
		t.Fatalf("%s, but json.Valid says %v", pe.Code, json.Valid(line))
	}
	if _, ok := ParseVersion(pe.Version); !ok {
		t.Fatalf("echoes version %q, which does not parse", pe.Version)
	}
	if pe.Code == CodeIncompatibleProtocol {
		v, _ := ParseVersion(pe.Version)
		if v.Major == 1 || v.Major == 2 || pe.Details["received"] != pe.Version {
			t.Fatalf("incompatible_protocol for %q, details %v", pe.Version, pe.Details)
		}
	}
	if pe.RequestID != "" && !isIdentifier(pe.RequestID, 128) {
		t.Fatalf("echoes requestId %q", pe.RequestID)
	}
	if pe.Retryable {
		t.Fatal("a parse error is retryable")
	}
	if f, ok := pe.Details["field"]; ok {
		if _, isString := f.(string); !isString {
			t.Fatalf("details.field %v", f)
		}
	}
	if _, err := json.Marshal(pe.Error); err != nil {
		t.Fatalf("error does not serialize: %v", err)
	}
}

func FuzzOpenPayload(f *testing.F) {
	f.Fuzz(func(t *testing.T, payload []byte, v2 bool) {
		version := Version{Major: 1, Raw: "1.0"}
		if v2 {
			version = Version{Major: 2, Minor: 7, Raw: "2.7"}
		}
		var p OpenPayload
		if e := DecodePayload(&Command{Version: version, Operation: OpOpen, Payload: payload}, &p); e != nil {
			if e.Code != CodeInvalidField {
				t.Fatalf("DecodePayload refused with %s", e.Code)
			}
			return
		}
		pol, e := p.Validate(version)
		if e != nil {
			if e.Code != CodeInvalidField && e.Code != CodeUnsupportedResource &&
				!(e.Code == CodeInvalidToolDescriptor && version.V2()) {
				t.Fatalf("Validate refused with %s under %s", e.Code, version.Raw)
			}
			if f, _ := e.Details["field"].(string); len(f) < len("payload.") || f[:len("payload.")] != "payload." {
				t.Fatalf("refusal names field %q", f)
			}
			return
		}

		checkPathProp := func(name, p string) {
			if p == "" || !utf8.ValidString(p) || utf8.RuneCountInString(p) > MaxPathLen || !filepath.IsAbs(p) || filepath.Clean(p) != p {
				t.Fatalf("accepted %s %q", name, p)
			}
			for _, r := range p {
				if unicode.IsControl(r) {
					t.Fatalf("accepted %s %q with a control character", name, p)
				}
			}
		}
		checkPathProp("cwd", pol.Cwd)
		if pol.AgentDir != "" {
			checkPathProp("agentDir", pol.AgentDir)
		}
		if pol.Name != "" && !isIdentifier(pol.Name, MaxNameLen) {
			t.Fatalf("accepted name %q", pol.Name)
		}
		switch pol.Mode {
		case ModeOpen:
			checkPathProp("path", pol.Path)
		case ModeNew, ModeContinue, ModeMemory:
			if pol.Path != "" {
				t.Fatalf("mode %s keeps path %q", pol.Mode, pol.Path)
			}
		default:
			t.Fatalf("accepted mode %q", pol.Mode)
		}
		if pol.SessionDir != "" {
			if !v2 {
				t.Fatalf("v1 policy keeps sessionDir %q", pol.SessionDir)
			}
			checkPathProp("sessionDir", pol.SessionDir)
		}
		if m := pol.Model; m != nil {
			if !isIdentifier(m.Provider, MaxProviderLen) || !isIdentifier(m.ID, MaxModelIDLen) {
				t.Fatalf("accepted model %+v", m)
			}
			if m.ThinkingLevel != "" && !slices.Contains([]string{"off", "minimal", "low", "medium", "high", "xhigh", "max"}, m.ThinkingLevel) {
				t.Fatalf("accepted thinkingLevel %q", m.ThinkingLevel)
			}
		}
		switch {
		case pol.Tools == ResourceNone && p.ToolDescriptor() == nil && p.ManagedOperations() == nil:
		case pol.Tools == ToolsHostAdapter && v2 && len(p.ToolDescriptor()) > 0 && p.ToolDescriptor()[0] == '{' && p.ManagedOperations() == nil:
		case pol.Tools == ToolsHostAdapter && v2 && p.ToolDescriptor() == nil && len(p.ManagedOperations()) > 0:
			for i, op := range p.ManagedOperations() {
				if !isIdentifier(op, MaxNameLen) || slices.Contains(p.ManagedOperations()[:i], op) {
					t.Fatalf("accepted operations %q", p.ManagedOperations())
				}
			}
		default:
			t.Fatalf("tools %q under %s with descriptor %q", pol.Tools, version.Raw, p.ToolDescriptor())
		}
		if pol.Lifetime != "" && (!v2 || pol.Lifetime != LifetimeConnection || pol.Mode != ModeMemory) {
			t.Fatalf("accepted lifetime %q of a %s session under %s", pol.Lifetime, pol.Mode, version.Raw)
		}
		if utf8.RuneCountInString(pol.SystemPrompt) > MaxSystemPromptLen {
			t.Fatalf("accepted systemPrompt of %d bytes under %s", len(pol.SystemPrompt), version.Raw)
		}
		var resources []json.RawMessage
		if r := p.Resources; r != nil { // absent resources are all "none"
			resources = []json.RawMessage{r.Extensions, r.Skills, r.PromptTemplates, r.Themes, r.ContextFiles}
			if pol.Tools == ResourceNone {
				resources = append(resources, r.Tools)
			}
		}
		for _, raw := range resources {
			var s string
			if json.Unmarshal(raw, &s) != nil || s != ResourceNone {
				t.Fatalf("accepted resource %s", raw)
			}
		}

		// The payload, written back out, is the same open: same policy, same digest.
		again, err := json.Marshal(&p)
		if err != nil {
			t.Fatal(err)
		}
		var p2 OpenPayload
		if e := DecodePayload(&Command{Version: version, Payload: again}, &p2); e != nil {
			t.Fatalf("re-encoded payload %s refused: %v", again, e)
		}
		pol2, e := p2.Validate(version)
		if e != nil || !samePolicy(pol, pol2) || pol2.Digest() != pol.Digest() {
			t.Fatalf("re-encoded payload gives %+v, %v; want %+v", pol2, e, pol)
		}
	})
}

func samePolicy(a, b *Policy) bool {
	return reflect.DeepEqual(a, b)
}

// FuzzDecodeCapabilityPayload: DecodeCapabilityPayload, with its shortcut for the exact form
// clients write, answers every payload as the strict decoder and Validate do: the same id, or
// an error with the same code.
func FuzzDecodeCapabilityPayload(f *testing.F) {
	f.Fuzz(func(t *testing.T, payload []byte) {
		if problem := capabilityPayloadDiffers(payload); problem != "" {
			t.Fatal(problem)
		}
	})
}

// FuzzRawSafeInt: rawSafeInt accepts exactly the JSON numbers whose exact value is an integer
// in [0, MaxSafeInteger], and returns that value. The exact value is computed with math/big,
// for literals whose exponent is small enough to compute.
func FuzzRawSafeInt(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, ok := rawSafeInt(raw)
		// The decoder hands over a member's value without the whitespace around it.
		if !json.Valid(raw) || len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) ||
			strings.TrimSpace(string(raw)) != string(raw) {
			if ok {
				t.Fatalf("accepted %q, which is not a bare JSON number", raw)
			}
			return
		}
		mant, exp, _ := strings.Cut(strings.ToLower(string(raw)), "e")
		if len(strings.TrimLeft(exp, "+-")) > 4 {
			return // an exponent too large to compute exactly here
		}
		r, good := new(big.Rat).SetString(mant)
		if !good {
			t.Fatalf("math/big cannot read %q", mant)
		}
		if exp != "" {
			e, err := strconv.Atoi(exp)
			if err != nil {
				t.Fatalf("exponent %q", exp)
			}
			p := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(e, -e))), nil))
			if e < 0 {
				p.Inv(p)
			}
			r.Mul(r, p)
		}
		want := r.IsInt() && r.Sign() >= 0 && r.Num().Cmp(big.NewInt(MaxSafeInteger)) <= 0
		if ok != want || (ok && r.Num().Int64() != n) {
			t.Fatalf("rawSafeInt(%s) = %d, %v; exact value %s", raw, n, ok, r.RatString())
		}
	})
}

// FuzzRegisterAdapterPayload: a registerAdapter payload that decodes and validates keeps the
// tie rules (a room or a session, never both; a generation exactly with a session), a bounded
// lease and a room of the room grammar; one that fails names a payload member.
func FuzzRegisterAdapterPayload(f *testing.F) {
	f.Fuzz(func(t *testing.T, payload []byte) {
		cmd := &Command{Operation: OpRegisterAdapter, Payload: payload}
		var p RegisterAdapterPayload
		e := DecodePayload(cmd, &p)
		if e == nil {
			e = p.Validate()
		}
		if e != nil {
			return
		}
		switch {
		case p.Room != "" && p.SessionID != "":
			t.Fatalf("both ties accepted: %+v", p)
		case (p.SessionID != "") != (p.Generation > 0), p.Generation < 0:
			t.Fatalf("generation %d with session %q accepted", p.Generation, p.SessionID)
		case p.LeaseSeconds < 0 || p.LeaseSeconds > MaxAdapterLeaseSeconds:
			t.Fatalf("lease %d accepted", p.LeaseSeconds)
		case p.Room != "" && !roomIDPattern.MatchString(p.Room):
			t.Fatalf("room %q accepted", p.Room)
		}
	})
}
