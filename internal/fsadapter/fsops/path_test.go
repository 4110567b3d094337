//go:build linux

package fsops

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestValidatePath(t *testing.T) {
	ok := []string{".", "a", "a/b", "a.b/c", "...", "..a", "a..", "a/...", " ", "\u2025", "．．",
		"%2e%2e", "é/ü", strings.Repeat("a", 255), strings.Repeat("a/", 2047) + "ab"}
	for _, p := range ok {
		if perr := ValidatePath(p); perr != nil {
			t.Errorf("ValidatePath(%q) = %v, want ok", p, perr)
		}
	}
	bad := map[string]string{
		"":                        reasonEmpty,
		strings.Repeat("a", 4097): reasonTooLong,
		"a\xffb":                  reasonNotUTF8,
		"/a":                      reasonAbsolute,
		"/":                       reasonAbsolute,
		"a\\b":                    reasonBackslash,
		"a\x00b":                  reasonControl,
		"a\nb":                    reasonControl,
		"a\x7f":                   reasonControl,
		"a\u0085":                 reasonControl,
		"..":                      reasonDotDot,
		"a/..":                    reasonDotDot,
		"../a":                    reasonDotDot,
		"a/../b":                  reasonDotDot,
		"a//b":                    reasonNonCanonical,
		"./a":                     reasonNonCanonical,
		"a/./b":                   reasonNonCanonical,
		"a/":                      reasonNonCanonical,
		"a/.":                     reasonNonCanonical,
		"./":                      reasonNonCanonical,
		"//":                      reasonAbsolute,
	}
	for p, reason := range bad {
		perr := ValidatePath(p)
		if perr == nil || perr.Code != CodeInvalidPath || perr.Details[DetailReason] != reason {
			t.Errorf("ValidatePath(%q) = %v, want invalid_path (%s)", p, perr, reason)
		}
	}
}

// checkValidPathProperty asserts what a valid path implies, for the fuzz target too.
func checkValidPathProperty(t testing.TB, p string) {
	if ValidatePath(p) != nil {
		return
	}
	if p != "." && (!filepath.IsLocal(p) || filepath.Clean(p) != p) {
		t.Fatalf("ValidatePath accepted %q, which is not a clean local path", p)
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			t.Fatalf("ValidatePath accepted %q with a .. segment", p)
		}
	}
}
