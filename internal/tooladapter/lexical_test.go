package tooladapter

import (
	"regexp"
	"strings"
	"testing"
)

// FuzzLexical checks each hand-written matcher against the regular expression it implements.
func FuzzLexical(f *testing.F) {
	for _, s := range []string{"", "a", "1.2.3", "0.0.0-rc.1+b.2", "01.2.3", "1.2", "1.2.3-", "1.2.3+", "1.2.3-a+b", "x_y", "A-b.c:d", ".a", "-a", strings.Repeat("a", 64), "tool-" + strings.Repeat("f", 64), "not_found", "Not_found", "a b"} {
		f.Add(s)
	}
	wire := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)
	adapterID := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	code := regexp.MustCompile(`^[a-z][a-z0-9_]{0,127}$`)
	digest := regexp.MustCompile(`^[a-f0-9]{64}$`)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidWireID(s, 1<<20), wire.MatchString(s); got != want {
			t.Fatalf("ValidWireID(%q) = %v", s, got)
		}
		if got, want := validToken(s, 1<<20, "._-"), adapterID.MatchString(s); got != want {
			t.Fatalf("adapter id %q = %v", s, got)
		}
		if got, want := ValidAdapterCode(s), code.MatchString(s); got != want {
			t.Fatalf("ValidAdapterCode(%q) = %v", s, got)
		}
		if got, want := validDigest(s), digest.MatchString(s); got != want {
			t.Fatalf("validDigest(%q) = %v", s, got)
		}
		if got, want := validSemver(s), semverPattern.MatchString(s); got != want {
			t.Fatalf("validSemver(%q) = %v", s, got)
		}
	})
}
