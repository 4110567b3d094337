package capadapter

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func validDescriptor() Descriptor {
	return Descriptor{
		CapabilityID: "living_room_light", Title: "Living room light", Version: "1", Observe: true,
		Actions: []Action{{Name: "set_led", Title: "Set color", Input: Input{Type: "object",
			Properties: map[string]string{"color": "string", "level": "number", "on": "boolean"}, Required: []string{"color"}}}},
	}
}

func TestParseDescriptorReference(t *testing.T) {
	ref := `{"capabilityId":"living_room_light","title":"Living room light","version":"1","observe":true,"actions":[{"name":"set_led","title":"Set color","input":{"type":"object","properties":{"color":"string"},"required":["color"]}}]}`
	d, canon, err := ParseDescriptor([]byte(ref))
	if err != nil {
		t.Fatal(err)
	}
	if string(canon) != ref || d.Actions[0].Input.Required[0] != "color" {
		t.Fatalf("canonical = %s", canon)
	}
	cups := `{"capabilityId":"printer_status","title":"Printer status","version":"1","observe":true,"actions":[]}`
	if _, canon, err := ParseDescriptor([]byte(cups)); err != nil || string(canon) != cups {
		t.Fatalf("read-only descriptor: %s, %v", canon, err)
	}
	// Spacing and property order do not change the canonical form; an empty required is dropped.
	spaced := `{ "capabilityId":"x","title":"X","version":"1","observe":false,"actions":[{"name":"a","title":"A","input":{"type":"object","properties":{"b":"string","a":"number"},"required":[]}}] }`
	_, canon, err = ParseDescriptor([]byte(spaced))
	if err != nil || string(canon) != `{"capabilityId":"x","title":"X","version":"1","observe":false,"actions":[{"name":"a","title":"A","input":{"type":"object","properties":{"a":"number","b":"string"}}}]}` {
		t.Fatalf("canonical = %s, %v", canon, err)
	}
}

func TestParseDescriptorRejects(t *testing.T) {
	cases := []struct{ name, json string }{
		{"missing observe", `{"capabilityId":"x","title":"X","version":"1","actions":[]}`},
		{"missing actions", `{"capabilityId":"x","title":"X","version":"1","observe":true}`},
		{"null actions", `{"capabilityId":"x","title":"X","version":"1","observe":true,"actions":null}`},
		{"extra key", `{"capabilityId":"x","title":"X","version":"1","observe":true,"actions":[],"endpointHint":"x"}`},
		{"extra action key", `{"capabilityId":"x","title":"X","version":"1","observe":true,"actions":[{"name":"a","title":"A","description":"d","input":{"type":"object","properties":{}}}]}`},
		{"missing properties", `{"capabilityId":"x","title":"X","version":"1","observe":true,"actions":[{"name":"a","title":"A","input":{"type":"object"}}]}`},
		{"missing input", `{"capabilityId":"x","title":"X","version":"1","observe":true,"actions":[{"name":"a","title":"A"}]}`},
		{"duplicate key", `{"capabilityId":"x","capabilityId":"y","title":"X","version":"1","observe":true,"actions":[]}`},
		{"case variant", `{"CapabilityId":"x","title":"X","version":"1","observe":true,"actions":[]}`},
		{"observe string", `{"capabilityId":"x","title":"X","version":"1","observe":"state","actions":[]}`},
		{"url in title", `{"capabilityId":"x","title":"see http://10.0.0.2","version":"1","observe":true,"actions":[]}`},
		{"sensitive key text", `{"capabilityId":"x","title":"token=abc","version":"1","observe":true,"actions":[]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseDescriptor([]byte(tc.json))
			wantCode(t, err, CodeInvalidDescriptor)
		})
	}
}

func TestValidateDescriptorRules(t *testing.T) {
	props := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m["p"+strings.Repeat("x", i)] = "string"
		}
		return m
	}
	cases := []struct {
		name   string
		mutate func(*Descriptor)
		code   string
	}{
		{"valid", func(*Descriptor) {}, ""},
		{"id uppercase", func(d *Descriptor) { d.CapabilityID = "Light" }, CodeInvalidDescriptor},
		{"id 64", func(d *Descriptor) { d.CapabilityID = strings.Repeat("a", 64) }, ""},
		{"id 65", func(d *Descriptor) { d.CapabilityID = strings.Repeat("a", 65) }, CodeInvalidDescriptor},
		{"id punctuation", func(d *Descriptor) { d.CapabilityID = "a.b:c-d_e" }, ""},
		{"id leading dot", func(d *Descriptor) { d.CapabilityID = ".a" }, CodeInvalidDescriptor},
		{"empty title", func(d *Descriptor) { d.Title = "" }, CodeInvalidDescriptor},
		{"title 64 runes", func(d *Descriptor) { d.Title = strings.Repeat("é", 64) }, ""},
		{"title 65 runes", func(d *Descriptor) { d.Title = strings.Repeat("é", 65) }, CodeInvalidDescriptor},
		{"title untrimmed", func(d *Descriptor) { d.Title = " Light" }, CodeInvalidDescriptor},
		{"title control", func(d *Descriptor) { d.Title = "Li\x7fght" }, CodeInvalidDescriptor},
		{"title url", func(d *Descriptor) { d.Title = "HTTPS://x" }, CodeInvalidDescriptor},
		{"version 33", func(d *Descriptor) { d.Version = strings.Repeat("1", 33) }, CodeInvalidDescriptor},
		{"nil actions", func(d *Descriptor) { d.Actions = nil }, CodeInvalidDescriptor},
		{"five actions", func(d *Descriptor) {
			for i := range 4 {
				a := d.Actions[0]
				a.Name = "a" + strings.Repeat("b", i)
				d.Actions = append(d.Actions, a)
			}
		}, CodeInvalidDescriptor},
		{"duplicate action", func(d *Descriptor) { d.Actions = append(d.Actions, d.Actions[0]) }, CodeInvalidDescriptor},
		{"action name grammar", func(d *Descriptor) { d.Actions[0].Name = "Set" }, CodeInvalidDescriptor},
		{"action name 33", func(d *Descriptor) { d.Actions[0].Name = "a" + strings.Repeat("b", 32) }, CodeInvalidDescriptor},
		{"sensitive action", func(d *Descriptor) { d.Actions[0].Name = "set_path" }, CodeInvalidDescriptor},
		{"action title", func(d *Descriptor) { d.Actions[0].Title = "" }, CodeInvalidDescriptor},
		{"input type", func(d *Descriptor) { d.Actions[0].Input.Type = "array" }, CodeInvalidDescriptor},
		{"nil properties", func(d *Descriptor) { d.Actions[0].Input.Properties = nil; d.Actions[0].Input.Required = nil }, CodeInvalidDescriptor},
		{"16 properties", func(d *Descriptor) { d.Actions[0].Input.Properties = props(16); d.Actions[0].Input.Required = nil }, ""},
		{"17 properties", func(d *Descriptor) { d.Actions[0].Input.Properties = props(17); d.Actions[0].Input.Required = nil }, CodeInvalidDescriptor},
		{"property grammar", func(d *Descriptor) { d.Actions[0].Input.Properties["Color"] = "string" }, CodeInvalidDescriptor},
		{"sensitive property endpoint", func(d *Descriptor) { d.Actions[0].Input.Properties["endpoint"] = "string" }, CodeInvalidDescriptor},
		{"sensitive property accessKey", func(d *Descriptor) { d.Actions[0].Input.Properties["accessKey"] = "string" }, CodeInvalidDescriptor},
		{"object type", func(d *Descriptor) { d.Actions[0].Input.Properties["color"] = "object" }, CodeInvalidDescriptor},
		{"required unknown", func(d *Descriptor) { d.Actions[0].Input.Required = []string{"nope"} }, CodeInvalidDescriptor},
		{"required twice", func(d *Descriptor) { d.Actions[0].Input.Required = []string{"color", "color"} }, CodeInvalidDescriptor},
		{"too large", func(d *Descriptor) {
			for i := range 3 {
				a := Action{Name: "act" + strings.Repeat("x", i), Title: strings.Repeat("T", 64), Input: Input{Type: "object", Properties: props(16)}}
				d.Actions = append(d.Actions, a)
			}
		}, CodeTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := validDescriptor()
			tc.mutate(&d)
			err := ValidateDescriptor(d)
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, tc.code)
		})
	}
}

// TestValidateArgs: what ValidateArgs accepts and refuses, and that a refusal names the
// argument and what it must be (the descriptor's name and type), never what the args carry.
func TestValidateArgs(t *testing.T) {
	in := Input{Type: "object", Properties: map[string]string{"on": "boolean", "level": "number", "label": "string"}, Required: []string{"on"}}
	cases := []struct {
		name, args, code, msg string
	}{
		{"valid", `{"on":true}`, "", ""},
		{"all", `{"on":false,"level":-1.5e2,"label":"kitchen"}`, "", ""},
		{"empty object", `{}`, CodeInvalidArgs, `required argument "on" is missing: it must be true or false`},
		{"null", `null`, CodeInvalidArgs, "args must be one JSON object"},
		{"array", `[]`, CodeInvalidArgs, "args must be one JSON object"},
		{"empty", ``, CodeInvalidArgs, "args must be one JSON object"},
		{"not json", `{"on":`, CodeInvalidArgs, "args must be one JSON object"},
		{"wrong type", `{"on":"yes"}`, CodeInvalidArgs, `argument "on" must be true or false`},
		{"null value", `{"on":null}`, CodeInvalidArgs, `argument "on" must be true or false`},
		{"number as string", `{"on":true,"level":"3"}`, CodeInvalidArgs, `argument "level" must be a number`},
		{"object value", `{"on":true,"label":{}}`, CodeInvalidArgs, `argument "label" must be a string`},
		{"huge number", `{"on":true,"level":1e400}`, CodeInvalidArgs, `argument "level" must be a number`},
		{"two wrong, first by name", `{"on":1,"level":"x"}`, CodeInvalidArgs, `argument "level" must be a number`},
		{"extra key", `{"on":true,"extra_kitchen":1}`, CodeInvalidArgs,
			`an argument is not declared by the action, which takes "label" (a string), "level" (a number), "on" (true or false, required)`},
		{"duplicate key", `{"on":true,"on":false}`, CodeInvalidArgs, "without duplicate keys"},
		{"url", `{"on":true,"label":"https://127.0.0.1"}`, CodeInvalidArgs, `argument "label" must not carry a URL`},
		{"oversized", `{"on":true,"label":"` + strings.Repeat("a", MaxArgsBytes) + `"}`, CodeTooLarge, "args exceed 1024 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateArgs(in, json.RawMessage(tc.args))
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, tc.code)
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
			if strings.Contains(err.Error(), "kitchen") || strings.Contains(err.Error(), "127.0.0.1") {
				t.Errorf("error quotes the args: %v", err)
			}
		})
	}
	if err := ValidateArgs(Input{Type: "object", Properties: map[string]string{}}, json.RawMessage(`{"x":1}`)); err == nil ||
		!strings.HasSuffix(err.Error(), "which takes no arguments") {
		t.Errorf("an action without arguments: %v", err)
	}
}

func TestCheckResult(t *testing.T) {
	nest := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	many := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = "1"
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	cases := []struct{ name, result, code, screen string }{
		{"object", `{"state":"idle","acceptingJobs":true}`, "", ""},
		{"scalar", `42`, "", ""},
		{"null", `null`, "", ""},
		{"depth 4", nest(4), "", ""},
		{"depth 5", nest(5), CodeResultWithheld, ScreenShape},
		{"32 entries", many(32), "", ""},
		{"33 entries", many(33), CodeResultWithheld, ScreenShape},
		{"url", `{"note":"http://x"}`, CodeResultWithheld, ScreenURL},
		{"url key", `{"see https://x":1}`, CodeResultWithheld, ScreenURL},
		{"password value", `{"notices":["wifi password: hunter2"]}`, CodeResultWithheld, ScreenSensitiveText},
		{"token key value", `{"token=":1}`, CodeResultWithheld, ScreenSensitiveText},
		{"credential key", `{"nested":{"credential":"x"}}`, CodeResultWithheld, ScreenSensitiveKey},
		{"path key", `{"path":"/dev/ttyUSB0"}`, CodeResultWithheld, ScreenSensitiveKey},
		{"long key", `{"` + strings.Repeat("k", 65) + `":1}`, CodeResultWithheld, ScreenShape},
		{"huge number", `1e999`, CodeResultWithheld, ScreenShape},
		{"first in document order", `[1e999,"http://x"]`, CodeResultWithheld, ScreenShape},
		{"duplicate key", `{"a":1,"a":2}`, CodeMalformedResponse, ""},
		{"not JSON", `{"a":`, CodeMalformedResponse, ""},
		{"too large", `"` + strings.Repeat("a", MaxResultBytes) + `"`, CodeTooLarge, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkResult(json.RawMessage(tc.result))
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, tc.code)
			var e *Error
			if !errors.As(err, &e) || e.Screen != tc.screen {
				t.Fatalf("screen of %v = %q, want %q", err, e.Screen, tc.screen)
			}
			// The error names the screen and never quotes the result.
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "://") ||
				(tc.screen != "" && !strings.Contains(err.Error(), "the runtime's "+tc.screen+" screen")) {
				t.Fatalf("error text %q", err.Error())
			}
		})
	}
}

func TestScreensAgreeWithRegexps(t *testing.T) {
	for _, s := range []string{
		`{"Token" : 1}`, `"url"=x`, `HTTP://x`, `hTTps://`, `path: /x`, `method=GET`, `"endpoint"` + "\t\n:", `endpoint` + "\v:",
		`secretary`, `tokens:`, "\u017fecret: x", "\u212aey", `accessKey=1`, `ACCESSKEY`, `urn:x`, `curl`, `hostnames=`, ``,
	} {
		if unsafePayload([]byte(s)) != unsafePayloadPattern.MatchString(s) {
			t.Errorf("unsafePayload(%q) = %v, regexp says %v", s, unsafePayload([]byte(s)), !unsafePayload([]byte(s)))
		}
		if sensitiveName(s) != sensitiveNamePattern.MatchString(s) {
			t.Errorf("sensitiveName(%q) disagrees with its regexp", s)
		}
	}
}

func TestCheckResultMatchesReference(t *testing.T) {
	for _, r := range []string{
		`{"a":[1,2,{"b":true}],"c":null,"d":"x"}`, `{"a\u0074h":1}`, `{"p\u0061th":1}`, `[[[[1]]]]`, `[[[[[1]]]]]`,
		`{"k":1e308}`, `{"k":-1e309}`, ` [ 1 , 2 ] `, `{"Secret":1}`, `{"\u017fecret":1}`, `"s"`, `-0.0e-0`,
	} {
		if got, want := CodeOf(checkResult(json.RawMessage(r))), referenceCheckResult([]byte(r)); got != want {
			t.Errorf("checkResult(%s) = %q, reference %q", r, got, want)
		}
	}
}
