package ndjson

import (
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

type item struct {
	Name string          `json:"name"`
	Raw  json.RawMessage `json:"raw,omitempty"`
}

type Embedded struct {
	Emb string `json:"emb"`
}

// target covers every kind of member Decode distinguishes: scalars, pointers, nested structs,
// slices of structs, raw members, interface members, untagged, skipped and embedded fields.
type target struct {
	RequestID string          `json:"requestId"`
	K         string          `json:"k"`
	S         string          `json:"s"`
	N         int             `json:"n"`
	F         float64         `json:"f"`
	B         bool            `json:"b"`
	P         *string         `json:"p,omitempty"`
	Inner     *item           `json:"inner"`
	Items     []item          `json:"items"`
	Arr       [2]int          `json:"arr"`
	Raw       json.RawMessage `json:"raw"`
	Any       any             `json:"any"`
	Skip      string          `json:"-"`
	NoTag     string
	Embedded
}

// plainAccepts reports whether encoding/json, used the ordinary way, takes the input without
// complaint. Every refusal that is not about syntax or types must be one it would have taken:
// that is what makes the strict check matter.
func plainAccepts(data string) bool {
	var v target
	return json.Unmarshal([]byte(data), &v) == nil
}

func TestDecodeRefuses(t *testing.T) {
	deep := strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001)
	tests := []struct {
		name   string
		in     string
		mode   Mode
		reason string
		path   string
		plain  bool // encoding/json alone accepts the input
	}{
		// Duplicates, anywhere.
		{"duplicate top-level key", `{"requestId":"a","requestId":"b"}`, Open, ReasonDuplicateKey, "requestId", true},
		{"duplicate top-level key, closed", `{"n":1,"n":1}`, Closed, ReasonDuplicateKey, "n", true},
		{"duplicate through an escape", `{"requestId":"a","\u0072equestId":"b"}`, Open, ReasonDuplicateKey, "requestId", true},
		{"duplicate unknown key, escaped", `{"a":1,"\u0061":2}`, Open, ReasonDuplicateKey, "a", true},
		{"duplicate through a surrogate pair", `{"😀":1,"\ud83d\ude00":2}`, Open, ReasonDuplicateKey, "😀", true},
		{"duplicate in a nested struct", `{"inner":{"name":"a","name":"b"}}`, Closed, ReasonDuplicateKey, "inner.name", true},
		{"duplicate inside a raw member", `{"raw":{"x":{"y":1,"y":2}}}`, Closed, ReasonDuplicateKey, "raw.x.y", true},
		{"duplicate inside a raw member of a struct in an array", `{"items":[{"name":"a"},{"name":"b","raw":{"q":1,"q":2}}]}`, Closed, ReasonDuplicateKey, "items[1].raw.q", true},
		{"duplicate in an array element", `{"items":[{"name":"a"},{"name":"b","name":"c"}]}`, Closed, ReasonDuplicateKey, "items[1].name", true},
		{"duplicate in an array inside a raw member", `{"raw":[1,[{"a":1,"a":2}]]}`, Closed, ReasonDuplicateKey, "raw[1][0].a", true},
		{"duplicate inside an interface member", `{"any":{"deep":{"k":1,"k":1}}}`, Closed, ReasonDuplicateKey, "any.deep.k", true},
		{"duplicate of a skipped field", `{"Skip":1,"Skip":2}`, Open, ReasonDuplicateKey, "Skip", true},
		{"duplicate empty key", `{"":1,"":2}`, Open, ReasonDuplicateKey, "", true},

		// Keys that differ only in case from a declared field, in either mode.
		{"case variant RequestId", `{"RequestId":"x"}`, Open, ReasonCaseVariant, "RequestId", true},
		{"case variant REQUESTID", `{"REQUESTID":"x"}`, Closed, ReasonCaseVariant, "REQUESTID", true},
		{"case variant next to the exact key", `{"requestId":"x","requestID":"y"}`, Open, ReasonCaseVariant, "requestID", true},
		{"Kelvin sign for k", `{"\u212a":"x"}`, Open, ReasonCaseVariant, "\u212a", true},
		{"raw Kelvin sign for k", "{\"\u212a\":\"x\"}", Closed, ReasonCaseVariant, "\u212a", true},
		{"upper K for k", `{"K":"x"}`, Open, ReasonCaseVariant, "K", true},
		{"long s for s", `{"\u017f":"x"}`, Open, ReasonCaseVariant, "\u017f", true},
		{"case variant in a nested struct", `{"inner":{"NAME":"x"}}`, Open, ReasonCaseVariant, "inner.NAME", true},
		{"case variant in an array element", `{"items":[{"name":"a"},{"Name":"x"}]}`, Open, ReasonCaseVariant, "items[1].Name", true},
		{"case variant of an embedded field", `{"EMB":"x"}`, Open, ReasonCaseVariant, "EMB", true},
		{"case variant of an untagged field", `{"notag":"x"}`, Open, ReasonCaseVariant, "notag", true},

		// Unknown keys in closed objects.
		{"unknown top-level key", `{"zzz":1}`, Closed, ReasonUnknownField, "zzz", true},
		{"unknown nested key", `{"inner":{"zzz":1}}`, Closed, ReasonUnknownField, "inner.zzz", true},
		{"unknown key in an array element", `{"items":[{"zzz":1}]}`, Closed, ReasonUnknownField, "items[0].zzz", true},
		{"skipped field is unknown", `{"Skip":"x"}`, Closed, ReasonUnknownField, "Skip", true},
		{"dash key is unknown", `{"-":"x"}`, Closed, ReasonUnknownField, "-", true},

		// null for a typed member: encoding/json leaves the zero value and reports nothing.
		{"null for an int", `{"n":null}`, Open, ReasonType, "n", true},
		{"null for a string", `{"requestId":null}`, Open, ReasonType, "requestId", true},
		{"null for a pointer", `{"p":null}`, Open, ReasonType, "p", true},
		{"null for a struct pointer", `{"inner":null}`, Open, ReasonType, "inner", true},
		{"null for a slice", `{"items":null}`, Open, ReasonType, "items", true},
		{"null in a slice", `{"items":[null]}`, Open, ReasonType, "items[0]", true},
		{"null at the top", `null`, Open, ReasonType, "", true},

		// Values of the wrong JSON type (encoding/json refuses these too).
		{"string for an int", `{"n":"1"}`, Open, ReasonType, "n", false},
		{"number for a string", `{"requestId":1}`, Open, ReasonType, "requestId", false},
		{"string for a bool", `{"b":"true"}`, Open, ReasonType, "b", false},
		{"number for a bool", `{"b":0}`, Open, ReasonType, "b", false},
		{"array for a struct", `{"inner":[]}`, Open, ReasonType, "inner", false},
		{"string for a struct", `{"inner":"x"}`, Open, ReasonType, "inner", false},
		{"object for a slice", `{"items":{}}`, Open, ReasonType, "items", false},
		{"wrong type in an array element", `{"items":[{"name":1}]}`, Open, ReasonType, "items[0].name", false},
		{"array for the top", `[]`, Open, ReasonType, "", false},
		{"fraction for an int", `{"n":1.5}`, Open, ReasonType, "n", false},
		{"int out of range", `{"n":99999999999999999999}`, Open, ReasonType, "n", false},
		{"float out of range", `{"f":1e400}`, Open, ReasonType, "f", false},

		// Not one well-formed JSON value.
		{"empty", ``, Open, ReasonSyntax, "", false},
		{"whitespace only", " \t\r\n", Open, ReasonSyntax, "", false},
		{"unclosed object", `{`, Open, ReasonSyntax, "", false},
		{"trailing comma", `{"n":1,}`, Open, ReasonSyntax, "", false},
		{"missing colon", `{"n" 1}`, Open, ReasonSyntax, "", false},
		{"unquoted key", `{n:1}`, Open, ReasonSyntax, "", false},
		{"single quotes", `{'n':1}`, Open, ReasonSyntax, "", false},
		{"leading zero", `{"n":01}`, Open, ReasonSyntax, "", false},
		{"NaN", `{"f":NaN}`, Open, ReasonSyntax, "", false},
		{"raw control character in a string", "{\"requestId\":\"a\x01\"}", Open, ReasonSyntax, "", false},
		{"bad escape", `{"requestId":"\x"}`, Open, ReasonSyntax, "", false},
		{"unterminated string", `{"requestId":"a}`, Open, ReasonSyntax, "", false},
		{"trailing value", `{} {}`, Open, ReasonSyntax, "", false},
		{"trailing garbage", `{}x`, Open, ReasonSyntax, "", false},
		{"trailing comma after the value", `{},`, Open, ReasonSyntax, "", false},
		{"byte order mark", "\ufeff{}", Open, ReasonSyntax, "", false},
		// A malformed line is malformed, whatever a walk over its first part would find.
		{"malformed after a duplicate", `{"n":1,"n":`, Open, ReasonSyntax, "", false},
		{"malformed after a case variant", `{"N":1,`, Open, ReasonSyntax, "", false},
		{"malformed after an unknown key", `{"zzz":1,`, Closed, ReasonSyntax, "", false},
		{"malformed after a wrong type", `{"n":"1",`, Open, ReasonSyntax, "", false},
		{"malformed array for a struct", `[1,`, Open, ReasonSyntax, "", false},
		{"nesting deeper than encoding/json allows", `{"raw":` + deep + `}`, Open, ReasonSyntax, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v target
			err := Decode([]byte(tt.in), &v, tt.mode)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode(%q) = %v, want a *DecodeError", tt.in, err)
			}
			if de.Reason != tt.reason || de.Path != tt.path {
				t.Errorf("Decode(%q): reason %q at %q, want %q at %q (%v)", tt.in, de.Reason, de.Path, tt.reason, tt.path, de)
			}
			if got := plainAccepts(tt.in); got != tt.plain {
				t.Errorf("encoding/json accepts %q: %v, table says %v", tt.in, got, tt.plain)
			}
			if tt.mode == Closed { // Closed is never more lenient than Open, and vice versa for refusals
				return
			}
			if err := Decode([]byte(tt.in), &v, Closed); err == nil {
				t.Errorf("Closed accepted %q, which Open refuses", tt.in)
			}
		})
	}
}

// TestPlainJSONResolvesWhatDecodeRefuses shows what would reach the program without the strict
// check: encoding/json takes the last duplicate and folds case, Kelvin sign and long s included.
func TestPlainJSONResolvesWhatDecodeRefuses(t *testing.T) {
	tests := []struct {
		in   string
		get  func(*target) string
		want string
	}{
		{`{"requestId":"a","requestId":"b"}`, func(v *target) string { return v.RequestID }, "b"},
		{`{"requestId":"a","\u0072equestId":"b"}`, func(v *target) string { return v.RequestID }, "b"},
		{`{"REQUESTID":"x"}`, func(v *target) string { return v.RequestID }, "x"},
		{`{"requestId":"real","RequestId":"shadow"}`, func(v *target) string { return v.RequestID }, "shadow"},
		{`{"\u212a":"kelvin"}`, func(v *target) string { return v.K }, "kelvin"},
		{`{"\u017f":"long s"}`, func(v *target) string { return v.S }, "long s"},
	}
	for _, tt := range tests {
		var v target
		if err := json.Unmarshal([]byte(tt.in), &v); err != nil {
			t.Fatalf("encoding/json refused %q: %v", tt.in, err)
		}
		if got := tt.get(&v); got != tt.want {
			t.Errorf("encoding/json on %q gave %q, want %q", tt.in, got, tt.want)
		}
		if err := Decode([]byte(tt.in), &v, Open); err == nil {
			t.Errorf("Decode accepted %q", tt.in)
		}
	}
}

func TestDecodeAccepts(t *testing.T) {
	full := `{
		"requestId": "r-1", "k": "kv", "s": "sv", "n": -42, "f": 2.5e3, "b": true, "p": "ptr",
		"inner": {"name": "in", "raw": {"free": [1, {"x": null}]}},
		"items": [{"name": "a"}, {"name": "b", "raw": "text"}],
		"arr": [7, 8],
		"raw": {"REQUESTID": 1, "any": ["case is not checked inside raw members"]},
		"any": {"nested": [true, null, 1.5, "s"]},
		"NoTag": "nt", "emb": "e"
	}` + "\r\n"
	tests := []struct {
		name string
		in   string
		mode Mode
	}{
		{"every member, closed", full, Closed},
		{"every member, open", full, Open},
		{"empty object", `{}`, Closed},
		{"unknown keys tolerated when open", `{"zzz":1,"inner":{"other":[1,2]},"Skip":"x"}`, Open},
		{"same key in different objects", `{"inner":{"name":"a"},"items":[{"name":"a"},{"name":"a"}]}`, Closed},
		{"same key at different depths", `{"raw":{"a":{"a":{"a":1}}}}`, Closed},
		{"keys that differ in case inside a raw member", `{"raw":{"a":1,"A":2}}`, Closed},
		{"null for raw and interface members", `{"raw":null,"any":null}`, Closed},
		{"surrounding whitespace", " \t{\"n\":1}\r\n ", Closed},
		{"nesting at encoding/json's limit", `{"raw":` + strings.Repeat("[", 9_999) + strings.Repeat("]", 9_999) + `}`, Closed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got, want target
			if err := Decode([]byte(tt.in), &got, tt.mode); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if err := json.Unmarshal([]byte(tt.in), &want); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Decode gave %+v, encoding/json %+v", got, want)
			}
		})
	}
}

func TestDecodeNeedsPointer(t *testing.T) {
	var v target
	var nilPtr *target
	for _, arg := range []any{nil, v, nilPtr} {
		err := Decode([]byte(`{}`), arg, Open)
		var de *DecodeError
		if err == nil || errors.As(err, &de) {
			t.Errorf("Decode into %T: %v, want a plain error", arg, err)
		}
	}
}

func TestDecodeIntoMapAndSlice(t *testing.T) {
	var m map[string][]int
	if err := Decode([]byte(`{"a":[1],"A":[2]}`), &m, Closed); err != nil {
		t.Fatalf("map: %v", err)
	}
	if len(m) != 2 {
		t.Fatalf("map: %v", m)
	}
	for _, tt := range []struct{ in, reason, path string }{
		{`{"a":[1],"a":[2]}`, ReasonDuplicateKey, "a"},
		{`{"a":["x"]}`, ReasonType, "a[0]"},
		{`{"a":[null]}`, ReasonType, "a[0]"},
	} {
		var m map[string][]int
		var de *DecodeError
		if err := Decode([]byte(tt.in), &m, Closed); !errors.As(err, &de) || de.Reason != tt.reason || de.Path != tt.path {
			t.Errorf("Decode(%q) = %v, want %s at %s", tt.in, err, tt.reason, tt.path)
		}
	}
}

func TestValid(t *testing.T) {
	tests := []struct {
		in     string
		reason string // "" when valid
	}{
		{`{}`, ""},
		{`[]`, ""},
		{`"s"`, ""},
		{`1`, ""},
		{`null`, ""},
		{`{"a":1,"A":2}`, ""}, // no target type: case is not a question
		{`{"a":{"b":1},"b":{"a":1}}`, ""},
		{`[{"a":1},{"a":1}]`, ""},
		{`{"a":1,"a":1}`, ReasonDuplicateKey},
		{`[{"a":{"b":1,"b":1}}]`, ReasonDuplicateKey},
		{`{"a":1,"\u0061":2}`, ReasonDuplicateKey},
		{`{`, ReasonSyntax},
		{`{}{}`, ReasonSyntax},
		{``, ReasonSyntax},
	}
	for _, tt := range tests {
		err := Valid([]byte(tt.in))
		if tt.reason == "" {
			if err != nil {
				t.Errorf("Valid(%q) = %v", tt.in, err)
			}
			continue
		}
		var de *DecodeError
		if !errors.As(err, &de) || de.Reason != tt.reason {
			t.Errorf("Valid(%q) = %v, want %s", tt.in, err, tt.reason)
		}
		if tt.reason == ReasonDuplicateKey && !json.Valid([]byte(tt.in)) {
			t.Errorf("encoding/json calls %q invalid; the test means it to be well-formed", tt.in)
		}
	}
}

// TestDecodeErrorNeverShowsValues checks that a DecodeError names members, never their values,
// which may be secrets.
func TestDecodeErrorNeverShowsValues(t *testing.T) {
	for _, in := range []string{
		`{"requestId":"hunter2","requestId":"hunter2"}`,
		`{"requestId":"hunter2","REQUESTID":"hunter2"}`,
		`{"n":"hunter2"}`,
		`{"zzz":"hunter2"}`,
		`{"requestId":"hunter2"`,
	} {
		var v target
		err := Decode([]byte(in), &v, Closed)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Decode(%q) = %v", in, err)
		}
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	tests := []struct {
		err  *DecodeError
		want string
	}{
		{&DecodeError{Reason: ReasonSyntax}, "json: malformed JSON"},
		{&DecodeError{Reason: ReasonDuplicateKey, Path: "a.b"}, "json: duplicate key at a.b"},
		{&DecodeError{Reason: ReasonCaseVariant, Path: "A"}, "json: key differs only in case from a known field at A"},
		{&DecodeError{Reason: ReasonUnknownField, Path: "x"}, "json: unknown field at x"},
		{&DecodeError{Reason: ReasonType, Path: "n", Detail: "expected a number"}, "json: wrong type at n: expected a number"},
		{&DecodeError{Reason: "other"}, "json: other"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// allocDuring reports the bytes allocated while f runs.
func allocDuring(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeCostIsLinear feeds deep and wide values that fit in one line. Decode's work must
// stay proportional to the input: a deep value must not cost memory quadratic in its depth,
// and a wide array deep inside a value must not cost its depth once per element.
func TestDecodeCostIsLinear(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		maxAlloc uint64
	}{
		{"deep arrays at the nesting limit", strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000), 16 << 20},
		{"deep objects at the nesting limit", strings.Repeat(`{"a":`, 9_999) + "1" + strings.Repeat("}", 9_999), 16 << 20},
		{"deep arrays past the nesting limit", strings.Repeat("[", 400_000) + strings.Repeat("]", 400_000), 16 << 20},
		{"unclosed deep arrays", strings.Repeat("[", 1<<20), 16 << 20},
		{"wide array deep down", strings.Repeat(`{"abcdefgh":`, 5_000) + "[" + strings.Repeat("1,", 100_000) + "1]" + strings.Repeat("}", 5_000), 48 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw json.RawMessage
			alloc := allocDuring(func() { _ = Decode([]byte(tt.in), &raw, Open) })
			t.Logf("%d bytes in, %d bytes allocated", len(tt.in), alloc)
			if alloc > tt.maxAlloc {
				t.Errorf("allocated %d bytes for %d bytes of input, want at most %d", alloc, len(tt.in), tt.maxAlloc)
			}
		})
	}
}

func TestDecodeConcurrent(t *testing.T) {
	type fresh struct {
		A string `json:"a"`
		B []item `json:"b"`
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				var v fresh
				if err := Decode([]byte(`{"a":"x","b":[{"name":"n"}]}`), &v, Closed); err != nil || v.A != "x" {
					t.Errorf("Decode: %v, %+v", err, v)
					return
				}
				if err := Decode([]byte(`{"A":"x"}`), &v, Open); err == nil {
					t.Error("case variant accepted")
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestDecodeRawStructDuplicates pins the duplicate check of a raw struct's own members, which
// goes by field index rather than by comparing names.
func TestDecodeRawStructDuplicates(t *testing.T) {
	type rawPair struct {
		A json.RawMessage `json:"a"`
		B json.RawMessage `json:"b"`
	}
	tests := []struct {
		name, in string
		mode     Mode
		reason   string // "" when accepted
	}{
		{"distinct", `{"a":1,"b":{"a":1}}`, Closed, ""},
		{"same name twice", `{"a":1,"b":2,"a":3}`, Closed, ReasonDuplicateKey},
		{"through an escape", `{"a":1,"\u0061":2}`, Closed, ReasonDuplicateKey},
		{"unknown name twice, open", `{"a":1,"x":1,"x":2}`, Open, ReasonDuplicateKey},
		{"unknown name once, open", `{"x":1,"a":1,"b":2}`, Open, ""},
		{"case variant", `{"a":1,"A":2}`, Open, ReasonCaseVariant},
		// Members are looked up in field order first (rawField); any other order must give
		// the same answers.
		{"reverse order", `{"b":2,"a":1}`, Closed, ""},
		{"same name twice, out of order", `{"b":2,"a":1,"b":3}`, Closed, ReasonDuplicateKey},
		{"same name twice, in order", `{"a":1,"a":3}`, Closed, ReasonDuplicateKey},
		{"unknown name, closed", `{"a":1,"c":2}`, Closed, ReasonUnknownField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v rawPair
			err := Decode([]byte(tt.in), &v, tt.mode)
			var de *DecodeError
			switch {
			case tt.reason == "" && err != nil:
				t.Fatalf("Decode: %v", err)
			case tt.reason != "" && (!errors.As(err, &de) || de.Reason != tt.reason):
				t.Fatalf("Decode: %v, want reason %s", err, tt.reason)
			}
			if tt.reason == "" && string(v.A) != "1" {
				t.Errorf("a = %s, want 1", v.A)
			}
		})
	}
}

// TestDecodeAliased checks that DecodeAliased fills a raw struct with slices of the input, and
// that Decode does not: a caller that reuses its buffer after Decode must keep its members.
func TestDecodeAliased(t *testing.T) {
	type raw struct {
		A json.RawMessage `json:"a"`
		B json.RawMessage `json:"b"`
	}
	in := []byte(`{"a":"xy","b":[1,2]}`)
	var copied, aliased raw
	if err := Decode(in, &copied, Closed); err != nil {
		t.Fatal(err)
	}
	if err := DecodeAliased(in, &aliased, Closed); err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = ' '
	}
	if string(copied.A) != `"xy"` || string(copied.B) != `[1,2]` {
		t.Errorf("Decode members changed with the input: %s %s", copied.A, copied.B)
	}
	if string(aliased.A) != `    ` || string(aliased.B) != `     ` {
		t.Errorf("DecodeAliased members are not slices of the input: %q %q", aliased.A, aliased.B)
	}
	// Refusals are Decode's.
	for _, bad := range []string{`{"a":1,"a":2}`, `{"c":1}`, `{"a":`} {
		err1 := Decode([]byte(bad), &raw{}, Closed)
		err2 := DecodeAliased([]byte(bad), &raw{}, Closed)
		if err1 == nil || err2 == nil || err1.Error() != err2.Error() {
			t.Errorf("%s: Decode %v, DecodeAliased %v", bad, err1, err2)
		}
	}
}
