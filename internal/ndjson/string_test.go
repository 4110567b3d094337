package ndjson

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// wantString is encoding/json's answer with HTML escaping off.
func wantString(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// TestAppendStringMatchesEncodingJSON puts every byte value at every position of an
// eight-byte word (the fast path's unit), and random text, through both encoders.
func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	check := func(s string) {
		if got, want := string(AppendString(nil, s)), wantString(t, s); got != want {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}
	}
	for c := range 256 {
		for pos := range 9 {
			b := []byte("abcdefghijklmnop")
			b[pos] = byte(c)
			check(string(b))
		}
	}
	for _, s := range []string{"", "é\u2028x\u2029", "\xe2\x80", "tab\there", `"quoted\"`} {
		check(s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "\n", "\"", "\\", "\x00", "\x7f", "é", "\u2028", "\xff", "日本", "<>&"}
	for range 2000 {
		var b []byte
		for range r.IntN(40) {
			b = append(b, alphabet[r.IntN(len(alphabet))]...)
		}
		check(string(b))
	}
}

// TestPlainString: a string token whose bytes are its text is read as encoding/json reads it;
// anything a full decoder would read differently, or refuse, is not.
func TestPlainString(t *testing.T) {
	for _, raw := range []string{`""`, `"agent-1"`, `"é ✓ <&>"`, "\"\u2028\""} {
		got, ok := PlainString([]byte(raw))
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil || !ok || got != want {
			t.Errorf("PlainString(%s) = %q, %v; encoding/json %q, %v", raw, got, ok, want, err)
		}
	}
	for _, raw := range []string{``, `"`, `x`, `"a`, `a"`, `"a\"b"`, `"a\nb"`, "\"a\nb\"", "\"a\x00\"", "\"\xff\"", `"a"b"`, `1`, `null`} {
		if got, ok := PlainString([]byte(raw)); ok {
			t.Errorf("PlainString(%q) = %q, true; want false", raw, got)
		}
	}
}
