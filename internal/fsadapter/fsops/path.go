package fsops

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/protocol"
)

// MaxPathBytes bounds a relative path in UTF-8 bytes.
const MaxPathBytes = 4096

// Reasons in details.reason of invalid_path.
const (
	reasonEmpty        = "empty"
	reasonTooLong      = "too_long"
	reasonNotUTF8      = "not_utf8"
	reasonAbsolute     = "absolute"
	reasonBackslash    = "backslash"
	reasonControl      = "control_character"
	reasonDotDot       = "dot_dot"
	reasonNonCanonical = "non_canonical"
)

func pathError(reason string) *protocol.Error {
	return protocol.Errorf(CodeInvalidPath, "path must be a canonical root-relative path (%s)", reason).
		With(DetailReason, reason)
}

// ValidatePath checks the syntax of a root-relative path with the daemon's rules, without
// trusting that the daemon applied them: 1 to 4096 bytes of UTF-8, not absolute, no backslash,
// no control character (C0, DEL, C1; NUL included), no "." or ".." segment and no empty segment
// (so no "a//b", "./a", "a/./b" or trailing "/"). "." alone names the root. The error is
// invalid_path with details.reason; the message never quotes the path.
//
// Validation is a first line only: the kernel (openat2 with RESOLVE_BENEATH) decides whether a
// resolution stays beneath the root.
func ValidatePath(p string) *protocol.Error {
	switch {
	case p == "":
		return pathError(reasonEmpty)
	case len(p) > MaxPathBytes:
		return pathError(reasonTooLong)
	case !utf8.ValidString(p):
		return pathError(reasonNotUTF8)
	case p[0] == '/':
		return pathError(reasonAbsolute)
	case strings.IndexByte(p, '\\') >= 0:
		return pathError(reasonBackslash)
	case strings.ContainsFunc(p, unicode.IsControl):
		return pathError(reasonControl)
	case p == ".":
		return nil
	}
	canonical := true
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "..":
			return pathError(reasonDotDot)
		case "", ".":
			canonical = false
		}
	}
	if !canonical {
		return pathError(reasonNonCanonical)
	}
	return nil
}

// validName reports whether a directory entry's name can be addressed by a valid path, so that
// fs.list and fs.search never return a name the agent cannot pass back.
func validName(name string) bool {
	if name == "" || name == "." || name == ".." || !utf8.ValidString(name) ||
		strings.IndexByte(name, '\\') >= 0 || strings.IndexByte(name, '/') >= 0 {
		return false
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// joinPath joins a validated directory path and an entry name.
func joinPath(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// splitPath splits a validated path other than "." into its parent and its leaf.
func splitPath(p string) (dir, leaf string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ".", p
	}
	return p[:i], p[i+1:]
}
