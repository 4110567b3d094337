package ndjson

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
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

func (w *walker) skipSpace() {
	for w.pos < len(w.data) {
		switch w.data[w.pos] {
		case ' ', '\t', '\n', '\r':
			w.pos++
			w.spaced = true
		default:
			return
		}
	}
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

func (w *walker) literal(lit string) bool {
	if len(w.data)-w.pos >= len(lit) && string(w.data[w.pos:w.pos+len(lit)]) == lit {
		w.pos += len(lit)
		return true
	}
	return false
}

// number consumes a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (w *walker) number() bool {
	d := w.data
	i := w.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		start := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		start := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	w.pos = i
	return true
}

// scanString consumes a JSON string at w.pos and returns the span of its contents. plain
// reports that the contents need no decoding: no escapes, valid UTF-8.
func (w *walker) scanString() (start, end int, plain, ok bool) {
	d := w.data
	i := w.pos + 1 // past the opening quote
	start = i
	escaped := false
	// high collects the bytes looked at, and some just past the string: without a high bit
	// among them the contents are ASCII, valid UTF-8 without a second look.
	var high uint64
	for {
		// Runs of plain bytes, nearly all of a long string, are skipped eight at a time, up
		// to the first byte that may be special.
		for len(d)-i >= 8 {
			x := binary.LittleEndian.Uint64(d[i : i+8])
			high |= x
			if m := stringSpecials(x); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		if i >= len(d) {
			w.failSyntax("unterminated string")
			return 0, 0, false, false
		}
		switch c := d[i]; {
		case c == '"':
			w.pos = i + 1
			return start, i, !escaped && (high&0x8080808080808080 == 0 || utf8.Valid(d[start:i])), true
		case c == '\\':
			escaped = true
			if i+1 >= len(d) {
				w.failSyntax("unterminated string")
				return 0, 0, false, false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !isHex4(d[i+2:i+6]) {
					w.failSyntax("invalid \\u escape")
					return 0, 0, false, false
				}
				i += 6
			default:
				w.failSyntax("invalid escape")
				return 0, 0, false, false
			}
		case c < 0x20:
			w.failSyntax("control character in string")
			return 0, 0, false, false
		default:
			high |= uint64(c)
			i++
		}
	}
}

// key is an object member name: its raw bytes when they need no decoding, else its decoded
// value. Plain keys, nearly all of them, cost no allocation.
type key struct {
	raw     []byte
	decoded string
	plain   bool
}

// String returns the name as encoding/json would decode it: escapes resolved and invalid UTF-8
// replaced by U+FFFD. Replacing matters, since two different invalid sequences name the same
// member once decoded.
func (k key) String() string {
	if k.plain {
		return string(k.raw)
	}
	return k.decoded
}

func (k key) equal(o key) bool {
	if k.plain && o.plain {
		return string(k.raw) == string(o.raw)
	}
	return k.String() == o.String()
}

// mark returns one bit chosen by the name's length and its first and last bytes: equal names
// have equal marks.
func (k key) mark() uint64 {
	var n, first, last uint
	if k.plain {
		if n = uint(len(k.raw)); n > 0 {
			first, last = uint(k.raw[0]), uint(k.raw[n-1])
		}
	} else if n = uint(len(k.decoded)); n > 0 {
		first, last = uint(k.decoded[0]), uint(k.decoded[n-1])
	}
	return 1 << ((n + 3*first + 5*last) & 63)
}

// scanKey consumes a member name.
func (w *walker) scanKey() (key, bool) {
	start, end, plain, ok := w.scanString()
	if !ok {
		return key{}, false
	}
	if plain {
		return key{raw: w.data[start:end], plain: true}, true
	}
	var s string
	if err := json.Unmarshal(w.data[start-1:end+1], &s); err != nil {
		w.failSyntax("invalid string")
		return key{}, false
	}
	return key{decoded: s}, true
}

// stringSpecials marks with its high bit each of the eight bytes of x (little-endian) that may
// be a quote, a backslash or a control character. The lowest mark is exact: no byte below it
// is special, and its byte is; marks above it may be false.
func stringSpecials(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ (lo * '"')
	bs := x ^ (lo * '\\')
	// This is ((q-lo)&^q | (bs-lo)&^bs | (x-lo*0x20)&^x) & hi, the three zero-byte tests,
	// with one mask instead of three: '"' and '\\' have no high bit, so q and bs have x's.
	return ((q - lo) | (bs - lo) | (x - lo*0x20)) &^ x & hi
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
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

// Shapes of JSON value a Go type accepts.
const (
	shapeAny    = iota // json.RawMessage, interfaces, custom unmarshalers: only duplicates checked
	shapeObject        // a struct: declared members only
	shapeMap           // a map: any member names
	shapeArray
	shapeString
	shapeBool
	shapeNumber
	shapeOther // a type JSON cannot fill; encoding/json reports it
)

// typeInfo is what the walker needs to know about a Go type, computed once per type and linked
// to the typeInfo of its members, so a walk costs one cache lookup however deep the value.
type typeInfo struct {
	shape int
	// rawStruct marks a struct whose members are all json.RawMessage: Decode fills it from
	// the spans the walk found, without a second parse by encoding/json.
	rawStruct  bool
	index      map[string]int   // rawStruct: member name → field index
	order      []string         // rawStruct: member names by field index
	orderField []field          // rawStruct: fields by field index
	name       string           // for "expected …" messages
	fields     map[string]field // shapeObject: declared member names
	names      []string         // shapeObject: the same names, for case-folding checks
	elem       *typeInfo        // shapeMap, shapeArray
}

// field is a declared member: its type, and for a member of the struct itself (not of an
// embedded one) its field index.
type field struct {
	t     *typeInfo
	index int
}

// rawField is fields[name] for a raw struct. Peers write a message's members in the order of
// its fields, skipping absent ones, so the names from *next on are compared first, which is
// cheaper than hashing the name; *next moves past a match. A name out of that order falls back
// to the map.
func (ti *typeInfo) rawField(name []byte, next *int) (field, bool) {
	for i := *next; i < len(ti.order); i++ {
		if ti.order[i] == string(name) {
			*next = i + 1
			return ti.orderField[i], true
		}
	}
	fd, ok := ti.fields[string(name)]
	return fd, ok
}

// hasFold reports whether key matches a declared name under Unicode simple case folding, the
// rule encoding/json uses to match keys (so "ſ" matches "s" and "K", the Kelvin sign, "k").
func (ti *typeInfo) hasFold(key string) bool {
	for _, n := range ti.names {
		if strings.EqualFold(n, key) {
			return true
		}
	}
	return false
}

var typeCache sync.Map // reflect.Type → *typeInfo

func infoOf(t reflect.Type) *typeInfo {
	if ti, ok := typeCache.Load(t); ok {
		return ti.(*typeInfo)
	}
	ti := buildInfo(t, map[reflect.Type]*typeInfo{})
	actual, _ := typeCache.LoadOrStore(t, ti)
	return actual.(*typeInfo)
}

// buildInfo computes the typeInfo of t; building holds the types in progress, so that a
// recursive type links back to itself instead of recursing forever.
func buildInfo(t reflect.Type, building map[reflect.Type]*typeInfo) *typeInfo {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if ti := building[t]; ti != nil {
		return ti
	}
	ti := &typeInfo{}
	building[t] = ti
	switch {
	case t == rawMessageType || t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType):
		ti.shape = shapeAny
	case t.Kind() == reflect.Struct:
		ti.shape, ti.name = shapeObject, "an object"
		ti.fields = map[string]field{}
		collectFields(t, ti, building)
		ti.index = rawStructIndex(t)
		ti.rawStruct = ti.index != nil
		if ti.rawStruct {
			ti.order, ti.orderField = make([]string, len(ti.index)), make([]field, len(ti.index))
			for name, i := range ti.index {
				ti.order[i], ti.orderField[i] = name, ti.fields[name]
			}
		}
	case t.Kind() == reflect.Map:
		ti.shape, ti.name = shapeMap, "an object"
		ti.elem = buildInfo(t.Elem(), building)
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		ti.shape, ti.name = shapeArray, "an array"
		ti.elem = buildInfo(t.Elem(), building)
	case t.Kind() == reflect.String:
		ti.shape, ti.name = shapeString, "a string"
	case t.Kind() == reflect.Bool:
		ti.shape, ti.name = shapeBool, "a boolean"
	case isNumberKind(t.Kind()):
		ti.shape, ti.name = shapeNumber, "a number"
	default:
		ti.shape, ti.name = shapeOther, t.String()
	}
	return ti
}

func collectFields(t reflect.Type, ti *typeInfo, building map[reflect.Type]*typeInfo) {
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
				collectFields(ft, ti, building)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ti.fields[name] = field{t: buildInfo(f.Type, building), index: i}
		ti.names = append(ti.names, name)
	}
}

// maxRawFields bounds the fields of a raw struct, whose spans the walker holds in an array.
const maxRawFields = 24

// rawStructIndex maps the JSON names of t's fields to their indexes when every field is an
// exported, plainly tagged json.RawMessage and there are at most maxRawFields of them;
// otherwise it returns nil.
func rawStructIndex(t reflect.Type) map[string]int {
	if t.NumField() > maxRawFields {
		return nil
	}
	index := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type != rawMessageType || !f.IsExported() || f.Anonymous || name == "" || name == "-" || opts != "" {
			return nil
		}
		index[name] = i
	}
	return index
}

// fillRaw sets the members of a raw struct from their spans in data, which they share: Decode
// passes its own copy, so that they stay valid after the caller reuses its buffer.
func fillRaw(v reflect.Value, data []byte, spans [][2]int) {
	v.SetZero()
	for i, sp := range spans {
		if sp[1] > 0 {
			v.Field(i).SetBytes(data[sp[0]:sp[1]:sp[1]])
		}
	}
}
