package ndjson

// This file owns the strict decoder: its errors, Decode, DecodeAliased, Valid and
// AppendCompact, and the walk over objects and arrays that refuses duplicate and case-variant
// keys while it fills the target.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
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

// MaxDepth bounds the nesting of objects and arrays, as encoding/json does.
const MaxDepth = 10_000

// Decode parses one JSON value from data into v, strictly: duplicate keys anywhere, keys that
// differ only in case from a field of the target, null in place of a typed value and (in Closed
// mode) unknown keys are all refused with a *DecodeError. Members of type json.RawMessage or
// interface types are only checked for duplicate keys; decode them with Decode in turn.
//
// Syntax comes first: a malformed value is refused as malformed (ReasonSyntax) whatever its
// first part holds, exactly when json.Valid refuses it. Decode does not check UTF-8; the
// Reader refuses lines that are not UTF-8 before they get here.
func Decode(data []byte, v any, mode Mode) error { return decode(data, v, mode, false) }

// DecodeAliased is Decode, except that when v is a struct of json.RawMessage members only
// (which Decode fills from the walk, without encoding/json), the members are slices of data
// itself instead of a private copy of it. That saves copying the whole line, most of the cost
// of a large frame, but the members are valid only as long as data is. For any other target it
// is Decode.
func DecodeAliased(data []byte, v any, mode Mode) error { return decode(data, v, mode, true) }

func decode(data []byte, v any, mode Mode, alias bool) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("ndjson: Decode needs a non-nil pointer, got %T", v)
	}
	ti := infoOf(rv.Type().Elem())
	w := walker{data: data, mode: mode}
	if ti.rawStruct {
		w.raw = ti
	}
	if err := w.run(ti); err != nil {
		return err
	}
	if ti.rawStruct {
		if !alias {
			data = bytes.Clone(data)
		}
		fillRaw(rv.Elem(), data, w.spans[:len(ti.index)])
		return nil
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

// Valid reports whether data is one well-formed JSON value with no duplicate keys. It is
// Decode into a json.RawMessage without the copy: the walk alone decides.
func Valid(data []byte) error {
	w := walker{data: data, mode: Open}
	return w.run(nil)
}

// run walks the whole of w.data as one value of type t and returns the syntax error, else the
// first strictness error.
func (w *walker) run(t *typeInfo) error {
	w.value(t, 0)
	if w.syntax == nil {
		w.skipSpace()
		if w.pos != len(w.data) {
			w.syntax = &DecodeError{Reason: ReasonSyntax, Detail: "trailing data after the JSON value"}
		}
	}
	if w.syntax != nil {
		return w.syntax
	}
	if w.err != nil {
		return w.err
	}
	return nil
}

// AppendCompact appends src to dst as encoding/json writes a json.RawMessage without HTML
// escaping: checked to be one well-formed JSON value (duplicate keys allowed, as encoding/json
// allows them) and with the whitespace between tokens removed. A value that has none, as every
// value this module writes, is copied as it stands after one fast walk.
func AppendCompact(dst, src []byte) ([]byte, error) {
	w := walker{data: src, syntaxOnly: true}
	if err := w.run(nil); err != nil {
		return dst, err
	}
	if !w.spaced {
		return append(dst, src...), nil
	}
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, src); err != nil {
		return dst, err
	}
	return buf.Bytes(), nil
}

// walker checks a JSON text against a Go type in one pass over its bytes, before
// encoding/json decodes it. It is a complete JSON syntax checker of its own: a value it walks
// without a syntax error is one json.Valid accepts. After the first strictness error it keeps
// scanning for syntax only, so that malformed input is always reported as malformed.
type walker struct {
	data   []byte
	pos    int
	mode   Mode
	raw    *typeInfo            // the raw struct being filled, if any
	spans  [maxRawFields][2]int // its top-level member spans, by field index
	err    error                // the first strictness error
	syntax error                // the syntax error, which ends the walk
	// The path is the member being walked, root first: its first pathInline steps in
	// pathHead, the rest in pathTail. It becomes a string only for an error, so a deep or wide
	// value costs no memory per step, and a shallow one none at all (an array inside the
	// walker, unlike a slice, does not make the walker escape).
	pathLen  int
	pathHead [pathInline]segment
	pathTail []segment
	// syntaxOnly skips every strictness check, duplicates included: the walk is then exactly
	// json.Valid. spaced records that whitespace was skipped somewhere.
	syntaxOnly bool
	spaced     bool
}

// segment is one step of a path: an object key, or an array index when isIndex is set.
type segment struct {
	key     key
	index   int
	isIndex bool
}

const pathInline = 8

func (w *walker) push(s segment) {
	if w.pathLen < pathInline {
		w.pathHead[w.pathLen] = s
	} else {
		w.pathTail = append(w.pathTail[:w.pathLen-pathInline], s)
	}
	w.pathLen++
}

func (w *walker) pop() { w.pathLen-- }

func (w *walker) step(i int) segment {
	if i < pathInline {
		return w.pathHead[i]
	}
	return w.pathTail[i-pathInline]
}

// pathString renders the path in dotted form: "a.b", "items[2].name", "[0]".
func (w *walker) pathString() string {
	var b strings.Builder
	for i := range w.pathLen {
		s := w.step(i)
		if s.isIndex {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.key.String())
	}
	return b.String()
}

// fail records a strictness error; only the first one counts.
func (w *walker) fail(reason, detail string) {
	if w.err == nil {
		w.err = &DecodeError{Reason: reason, Path: w.pathString(), Detail: detail}
	}
}

func (w *walker) failSyntax(detail string) {
	if w.syntax == nil {
		w.syntax = &DecodeError{Reason: ReasonSyntax, Detail: detail}
	}
}

func (w *walker) typeErr(t *typeInfo) {
	w.fail(ReasonType, "expected "+t.name)
}

// value walks one JSON value against type t. A nil t means "any": only duplicates are checked.
// depth is the number of containers around the value.
func (w *walker) value(t *typeInfo, depth int) {
	if t != nil && t.shape == shapeAny {
		t = nil
	}
	if w.err != nil || w.syntaxOnly {
		t = nil // past the first strictness error only syntax matters
	}
	w.skipSpace()
	if w.pos >= len(w.data) {
		w.failSyntax("unexpected end of input")
		return
	}
	switch c := w.data[w.pos]; {
	case c == '{' || c == '[':
		if depth >= MaxDepth {
			w.failSyntax("nesting too deep")
			return
		}
		if c == '{' {
			w.object(t, depth+1)
		} else {
			w.array(t, depth+1)
		}
	case c == '"':
		if _, _, _, ok := w.scanString(); ok && t != nil && t.shape != shapeString {
			w.typeErr(t)
		}
	case c == 't' || c == 'f':
		if !w.literal("true") && !w.literal("false") {
			w.failSyntax("invalid literal")
		} else if t != nil && t.shape != shapeBool {
			w.typeErr(t)
		}
	case c == 'n':
		if !w.literal("null") {
			w.failSyntax("invalid literal")
		} else if t != nil {
			w.fail(ReasonType, "null is not allowed")
		}
	case c == '-' || (c >= '0' && c <= '9'):
		if !w.number() {
			w.failSyntax("invalid number")
		} else if t != nil && t.shape != shapeNumber {
			w.typeErr(t)
		}
	default:
		w.failSyntax("unexpected character")
	}
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

// object walks an object; w.pos is at its '{'.
func (w *walker) object(t *typeInfo, depth int) {
	var fields, elem *typeInfo
	if t != nil {
		switch t.shape {
		case shapeObject:
			fields = t
		case shapeMap:
			elem = t.elem
		default:
			w.typeErr(t)
		}
	}
	w.pos++
	w.skipSpace()
	if w.pos < len(w.data) && w.data[w.pos] == '}' {
		w.pos++
		return
	}
	var seenBuf [16]key
	seen := seenBuf[:0] // objects are small: a slice beats a map
	// The members of a raw struct, the top-level shape of every wire message, are tracked by
	// field index instead (maxRawFields ≤ 32).
	rawTop := w.raw != nil && fields == w.raw && depth == 1
	var rawSeen uint32
	nextRaw := 0         // the raw struct's field after the last one named
	var seenMarks uint64 // the marks of the names in seen
	for {
		w.skipSpace()
		if w.pos >= len(w.data) || w.data[w.pos] != '"' {
			w.failSyntax("expected a member name")
			return
		}
		k, ok := w.scanKey()
		if !ok {
			return
		}
		w.push(segment{key: k})
		var fd field
		var known bool
		if fields != nil && w.err == nil {
			switch {
			case rawTop && k.plain:
				fd, known = fields.rawField(k.raw, &nextRaw)
			case k.plain:
				fd, known = fields.fields[string(k.raw)]
			default:
				fd, known = fields.fields[k.decoded]
			}
		}
		if w.err == nil && !w.syntaxOnly {
			if known && rawTop {
				// A member of the raw struct is a duplicate exactly when its field was
				// seen: no other name reaches that field, and no unknown name equals it.
				if bit := uint32(1) << fd.index; rawSeen&bit != 0 {
					w.fail(ReasonDuplicateKey, "")
					known = false
				} else {
					rawSeen |= bit
				}
			} else {
				// Equal names have equal marks, so a name whose mark no earlier name set
				// is no duplicate, without comparing it to each of them.
				mark := k.mark()
				if seenMarks&mark != 0 {
					for _, s := range seen {
						if s.equal(k) {
							w.fail(ReasonDuplicateKey, "")
							known = false
							break
						}
					}
				}
				seenMarks |= mark
				seen = append(seen, k)
			}
		}
		vt := elem
		if fields != nil && w.err == nil {
			switch {
			case known:
				vt = fd.t
			case fields.hasFold(k.String()):
				w.fail(ReasonCaseVariant, "")
			case w.mode == Closed:
				w.fail(ReasonUnknownField, "")
			}
		}
		w.skipSpace()
		if w.pos >= len(w.data) || w.data[w.pos] != ':' {
			w.failSyntax("expected ':'")
			return
		}
		w.pos++
		w.skipSpace()
		start := w.pos
		w.value(vt, depth)
		if w.syntax != nil {
			return
		}
		if known && w.raw != nil && depth == 1 {
			// fields is the raw struct itself, whose field indexes are its spans'.
			w.spans[fd.index] = [2]int{start, w.pos}
		}
		w.pop()
		w.skipSpace()
		if w.pos >= len(w.data) {
			w.failSyntax("unterminated object")
			return
		}
		switch w.data[w.pos] {
		case ',':
			w.pos++
		case '}':
			w.pos++
			return
		default:
			w.failSyntax("expected ',' or '}'")
			return
		}
	}
}

// array walks an array; w.pos is at its '['.
func (w *walker) array(t *typeInfo, depth int) {
	var elem *typeInfo
	if t != nil {
		if t.shape != shapeArray {
			w.typeErr(t)
		} else {
			elem = t.elem
		}
	}
	w.pos++
	w.skipSpace()
	if w.pos < len(w.data) && w.data[w.pos] == ']' {
		w.pos++
		return
	}
	for i := 0; ; i++ {
		w.push(segment{index: i, isIndex: true})
		w.value(elem, depth)
		if w.syntax != nil {
			return
		}
		w.pop()
		w.skipSpace()
		if w.pos >= len(w.data) {
			w.failSyntax("unterminated array")
			return
		}
		switch w.data[w.pos] {
		case ',':
			w.pos++
		case ']':
			w.pos++
			return
		default:
			w.failSyntax("expected ',' or ']'")
			return
		}
	}
}
