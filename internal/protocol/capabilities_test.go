package protocol

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// decodeValidate decodes payload into v strictly, then runs its Validate.
func decodeValidate(t *testing.T, payload string, v interface{ Validate() *Error }) *Error {
	t.Helper()
	cmd := &Command{Version: Version{Major: 2, Raw: "2.0"}, Payload: json.RawMessage(payload)}
	if e := DecodePayload(cmd, v); e != nil {
		t.Fatalf("DecodePayload(%s): %v", payload, e)
	}
	return v.Validate()
}

func wantField(t *testing.T, e *Error, field string) {
	t.Helper()
	if field == "" {
		if e != nil {
			t.Fatalf("refused: %v", e)
		}
		return
	}
	if e == nil || e.Code != CodeInvalidField || e.Details["field"] != field {
		t.Fatalf("got %v, want invalid_field at %s", e, field)
	}
}

func TestCapabilityPayloadValidate(t *testing.T) {
	tests := []struct{ name, payload, field string }{
		{"valid", `{"capabilityId":"living_room_light"}`, ""},
		{"valid punctuation", `{"capabilityId":"0home.light:1-a_b"}`, ""},
		{"64 bytes", `{"capabilityId":"` + strings.Repeat("a", 64) + `"}`, ""},
		{"missing", `{}`, "payload.capabilityId"},
		{"empty", `{"capabilityId":""}`, "payload.capabilityId"},
		{"65 bytes", `{"capabilityId":"` + strings.Repeat("a", 65) + `"}`, "payload.capabilityId"},
		{"control character", `{"capabilityId":"light\u0000"}`, "payload.capabilityId"},
		{"trailing newline", `{"capabilityId":"light\n"}`, "payload.capabilityId"},
		{"upper case", `{"capabilityId":"Light"}`, "payload.capabilityId"},
		{"leading punctuation", `{"capabilityId":".light"}`, "payload.capabilityId"},
		{"space", `{"capabilityId":"living room"}`, "payload.capabilityId"},
		{"non-ASCII", `{"capabilityId":"caf\u00e9"}`, "payload.capabilityId"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantField(t, decodeValidate(t, tt.payload, &CapabilityPayload{}), tt.field)
		})
	}
}

func TestInvokeCapabilityPayloadValidate(t *testing.T) {
	big := `{"label":"` + strings.Repeat("a", MaxCapabilityArgsBytes-12) + `"}`
	if len(big) != MaxCapabilityArgsBytes {
		t.Fatalf("len(big) = %d", len(big))
	}
	tests := []struct{ name, payload, field string }{
		{"valid", `{"capabilityId":"light","action":"set_led","args":{"color":"#123456"}}`, ""},
		{"args absent", `{"capabilityId":"light","action":"flip"}`, ""},
		{"args 1024 bytes", `{"capabilityId":"light","action":"set","args":` + big + `}`, ""},
		{"missing id", `{"action":"set","args":{}}`, "payload.capabilityId"},
		{"empty id", `{"capabilityId":"","action":"set"}`, "payload.capabilityId"},
		{"id control character", `{"capabilityId":"a\u0007","action":"set"}`, "payload.capabilityId"},
		{"id 65 bytes", `{"capabilityId":"` + strings.Repeat("a", 65) + `","action":"set"}`, "payload.capabilityId"},
		{"missing action", `{"capabilityId":"light","args":{}}`, "payload.action"},
		{"empty action", `{"capabilityId":"light","action":""}`, "payload.action"},
		{"action upper case", `{"capabilityId":"light","action":"Set"}`, "payload.action"},
		{"action colon", `{"capabilityId":"light","action":"a:b"}`, "payload.action"},
		{"action 33 bytes", `{"capabilityId":"light","action":"` + strings.Repeat("a", 33) + `"}`, "payload.action"},
		{"action control character", `{"capabilityId":"light","action":"set\t"}`, "payload.action"},
		{"args array", `{"capabilityId":"light","action":"set","args":[]}`, "payload.args"},
		{"args string", `{"capabilityId":"light","action":"set","args":"{}"}`, "payload.args"},
		{"args null", `{"capabilityId":"light","action":"set","args":null}`, "payload.args"},
		{"args 1025 bytes", `{"capabilityId":"light","action":"set","args":` + big[:len(big)-2] + `a"}}`, "payload.args"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantField(t, decodeValidate(t, tt.payload, &InvokeCapabilityPayload{}), tt.field)
		})
	}
	// Validate stands on its own, without DecodePayload's strictness.
	for _, args := range []string{`{"a":1,"a":2}`, `{`, ` [1]`} {
		p := InvokeCapabilityPayload{CapabilityID: "light", Action: "set", Args: json.RawMessage(args)}
		wantField(t, p.Validate(), "payload.args")
	}
	if e := (&InvokeCapabilityPayload{CapabilityID: "light", Action: "set", Args: json.RawMessage(` {"a":1}`)}).Validate(); e != nil {
		t.Fatalf("leading space refused: %v", e)
	}
}

func TestRegisterAdapterPayloadValidate(t *testing.T) {
	args := func(n, size int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = `"` + strings.Repeat("a", size) + `"`
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	tests := []struct{ name, payload, field string }{
		{"valid", `{"name":"lamp","command":"/usr/bin/lamp","args":["--x"]}`, ""},
		{"bare command", `{"name":"lamp-2.a_b","command":"lamp"}`, ""},
		{"16 args of 1023 bytes", `{"name":"lamp","command":"lamp","args":` + args(16, 1023) + `}`, ""},
		{"64-byte name", `{"name":"` + strings.Repeat("a", 64) + `","command":"lamp"}`, ""},
		{"65-byte name", `{"name":"` + strings.Repeat("a", 65) + `","command":"lamp"}`, "payload.name"},
		{"upper-case name", `{"name":"Lamp","command":"lamp"}`, "payload.name"},
		{"name with space", `{"name":"my lamp","command":"lamp"}`, "payload.name"},
		{"non-ASCII name", `{"name":"l\u00e4mp","command":"lamp"}`, "payload.name"},
		{"leading dot name", `{"name":".lamp","command":"lamp"}`, "payload.name"},
		{"empty command", `{"name":"lamp","command":""}`, "payload.command"},
		{"blank command", `{"name":"lamp","command":"  "}`, "payload.command"},
		{"1024-byte command", `{"name":"lamp","command":"/` + strings.Repeat("a", 1023) + `"}`, ""},
		{"1025-byte command", `{"name":"lamp","command":"/` + strings.Repeat("a", 1024) + `"}`, "payload.command"},
		{"NUL in command", `{"name":"lamp","command":"lamp\u0000"}`, "payload.command"},
		{"17 args", `{"name":"lamp","command":"lamp","args":` + args(17, 1) + `}`, "payload.args"},
		{"1025-byte arg", `{"name":"lamp","command":"lamp","args":` + args(1, 1025) + `}`, "payload.args"},
		{"NUL in arg", `{"name":"lamp","command":"lamp","args":["a\u0000"]}`, "payload.args"},
		{"over 16 KiB together", `{"name":"lamp","command":"/` + strings.Repeat("a", 1023) + `","args":` + args(16, 1024) + `}`, "payload.args"},
		{"room and lease", `{"name":"lamp","command":"lamp","room":"kitchen","leaseSeconds":7200}`, ""},
		{"session tie", `{"name":"lamp","command":"lamp","sessionId":"s 1","generation":3}`, ""},
		{"longest lease", `{"name":"lamp","command":"lamp","leaseSeconds":2592000}`, ""},
		{"lease too long", `{"name":"lamp","command":"lamp","leaseSeconds":2592001}`, "payload.leaseSeconds"},
		{"negative lease", `{"name":"lamp","command":"lamp","leaseSeconds":-1}`, "payload.leaseSeconds"},
		{"bad room", `{"name":"lamp","command":"lamp","room":"Kitchen"}`, "payload.room"},
		{"room and session", `{"name":"lamp","command":"lamp","room":"k","sessionId":"s","generation":1}`, "payload.sessionId"},
		{"session without generation", `{"name":"lamp","command":"lamp","sessionId":"s"}`, "payload.generation"},
		{"generation without session", `{"name":"lamp","command":"lamp","generation":1}`, "payload.generation"},
		{"control character in sessionId", `{"name":"lamp","command":"lamp","sessionId":"s\n","generation":1}`, "payload.sessionId"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantField(t, decodeValidate(t, tt.payload, &RegisterAdapterPayload{}), tt.field)
		})
	}
	// Invalid UTF-8 cannot arrive through strict decoding; Validate refuses it anyway.
	wantField(t, (&RegisterAdapterPayload{Name: "lamp", Command: "lamp\xff"}).Validate(), "payload.command")
	wantField(t, (&RegisterAdapterPayload{Name: "lamp", Command: "lamp", Args: []string{"\xff"}}).Validate(), "payload.args")
}

func TestAdapterNamePayloadValidate(t *testing.T) {
	wantField(t, (&AdapterNamePayload{Name: "lamp"}).Validate(), "")
	for _, n := range []string{"", "Lamp", "my lamp", strings.Repeat("a", 65), "-x"} {
		wantField(t, (&AdapterNamePayload{Name: n}).Validate(), "payload.name")
	}
}

// TestGrammarsMatchPatterns: the hand-written grammar checks accept exactly what their
// regular expressions accept, on random strings over the characters at their edges.
func TestGrammarsMatchPatterns(t *testing.T) {
	const alphabet = "az09AZ._:-/ \x00é\x7f`{@["
	r := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		b := make([]byte, r.IntN(70))
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = "abcxyz0189"[r.IntN(10)]
			}
		}
		s := string(b)
		if got, want := capabilityIDGrammar(s), capabilityIDPattern.MatchString(s); got != want {
			t.Fatalf("capability id %q: grammar %v, pattern %v", s, got, want)
		}
		if got, want := actionNameGrammar(s), actionNamePattern.MatchString(s); got != want {
			t.Fatalf("action name %q: grammar %v, pattern %v", s, got, want)
		}
	}
}

// TestDecodeCapabilityPayload: the exact form's shortcut answers as the strict decoder and
// Validate do, and every other form still goes through them.
func TestDecodeCapabilityPayload(t *testing.T) {
	for _, payload := range []string{
		`{"capabilityId":"desk_lamp"}`, `{"capabilityId":"a"}`, `{"capabilityId":""}`, `{"capabilityId":"Desk"}`,
		`{"capabilityId":"a\"}`, `{"capabilityId":"a","x":"}`, `{"capabilityId":"a"} `, ` {"capabilityId":"a"}`,
		`{"capabilityId":"a","capabilityId":"b"}`, `{"capabilityId":"` + strings.Repeat("a", 65) + `"}`,
		`{"capabilityId":"` + strings.Repeat("a", 64) + `"}`, `{"capabilityId":"\u0061"}`, `{"capabilityid":"a"}`,
		`{"capabilityId":1}`, `{}`, `{"capabilityId":"a"}}`, `{"capabilityId":"a:b.c-d_e"}`,
	} {
		if problem := capabilityPayloadDiffers([]byte(payload)); problem != "" {
			t.Error(problem)
		}
	}
}

// capabilityPayloadDiffers says how DecodeCapabilityPayload's answer to payload differs from
// the strict decoder's and Validate's (another id, or another error code), or "" when it does
// not.
func capabilityPayloadDiffers(payload []byte) string {
	cmd := &Command{Version: Version{Major: 2, Raw: "2.0"}, Payload: json.RawMessage(payload)}
	got, gotErr := DecodeCapabilityPayload(cmd)
	var want CapabilityPayload
	wantErr := DecodePayload(cmd, &want)
	if wantErr == nil {
		wantErr = want.Validate()
	}
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Code != wantErr.Code) ||
		(gotErr == nil && got != want) {
		return fmt.Sprintf("%q: got %+v %v, strict path %+v %v", payload, got, gotErr, want, wantErr)
	}
	return ""
}
