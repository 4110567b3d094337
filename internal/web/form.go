package web

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"

	"github.com/airlockhq/airlock/internal/visible"
)

// Form bounds: an input the page would render as more than this is shown as a raw JSON field.
const (
	// MaxFormFields bounds the fields of one generated form (descriptors allow 16 properties).
	MaxFormFields = 32
	// MaxEnumValues bounds the options of one enum field.
	MaxEnumValues = 64
	// MaxSchemaBytes bounds a schema the page turns into a form.
	MaxSchemaBytes = 16 << 10
)

// Field kinds of a generated form.
const (
	KindString  = "string"
	KindNumber  = "number"
	KindInteger = "integer"
	KindBoolean = "boolean"
	KindEnum    = "enum" // a choice among string values
)

// Form is the page's form for one action's args. Raw means the schema is not one the page can
// render field by field: the page shows a JSON textarea for the whole args object instead.
type Form struct {
	Raw    bool    `json:"raw"`
	Fields []Field `json:"fields,omitempty"`
}

// Field is one input of a generated form; its value becomes args[Name].
type Field struct {
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	Title       string   `json:"title,omitempty"`
	Description string   `json:"description,omitempty"`
	Required    bool     `json:"required"`
	Enum        []string `json:"enum,omitempty"`
	Minimum     *float64 `json:"minimum,omitempty"`
	Maximum     *float64 `json:"maximum,omitempty"`
	MinLength   *int     `json:"minLength,omitempty"`
	MaxLength   *int     `json:"maxLength,omitempty"`
}

var rawForm = Form{Raw: true}

// topKeywords and fieldKeywords are the schema keywords FormOf understands. Any other keyword
// could constrain the value in a way a form would not enforce or show (pattern, oneOf, $ref …),
// so a schema using one is shown raw and the backend stays the judge of the args.
var (
	topKeywords   = []string{"type", "properties", "required", "additionalProperties", "title", "description", "$schema"}
	fieldKeywords = []string{"type", "title", "description", "enum", "minimum", "maximum", "minLength", "maxLength", "default"}
)

// FormOf returns the form for an action's input schema: an object schema whose properties are
// each a string, number, integer, boolean or string enum (with required, minimum, maximum,
// minLength and maxLength), or the descriptor shorthand in which a property's schema is just
// its type name. Anything else (or nothing) gives a raw form, and so does a property name or
// enum value holding a visible.Hidden character, which the page shows escaped and so could not
// send back as it is. Fields are sorted by name.
func FormOf(schema json.RawMessage) Form {
	schema = bytes.TrimSpace(schema)
	if len(schema) == 0 || len(schema) > MaxSchemaBytes {
		return rawForm
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(schema, &top); err != nil || top == nil {
		return rawForm
	}
	for k := range top {
		if !slices.Contains(topKeywords, k) {
			return rawForm
		}
	}
	var typ string
	if json.Unmarshal(top["type"], &typ) != nil || typ != "object" {
		return rawForm
	}
	if ap, ok := top["additionalProperties"]; ok {
		var b bool
		if json.Unmarshal(ap, &b) != nil {
			return rawForm
		}
	}
	var props map[string]json.RawMessage
	if json.Unmarshal(top["properties"], &props) != nil || props == nil || len(props) > MaxFormFields {
		return rawForm
	}
	var required []string
	if r, ok := top["required"]; ok {
		if json.Unmarshal(r, &required) != nil {
			return rawForm
		}
	}
	for _, r := range required {
		if _, ok := props[r]; !ok {
			return rawForm
		}
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	form := Form{Fields: make([]Field, 0, len(names))}
	for _, name := range names {
		if name == "" || len(name) > 64 || visible.Contains(name) {
			return rawForm
		}
		f, ok := fieldOf(name, props[name])
		if !ok {
			return rawForm
		}
		f.Required = slices.Contains(required, name)
		form.Fields = append(form.Fields, f)
	}
	return form
}

// fieldOf reads one property's schema.
func fieldOf(name string, raw json.RawMessage) (Field, bool) {
	f := Field{Name: name}
	var short string
	if json.Unmarshal(raw, &short) == nil {
		switch short {
		case KindString, KindNumber, KindInteger, KindBoolean:
			f.Kind = short
			return f, true
		}
		return f, false
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(raw, &p) != nil || p == nil {
		return f, false
	}
	for k := range p {
		if !slices.Contains(fieldKeywords, k) {
			return f, false
		}
	}
	if t, ok := p["title"]; ok && json.Unmarshal(t, &f.Title) != nil {
		return f, false
	}
	if d, ok := p["description"]; ok && json.Unmarshal(d, &f.Description) != nil {
		return f, false
	}
	var typ string
	if t, ok := p["type"]; ok && json.Unmarshal(t, &typ) != nil {
		return f, false
	}
	if e, ok := p["enum"]; ok {
		if typ != "" && typ != KindString {
			return f, false
		}
		if json.Unmarshal(e, &f.Enum) != nil || len(f.Enum) == 0 || len(f.Enum) > MaxEnumValues {
			return f, false
		}
		for i, v := range f.Enum {
			// A value the page would show escaped (pageJSON) could not be sent back as it is.
			if slices.Contains(f.Enum[:i], v) || visible.Contains(v) {
				return f, false
			}
		}
		f.Kind = KindEnum
		// Length and range keywords next to an enum are redundant at best; refuse them
		// rather than show a choice the backend would reject.
		return f, !hasAny(p, "minimum", "maximum", "minLength", "maxLength")
	}
	switch typ {
	case KindString:
		f.Kind = KindString
		if hasAny(p, "minimum", "maximum") {
			return f, false
		}
		var ok bool
		if f.MinLength, ok = length(p, "minLength"); !ok {
			return f, false
		}
		if f.MaxLength, ok = length(p, "maxLength"); !ok {
			return f, false
		}
		if f.MinLength != nil && f.MaxLength != nil && *f.MinLength > *f.MaxLength {
			return f, false
		}
	case KindNumber, KindInteger:
		f.Kind = typ
		if hasAny(p, "minLength", "maxLength") {
			return f, false
		}
		var ok bool
		if f.Minimum, ok = bound(p, "minimum"); !ok {
			return f, false
		}
		if f.Maximum, ok = bound(p, "maximum"); !ok {
			return f, false
		}
		if f.Minimum != nil && f.Maximum != nil && *f.Minimum > *f.Maximum {
			return f, false
		}
	case KindBoolean:
		f.Kind = KindBoolean
		if hasAny(p, "minimum", "maximum", "minLength", "maxLength") {
			return f, false
		}
	default:
		return f, false
	}
	return f, true
}

func hasAny(p map[string]json.RawMessage, keys ...string) bool {
	for _, k := range keys {
		if _, ok := p[k]; ok {
			return true
		}
	}
	return false
}

// length reads an optional non-negative integer keyword.
func length(p map[string]json.RawMessage, key string) (*int, bool) {
	raw, ok := p[key]
	if !ok {
		return nil, true
	}
	var n float64
	if json.Unmarshal(raw, &n) != nil || n < 0 || n != math.Trunc(n) || n > 1<<20 {
		return nil, false
	}
	v := int(n)
	return &v, true
}

// bound reads an optional finite number keyword.
func bound(p map[string]json.RawMessage, key string) (*float64, bool) {
	raw, ok := p[key]
	if !ok {
		return nil, true
	}
	var n float64
	if json.Unmarshal(raw, &n) != nil || math.IsInf(n, 0) || math.IsNaN(n) {
		return nil, false
	}
	return &n, true
}
