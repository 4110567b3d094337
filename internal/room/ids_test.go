package room

import (
	"regexp"
	"testing"
)

// The grammars as regular expressions: the hand matchers must agree with them on every input.
var grammars = []struct {
	name  string
	re    *regexp.Regexp
	match func(string) bool
}{
	{"room", regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`), ValidRoomID},
	{"capability", regexp.MustCompile(`^[a-z0-9][a-z0-9._:-]{0,63}$`), ValidCapabilityID},
	{"action", regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`), ValidAction},
	{"request", regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`), ValidRequestID},
	{"code", regexp.MustCompile(`^[a-z][a-z_]{0,31}$`), validCode},
	{"host", regexp.MustCompile(`^[0-9a-f]{64}$`), func(s string) bool { return HostID(s).Valid() }},
}

func FuzzGrammars(f *testing.F) {
	for _, s := range []string{"", "a", "r1", "living-room", "_x", "Ab", "light.v2:x", "set_color", "a.b:c-1",
		"fd1724385aa0c75b64fb78cd602fa1d991fdebf76b13c58ed702eac835e9f618",
		"FD1724385aa0c75b64fb78cd602fa1d991fdebf76b13c58ed702eac835e9f618", "x\n", "é", "a*", "a>", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, g := range grammars {
			if got, want := g.match(s), g.re.MatchString(s); got != want {
				t.Fatalf("%s(%q) = %v, the grammar says %v", g.name, s, got, want)
			}
		}
	})
}

func TestGrammarsAtTheirBounds(t *testing.T) {
	long := func(c byte, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = c
		}
		return string(b)
	}
	for _, s := range []string{long('a', 31), long('a', 32), long('a', 33), long('a', 63), long('a', 64), long('a', 65),
		long('0', 64), long('f', 63), long('g', 64), "a\n", "\na", "-a", "a-", "A"} {
		for _, g := range grammars {
			if got, want := g.match(s), g.re.MatchString(s); got != want {
				t.Errorf("%s(%q) = %v, the grammar says %v", g.name, s, got, want)
			}
		}
	}
}
