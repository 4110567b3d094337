package protocol

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxRelativePathBytes bounds a root-relative path in UTF-8 bytes.
const MaxRelativePathBytes = 4096

// Reasons RelativePathProblem gives; the tool-adapter layers put them in details.reason.
const (
	PathEmpty        = "empty"
	PathTooLong      = "too_long"
	PathNotUTF8      = "not_utf8"
	PathAbsolute     = "absolute"
	PathBackslash    = "backslash"
	PathControl      = "control_character"
	PathDotDot       = "dot_dot"
	PathNonCanonical = "non_canonical"
)

// RelativePathProblem checks the syntax of a root-relative path, the rule both sides of the
// host tool-adapter protocol apply (the daemon before dispatch, the adapter again because it
// trusts nobody): 1 to 4096 bytes of UTF-8, not absolute, no backslash, no control character
// (C0, DEL, C1; NUL included), no ".." segment, and canonical — no empty or "." segment, so no
// "a//b", "./a", "a/./b" or trailing "/". "." alone names the root. It returns "" for a valid
// path, else the reason; each side wraps the reason in its own error code.
func RelativePathProblem(p string) string {
	switch {
	case p == "":
		return PathEmpty
	case len(p) > MaxRelativePathBytes:
		return PathTooLong
	case !utf8.ValidString(p):
		return PathNotUTF8
	case p[0] == '/':
		return PathAbsolute
	case strings.IndexByte(p, '\\') >= 0:
		return PathBackslash
	case strings.ContainsFunc(p, unicode.IsControl):
		return PathControl
	case p == ".":
		return ""
	}
	canonical := true
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "..":
			return PathDotDot
		case "", ".":
			canonical = false
		}
	}
	if !canonical {
		return PathNonCanonical
	}
	return ""
}
