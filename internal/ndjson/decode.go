package ndjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
)

// Reasons a DecodeError gives.
const (
	ReasonSyntax       = "syntax"        // not one well-formed JSON value
	ReasonDuplicateKey = "duplicate_key" // an object names the same key twice
	ReasonCaseVariant  = "case_variant"  // a key differs only in case from a known field
	ReasonUnknownField = "unknown_field" // a key the target does not have, in a closed object
	ReasonType         = "type"          // a value of the wrong JSON type, including null
)

// DecodeError reports why a JSON value was refused. Path names the offending member in
// dotted form ("payload.session.mode", "items[2]"); it never contains a value.
type DecodeError struct {
	Reason string
	Path   string
	Detail string
}

func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString("json: ")
	switch e.Reason {
	case ReasonSyntax:
		b.WriteString("malformed JSON")
	case ReasonDuplicateKey:
		b.WriteString("duplicate key")
	case ReasonCaseVariant:
		b.WriteString("key differs only in case from a known field")
	case ReasonUnknownField:
		b.WriteString("unknown field")
	case ReasonType:
		b.WriteString("wrong type")
	default:
		b.WriteString(e.Reason)
	}
	if e.Path != "" {
		b.WriteString(" at ")
		b.WriteString(e.Path)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Mode selects how Decode treats keys that the target type does not declare.
type Mode int

const (
	// Closed rejects unknown keys in every struct of the target.
	Closed Mode = iota
	// Open tolerates unknown keys (they are still checked for duplicates), for envelopes that
	// must accept fields from newer minor versions.
	Open
)

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// Decode parses one JSON value from data into v, strictly: duplicate keys anywhere, keys that
// differ only in case from a field of the target, null in place of a typed value and (in Closed
// mode) unknown keys are all refused with a *DecodeError. Members of type json.RawMessage or
// interface types are only checked for duplicate keys; decode them with Decode in turn.
func Decode(data []byte, v any, mode Mode) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("ndjson: Decode needs a non-nil pointer, got %T", v)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	w := walker{dec: dec, mode: mode}
	if err := w.value(rv.Type().Elem(), ""); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &DecodeError{Reason: ReasonSyntax, Detail: "trailing data after the JSON value"}
	}
	if err := json.Unmarshal(data, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &DecodeError{Reason: ReasonType, Path: te.Field, Detail: "expected " + te.Type.String()}
		}
		return &DecodeError{Reason: ReasonType, Detail: err.Error()}
	}
	return nil
}

// Valid reports whether data is one well-formed JSON value with no duplicate keys.
func Valid(data []byte) error {
	var raw json.RawMessage
	return Decode(data, &raw, Open)
}

type walker struct {
	dec  *json.Decoder
	mode Mode
}

func (w *walker) token() (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, &DecodeError{Reason: ReasonSyntax}
	}
	return tok, nil
}

// value walks one JSON value against type t. A nil t means "any": only duplicates are checked.
func (w *walker) value(t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t == rawMessageType || t.Kind() == reflect.Interface ||
		reflect.PointerTo(t).Implements(unmarshalerType)) {
		t = nil
	}
	tok, err := w.token()
	if err != nil {
		return err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '{':
			return w.object(t, path)
		case '[':
			return w.array(t, path)
		}
		return &DecodeError{Reason: ReasonSyntax, Path: path}
	case nil:
		if t != nil {
			return &DecodeError{Reason: ReasonType, Path: path, Detail: "null is not allowed"}
		}
	case string:
		if t != nil && t.Kind() != reflect.String {
			return typeErr(path, t)
		}
	case bool:
		if t != nil && t.Kind() != reflect.Bool {
			return typeErr(path, t)
		}
	case json.Number:
		if t != nil && !isNumberKind(t.Kind()) {
			return typeErr(path, t)
		}
	}
	return nil
}

func typeErr(path string, t reflect.Type) error {
	return &DecodeError{Reason: ReasonType, Path: path, Detail: "expected " + kindName(t)}
}

func kindName(t reflect.Type) string {
	switch {
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Bool:
		return "a boolean"
	case isNumberKind(t.Kind()):
		return "a number"
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		return "an object"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return "an array"
	}
	return t.String()
}

func isNumberKind(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

func (w *walker) object(t reflect.Type, path string) error {
	var fields *fieldSet
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = t.Elem()
		default:
			return typeErr(path, t)
		}
	}
	seen := make(map[string]struct{}, 8)
	for w.dec.More() {
		tok, err := w.token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return &DecodeError{Reason: ReasonSyntax, Path: path}
		}
		kpath := join(path, key)
		if _, dup := seen[key]; dup {
			return &DecodeError{Reason: ReasonDuplicateKey, Path: kpath}
		}
		seen[key] = struct{}{}
		vt := elem
		if fields != nil {
			ft, known := fields.exact[key]
			switch {
			case known:
				vt = ft
			case fields.hasFold(key):
				return &DecodeError{Reason: ReasonCaseVariant, Path: kpath}
			case w.mode == Closed:
				return &DecodeError{Reason: ReasonUnknownField, Path: kpath}
			}
		}
		if err := w.value(vt, kpath); err != nil {
			return err
		}
	}
	_, err := w.token() // '}'
	return err
}

func (w *walker) array(t reflect.Type, path string) error {
	var elem reflect.Type
	if t != nil {
		if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			return typeErr(path, t)
		}
		elem = t.Elem()
	}
	for i := 0; w.dec.More(); i++ {
		if err := w.value(elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	_, err := w.token() // ']'
	return err
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fieldSet is the set of JSON member names a struct type declares.
type fieldSet struct {
	exact map[string]reflect.Type
	names []string
}

// hasFold reports whether key matches a declared name under Unicode simple case folding, the
// rule encoding/json uses to match keys (so "ſ" matches "s" and "K", the Kelvin sign, "k").
func (fs *fieldSet) hasFold(key string) bool {
	for _, n := range fs.names {
		if strings.EqualFold(n, key) {
			return true
		}
	}
	return false
}

var fieldCache sync.Map // reflect.Type → *fieldSet

func fieldsOf(t reflect.Type) *fieldSet {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(*fieldSet)
	}
	fs := &fieldSet{exact: map[string]reflect.Type{}}
	collectFields(t, fs)
	actual, _ := fieldCache.LoadOrStore(t, fs)
	return actual.(*fieldSet)
}

func collectFields(t reflect.Type, fs *fieldSet) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, fs)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs.exact[name] = f.Type
		fs.names = append(fs.names, name)
	}
}
