package tooladapter

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// reflectsHandleExhaustive is the reference screen: the literal search, then the whole line
// decoded and every key and string searched.
func reflectsHandleExhaustive(line []byte, secret string) bool {
	if bytes.Contains(line, []byte(secret)) {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return false
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case string:
			return strings.Contains(x, secret)
		case []any:
			return slices.ContainsFunc(x, walk)
		case map[string]any:
			for k, e := range x {
				if strings.Contains(k, secret) || walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

const testSecret = "Zq0_-aB9zQ1xY2wV3uT4sR5pO6nM7lK8"

// checkReflectsHandle: the fast screen finds everything the exhaustive one finds, and on a
// well-formed line without duplicate keys (where decoding keeps every string) exactly that.
func checkReflectsHandle(t *testing.T, line []byte, secret string) {
	t.Helper()
	fast, slow := reflectsHandle(line, []byte(secret)), reflectsHandleExhaustive(line, secret)
	if slow && !fast {
		t.Fatalf("%q: the fast screen misses the handle the exhaustive one finds", line)
	}
	if ndjson.Valid(line) == nil && fast != slow {
		t.Fatalf("%q: fast screen %v, exhaustive %v", line, fast, slow)
	}
}

// escapeSome JSON-escapes a random selection of s's characters as \uXXXX (upper or lower
// case hex), the way a reflecting adapter could hide the handle.
func escapeSome(r *rand.Rand, s string) string {
	var b strings.Builder
	for _, c := range s {
		switch r.IntN(4) {
		case 0:
			b.WriteString(`\u00` + string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&0xf]))
		case 1:
			b.WriteString(`\u00` + string("0123456789abcdef"[c>>4]) + string("0123456789ABCDEF"[c&0xf]))
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

func TestReflectsHandleMatchesExhaustive(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	pieces := []string{`a`, `\n`, `\\u`, `\\`, `\"`, `\/`, `\u00e9`, `\ud83d\ude00`, `\u0000`, `é`, ` `, `Zq0`, `_-`}
	for i := range 20000 {
		var s strings.Builder
		for range r.IntN(6) {
			s.WriteString(pieces[r.IntN(len(pieces))])
		}
		switch r.IntN(4) {
		case 0:
			s.WriteString(escapeSome(r, testSecret))
		case 1:
			s.WriteString(escapeSome(r, testSecret[:len(testSecret)-1])) // one short: no match
		case 2:
			h := escapeSome(r, testSecret)
			cut := r.IntN(len(h))
			s.WriteString(h[:cut] + `\n` + h[cut:]) // split by another escape: usually no match
		}
		for range r.IntN(3) {
			s.WriteString(pieces[r.IntN(len(pieces))])
		}
		str := `"` + s.String() + `"`
		var line string
		switch r.IntN(4) {
		case 0:
			line = `{"data":{"content":` + str + `,"eof":true}}`
		case 1:
			line = `{` + str + `:1,"k":"\u0041"}`
		case 2:
			line = `["x",` + str + `,{"a":[` + str + `]}]`
		default:
			line = `{"a":` + str + `,"a":"dup"}`
		}
		if i%7 == 0 {
			line = line[:r.IntN(len(line))] // not JSON
		}
		checkReflectsHandle(t, []byte(line), testSecret)
	}
	// The handle spelled with escapes is found in keys and in values.
	for _, line := range []string{
		`{"x":"` + `\u005a` + testSecret[1:] + `"}`,
		`{"` + testSecret[:3] + `\u005F` + testSecret[4:] + `":1}`,
	} {
		if !reflectsHandle([]byte(line), []byte(testSecret)) {
			t.Errorf("%s: handle not found", line)
		}
	}
}

func FuzzReflectsHandle(f *testing.F) {
	for _, s := range []string{
		`{"a":"\u005aq0_-aB9zQ1xY2wV3uT4sR5pO6nM7lK8"}`,
		`{"a":"Zq0_-aB9zQ1xY2wV3uT4sR5pO6nM7lK8"}`,
		`{"a":"Zq0_\n-aB9zQ1xY2wV3uT4sR5pO6nM7lK8"}`,
		`["\\u005aq0_-aB9zQ1xY2wV3uT4sR5pO6nM7lK8"]`,
		`{"a":"x","a":"\u005aq0_-aB9zQ1xY2wV3uT4sR5pO6nM7lK8"}`,
	} {
		f.Add([]byte(s), uint8(32))
	}
	f.Fuzz(func(t *testing.T, line []byte, n uint8) {
		// Any base64url secret: the argument never used any other property of the handle.
		secret := testSecret[:1+int(n)%len(testSecret)]
		checkReflectsHandle(t, line, secret)
		checkContainsSecret(t, line, secret)
	})
}

// checkContainsSecret compares ContainsSecret with bytes.Contains on text built from piece,
// long enough for the fast path, with the secret or part of it at the end.
func checkContainsSecret(t *testing.T, piece []byte, secret string) {
	t.Helper()
	b := bytes.Repeat(piece, 1+300/(len(piece)+1))
	for _, tail := range []string{"", secret, secret[:len(secret)/2], secret[1:]} {
		x := append(b[:len(b):len(b)], tail...)
		for _, s := range []string{secret, secret[1:], secret[:len(secret)/2]} {
			if got, want := ContainsSecret(x, []byte(s)), bytes.Contains(x, []byte(s)); got != want {
				t.Fatalf("ContainsSecret(%q, %q) = %v, bytes.Contains %v", x, s, got, want)
			}
		}
	}
}

func TestContainsSecret(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	alphabet := testSecret + `e e\n\`
	for range 3000 {
		piece := make([]byte, r.IntN(40))
		for i := range piece {
			piece[i] = alphabet[r.IntN(len(alphabet))]
		}
		if r.IntN(3) == 0 {
			piece = append(piece, testSecret[:r.IntN(len(testSecret))]...)
		}
		checkContainsSecret(t, piece, testSecret[:1+r.IntN(len(testSecret))])
	}
	// Many candidates: the fallback answers.
	x := bytes.Repeat([]byte(testSecret[:len(testSecret)-1]+"."), 200)
	if ContainsSecret(x, []byte(testSecret)) || !ContainsSecret(append(x, testSecret...), []byte(testSecret)) {
		t.Fatal("wrong answer on a line of near misses")
	}
}
