package visible

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The characters the rule must cover, by name, and ones it must leave alone.
func TestHidden(t *testing.T) {
	for _, r := range []rune{
		0x00, 0x09, 0x0a, 0x1b, 0x7f, 0x85, 0x9b, // Cc
		0xad, 0x061c, 0x180e, // soft hyphen, Arabic letter mark, Mongolian vowel separator
		0x200b, 0x200c, 0x200d, 0x200e, 0x200f, // zero width, LRM, RLM
		0x202a, 0x202b, 0x202c, 0x202d, 0x202e, // embeddings, overrides, PDF
		0x2060, 0x2066, 0x2067, 0x2068, 0x2069, // word joiner, isolates
		0xfeff, 0xfff9, 0xe0001, 0xe0041, 0xe007f, // BOM, interlinear annotation, tags
		0x2028, 0x2029, // line and paragraph separators
		0x034f, 0x115f, 0x3164, 0xffa0, // invisible letters and fillers
	} {
		if !Hidden(r) {
			t.Errorf("U+%04X is not Hidden", r)
		}
	}
	for _, r := range []rune{' ', 'a', 'ü', '€', '中', 0x05d0, 0x0627, 0x00a0, 0x3000, 0x1f600, 0xfe0f, 0xfffd} {
		if Hidden(r) {
			t.Errorf("U+%04X is Hidden", r)
		}
	}
	// Every bidirectional control is covered, whatever Unicode version the tables are.
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.Is(unicode.Bidi_Control, r) && !Hidden(r) {
			t.Errorf("Bidi_Control U+%04X is not Hidden", r)
		}
	}
}

func TestShow(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"pay 10\u202e00001\u202c EUR", "pay 10<U+202E>00001<U+202C> EUR"},
		{"a\nb\tc\x1b[31m", "a<U+000A>b<U+0009>c<U+001B>[31m"},
		{"zero\u200bwidth\ufeff", "zero<U+200B>width<U+FEFF>"},
		{"tag\U000e0041", "tag<U+E0041>"},
		{"Grün <b>€</b> 😀", "Grün <b>€</b> 😀"},
		{"", ""},
		{"a<U+202E>b <U <U+", "a<U+003C>U+202E>b <U <U+003C>U+"},
	} {
		if got := Show(tc.in); got != tc.want {
			t.Errorf("Show(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if Contains(Show(tc.in)) {
			t.Errorf("Show(%q) still holds a hidden character", tc.in)
		}
	}
}

// unshow undoes Show: every <U+XXXX> is the code point XXXX.
func unshow(t *testing.T, s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, escapeStart)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		s = s[i+len(escapeStart):]
		j := strings.IndexByte(s, '>')
		if j < 4 {
			t.Fatalf("an unterminated or short escape before %q", s)
		}
		n, err := strconv.ParseUint(s[:j], 16, 32)
		if err != nil || s[:j] != strings.ToUpper(s[:j]) {
			t.Fatalf("escape %q: %v", s[:j], err)
		}
		b.WriteRune(rune(n))
		s = s[j+1:]
	}
}

// FuzzShow: Show's result holds no Hidden character, is s itself when s needs no escape, and
// gives s back when every <U+XXXX> is read as its code point (so no two strings show the same).
func FuzzShow(f *testing.F) {
	for _, s := range []string{"", "plain", "pay 10\u202e00001\u202c EUR", "a<U+202E>b", "<U+", "<U+0041", "\x00\U000e0041\u2028", "<<U+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			s = strings.ToValidUTF8(s, "\ufffd")
		}
		shown := Show(s)
		if Contains(shown) {
			t.Fatalf("Show(%q) = %q holds a hidden character", s, shown)
		}
		if !Contains(s) && !strings.Contains(s, escapeStart) && shown != s {
			t.Fatalf("Show(%q) = %q changed a string with nothing to escape", s, shown)
		}
		if back := unshow(t, shown); back != s {
			t.Fatalf("Show(%q) = %q reads back as %q", s, shown, back)
		}
	})
}
