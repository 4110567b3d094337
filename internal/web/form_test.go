package web

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/visible"
)

func ptr[T any](v T) *T { return &v }

func TestFormOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema string
		want   Form
	}{
		{"enum", lightSchema, Form{Fields: []Field{{Name: "color", Kind: KindEnum, Title: "Colour", Required: true, Enum: []string{"red", "green", "blue"}}}}},
		{"descriptor shorthand", `{"type":"object","properties":{"color":"string","level":"number","on":"boolean"},"required":["color"]}`,
			Form{Fields: []Field{{Name: "color", Kind: KindString, Required: true}, {Name: "level", Kind: KindNumber}, {Name: "on", Kind: KindBoolean}}}},
		{"bounds", `{"type":"object","properties":{
			"name":{"type":"string","minLength":1,"maxLength":20,"description":"who"},
			"count":{"type":"integer","minimum":0,"maximum":10},
			"ratio":{"type":"number","minimum":-1.5},
			"loud":{"type":"boolean","default":false}},"required":["name","count"]}`,
			Form{Fields: []Field{
				{Name: "count", Kind: KindInteger, Required: true, Minimum: ptr(0.0), Maximum: ptr(10.0)},
				{Name: "loud", Kind: KindBoolean},
				{Name: "name", Kind: KindString, Description: "who", Required: true, MinLength: ptr(1), MaxLength: ptr(20)},
				{Name: "ratio", Kind: KindNumber, Minimum: ptr(-1.5)},
			}}},
		{"no properties", `{"type":"object","properties":{}}`, Form{Fields: []Field{}}},
		{"empty", ``, rawForm},
		{"not json", `{`, rawForm},
		{"not an object", `[1]`, rawForm},
		{"not type object", `{"type":"string"}`, rawForm},
		{"no properties member", `{"type":"object"}`, rawForm},
		{"pattern", `{"type":"object","properties":{"t":{"type":"string","pattern":"^a"}}}`, rawForm},
		{"oneOf", `{"type":"object","oneOf":[],"properties":{}}`, rawForm},
		{"nested object", `{"type":"object","properties":{"o":{"type":"object"}}}`, rawForm},
		{"array", `{"type":"object","properties":{"a":{"type":"array"}}}`, rawForm},
		{"type list", `{"type":"object","properties":{"a":{"type":["string","null"]}}}`, rawForm},
		{"number enum", `{"type":"object","properties":{"a":{"type":"number","enum":[1,2]}}}`, rawForm},
		{"empty enum", `{"type":"object","properties":{"a":{"enum":[]}}}`, rawForm},
		{"duplicate enum", `{"type":"object","properties":{"a":{"enum":["x","x"]}}}`, rawForm},
		{"enum with bounds", `{"type":"object","properties":{"a":{"enum":["x"],"maxLength":3}}}`, rawForm},
		{"required unknown", `{"type":"object","properties":{"a":"string"},"required":["b"]}`, rawForm},
		{"unknown shorthand", `{"type":"object","properties":{"a":"date"}}`, rawForm},
		{"min over max", `{"type":"object","properties":{"a":{"type":"integer","minimum":3,"maximum":1}}}`, rawForm},
		{"negative length", `{"type":"object","properties":{"a":{"type":"string","maxLength":-1}}}`, rawForm},
		{"fractional length", `{"type":"object","properties":{"a":{"type":"string","maxLength":1.5}}}`, rawForm},
		{"length on number", `{"type":"object","properties":{"a":{"type":"number","maxLength":1}}}`, rawForm},
		{"range on string", `{"type":"object","properties":{"a":{"type":"string","maximum":1}}}`, rawForm},
		{"control in name", `{"type":"object","properties":{"a\u0000":"string"}}`, rawForm},
		{"bidi override in name", `{"type":"object","properties":{"a\u202e":"string"}}`, rawForm},
		{"zero width in enum value", `{"type":"object","properties":{"a":{"enum":["x","x\u200b"]}}}`, rawForm},
		{"additionalProperties schema", `{"type":"object","properties":{},"additionalProperties":{}}`, rawForm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormOf(json.RawMessage(tc.schema)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("FormOf(%s)\n got %+v\nwant %+v", tc.schema, got, tc.want)
			}
		})
	}
}

// FuzzFormOf checks FormOf's promises on any input: it does not panic, it is deterministic,
// a non-raw form's fields are sorted, unique, of a known kind, with constraints that fit the
// kind, every field names a property of the schema, and no field name or enum value holds a
// character the page would show escaped (so could not send back).
func FuzzFormOf(f *testing.F) {
	for _, s := range []string{lightSchema, `{"type":"object","properties":{"a":"string"}}`, `{}`, `null`,
		`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":2}},"required":["n"]}`} {
		f.Add([]byte(s))
	}
	kinds := []string{KindString, KindNumber, KindInteger, KindBoolean, KindEnum}
	f.Fuzz(func(t *testing.T, schema []byte) {
		form := FormOf(schema)
		if again := FormOf(schema); !reflect.DeepEqual(form, again) {
			t.Fatalf("FormOf is not deterministic: %+v then %+v", form, again)
		}
		if form.Raw {
			if len(form.Fields) != 0 {
				t.Fatalf("raw form with fields: %+v", form)
			}
			return
		}
		var top struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(schema, &top); err != nil {
			t.Fatalf("a form from an undecodable schema: %v", err)
		}
		if len(form.Fields) > MaxFormFields {
			t.Fatalf("%d fields", len(form.Fields))
		}
		for i, fl := range form.Fields {
			if i > 0 && form.Fields[i-1].Name >= fl.Name {
				t.Fatalf("fields not sorted and unique: %+v", form.Fields)
			}
			if _, ok := top.Properties[fl.Name]; !ok {
				t.Fatalf("field %q is no property", fl.Name)
			}
			if visible.Contains(fl.Name) || slices.ContainsFunc(fl.Enum, visible.Contains) {
				t.Fatalf("field %q or its values %q hold a character the page shows escaped", fl.Name, fl.Enum)
			}
			if !slices.Contains(kinds, fl.Kind) {
				t.Fatalf("field kind %q", fl.Kind)
			}
			if (fl.Kind == KindEnum) != (len(fl.Enum) > 0) {
				t.Fatalf("enum values on kind %q: %v", fl.Kind, fl.Enum)
			}
			if (fl.Minimum != nil || fl.Maximum != nil) && fl.Kind != KindNumber && fl.Kind != KindInteger {
				t.Fatalf("range on kind %q", fl.Kind)
			}
			if (fl.MinLength != nil || fl.MaxLength != nil) && fl.Kind != KindString {
				t.Fatalf("length on kind %q", fl.Kind)
			}
		}
	})
}
