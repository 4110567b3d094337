package capadapter

import (
	"encoding/json"
	"testing"
)

func TestParseDescriptorScreensDecodedText(t *testing.T) {
	desc := func(id, title string) string {
		return `{"capabilityId":` + id + `,"title":` + title + `,"version":"1","observe":true,"actions":[]}`
	}
	action := func(name, title, prop string) string {
		return `{"capabilityId":"x","title":"X","version":"1","observe":true,"actions":[{"name":` + name +
			`,"title":` + title + `,"input":{"type":"object","properties":{` + prop + `:"string"}}}]}`
	}
	refused := []struct{ name, data string }{
		{"escaped colon in id", desc(`"my.url\u003a1"`, `"X"`)},
		{"escaped colon in title", desc(`"x"`, `"Token\u003a x"`)},
		{"escaped equals in title", desc(`"x"`, `"PassWord\u003d hunter2"`)},
		{"escaped letter before colon", desc(`"x"`, `"\u0074oken: x"`)},
		{"escaped slashes in title", desc(`"x"`, `"see https:\/\/evil.example"`)},
		{"mixed-case escaped URL", desc(`"x"`, `"HtTpS:\u002F\u002Fevil"`)},
		{"escaped quote before colon", desc(`"x"`, `"a token\": b"`)},
		{"surrogate pair then URL", desc(`"x"`, `"\ud83d\ude00 http:\/\/x"`)},
		{"long s folds to s", desc(`"x"`, `"\u017fecret: x"`)},
		{"escaped version", `{"capabilityId":"x","title":"X","version":"secret\u003d1","observe":true,"actions":[]}`},
		{"escaped action title", action(`"set"`, `"Set via http:\/\/x"`, `"level"`)},
		{"escaped sensitive property", action(`"set"`, `"Set"`, `"\u0075rl"`)},
		{"escaped sensitive action", action(`"\u0074oken"`, `"Set"`, `"level"`)},
		{"escaped control char in id", desc(`"ok\u000a"`, `"X"`)},
		{"escaped upper case id", desc(`"\u004fk"`, `"X"`)},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			if !json.Valid([]byte(tc.data)) {
				t.Fatalf("test descriptor is not JSON: %s", tc.data)
			}
			if _, _, err := ParseDescriptor([]byte(tc.data)); CodeOf(err) != CodeInvalidDescriptor {
				t.Fatalf("ParseDescriptor = %v, want invalid_descriptor", err)
			}
		})
	}
	// Escapes of harmless text decode to a valid descriptor, whose canonical form is the
	// decoded text.
	d, canon, err := ParseDescriptor([]byte(desc(`"living\u005froom"`, `"Caf\u00e9 \ud83d\ude00 light"`)))
	if err != nil || d.CapabilityID != "living_room" || d.Title != "Café 😀 light" {
		t.Fatalf("ParseDescriptor = %+v, %s, %v", d, canon, err)
	}
}

func TestValidateDescriptorScreensText(t *testing.T) {
	for _, mut := range []func(*Descriptor){
		func(d *Descriptor) { d.CapabilityID = "my.url:1" },
		func(d *Descriptor) { d.Title = "Token: x" },
		func(d *Descriptor) { d.Version = "password=1" },
		func(d *Descriptor) { d.Actions[0].Title = "Secret = x" },
	} {
		d := validDescriptor()
		mut(&d)
		if err := ValidateDescriptor(d); CodeOf(err) != CodeInvalidDescriptor {
			t.Errorf("ValidateDescriptor(%+v) = %v, want invalid_descriptor", d, err)
		}
	}
}

func TestCheckResultScreensDecodedText(t *testing.T) {
	for _, r := range []string{
		`{"note":"https:\/\/evil.example/x"}`,
		`["password\u003d hunter2"]`,
		`{"a":{"b":"\u0053ECRET= x"}}`,
		`{"note":"HTTP:\u002f\u002fx"}`,
		`{"note":"\ud83d\ude00https:\/\/x"}`,
		`{"note":"a token\": b"}`,
		`{"https:\/\/x":1}`,
		`{"\u0074oken":1}`,
		`"\u017fecret: x"`,
	} {
		if err := checkResult(json.RawMessage(r)); CodeOf(err) != CodeResultWithheld {
			t.Errorf("checkResult(%s) = %v, want result_withheld", r, err)
		}
		if got := referenceCheckResult([]byte(r)); got != CodeResultWithheld {
			t.Errorf("referenceCheckResult(%s) = %q", r, got)
		}
	}
	for _, r := range []string{
		`{"note":"https\u003a no slashes"}`,
		`{"mood":"\ud83d\ude00"}`,
		`{"state":"path: \/dev"}`,
		`{"caf\u00e9":"ok"}`,
	} {
		if err := checkResult(json.RawMessage(r)); err != nil {
			t.Errorf("checkResult(%s) = %v, want ok", r, err)
		}
	}
}

func TestValidateArgsScreensDecodedText(t *testing.T) {
	in := Input{Type: "object", Properties: map[string]string{"label": "string"}}
	for _, a := range []string{
		`{"label":"https:\/\/evil.example/x"}`,
		`{"label":"HTTP:\u002f\u002fx"}`,
		`{"label":"\u0068ttps://x"}`,
		`{"label":"\ud83d\ude00 hTtP:\/\/x"}`,
		`{"l\u0061bel":"https:\/\/x"}`,
	} {
		if err := ValidateArgs(in, json.RawMessage(a)); CodeOf(err) != CodeInvalidArgs {
			t.Errorf("ValidateArgs(%s) = %v, want invalid_args", a, err)
		}
	}
	for _, a := range []string{`{"label":"\ud83d\ude00 ok"}`, `{"label":"a\/b"}`, `{"l\u0061bel":"x"}`} {
		if err := ValidateArgs(in, json.RawMessage(a)); err != nil {
			t.Errorf("ValidateArgs(%s) = %v, want ok", a, err)
		}
	}
}
